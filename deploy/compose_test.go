package deploy

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// composeFile is the part of compose.yaml the test reads; decoding is
// strict, so a key it does not know fails the test.
type composeFile struct {
	Name     string
	XNode    any `yaml:"x-node"`
	Services map[string]composeService
}

type composeService struct {
	Image           string
	Restart         string
	StopGracePeriod string `yaml:"stop_grace_period"`
	ReadOnly        bool   `yaml:"read_only"`
	Hostname        string
	Environment     map[string]string
	Volumes         []string
	Ports           []string
}

func loadCompose(t *testing.T) composeFile {
	t.Helper()
	data, err := os.ReadFile("compose/compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var c composeFile
	if err := dec.Decode(&c); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	return c
}

// TestCompose checks the compose file against the files setup.sh makes
// and the node's flag parser: three nodes, each joining the three by name,
// publishing only its HTTP and gRPC ports, mounting its own key and not
// the others' nor the CA's, and with an environment (the image's and its
// own) that ringlimit-node validate-flags accepts once the mounted files
// are where the environment says.
func TestCompose(t *testing.T) {
	needNode(t)
	c := loadCompose(t)
	secrets := t.TempDir()
	if out, err := exec.Command("compose/setup.sh", secrets).CombinedOutput(); err != nil {
		t.Fatalf("setup.sh: %v: %s", err, out)
	}
	if info, err := os.Stat(filepath.Join(secrets, "certs", "ca-key.pem")); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("ca-key.pem: %v, mode %v: want 0600, the CA's key private", err, info.Mode().Perm())
	}

	names := slices.Sorted(func(yield func(string) bool) {
		for n := range c.Services {
			if !yield(n) {
				return
			}
		}
	})
	if want := []string{"node-1", "node-2", "node-3"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("services %q, want %q", names, want)
	}
	for i, name := range names {
		s := c.Services[name]
		t.Run(name, func(t *testing.T) {
			check(t, "hostname", s.Hostname, name)
			check(t, "RINGLIMIT_NAME", s.Environment["RINGLIMIT_NAME"], name)
			check(t, "RINGLIMIT_JOIN", s.Environment["RINGLIMIT_JOIN"], "node-1:7946,node-2:7946,node-3:7946")
			check(t, "RINGLIMIT_CLUSTER_SIZE", s.Environment["RINGLIMIT_CLUSTER_SIZE"], "3")
			check(t, "image", s.Image, "${RINGLIMIT_IMAGE:-"+releaseImage+"}")
			check(t, "read_only", s.ReadOnly, true)
			// Host ports clear of scripts/local-cluster.sh's: HTTP 1808I, gRPC 1909I.
			check(t, "ports", s.Ports, []string{fmt.Sprintf("1808%d:8080", i+1), fmt.Sprintf("1909%d:9090", i+1)})

			// The container's file system: each volume's source copied to
			// its target under root, then the environment's paths moved
			// under root too.
			root := t.TempDir()
			var sources []string
			for _, v := range s.Volumes {
				parts := strings.Split(v, ":")
				if len(parts) != 3 || parts[2] != "ro" {
					t.Fatalf("volume %q: want SOURCE:TARGET:ro", v)
				}
				src := parts[0]
				sources = append(sources, src)
				if rest, ok := strings.CutPrefix(src, "./secrets/"); ok {
					src = filepath.Join(secrets, rest)
				} else {
					src = filepath.Join("compose", src)
				}
				data, err := os.ReadFile(src)
				if err != nil {
					t.Fatalf("volume %q: %v", v, err)
				}
				dst := filepath.Join(root, parts[1])
				if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(dst, data, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			for _, src := range sources {
				if strings.Contains(src, "ca-key") || strings.Contains(src, "-key.pem") && !strings.Contains(src, name+"-key.pem") {
					t.Errorf("%s mounts %s: a node sees its own key alone", name, src)
				}
			}
			env := map[string]string{}
			for k, v := range imageEnv {
				env[k] = v
			}
			for k, v := range s.Environment {
				if strings.HasPrefix(v, "/etc/ringlimit/") {
					if _, err := os.Stat(filepath.Join(root, v)); err != nil {
						t.Errorf("%s=%s: no volume puts a file there", k, v)
					}
					v = filepath.Join(root, v)
				}
				env[k] = v
			}
			env["RINGLIMIT_ADVERTISE_HOST"] = fmt.Sprintf("172.18.0.%d", i+2) // the node finds its address on the compose network
			if code, out := validateFlags(t, nil, env); code != 0 {
				t.Errorf("validate-flags with %s's environment: exit %d: %s", name, code, out)
			}
			delete(env, "RINGLIMIT_TLS_KEY")
			if code, out := validateFlags(t, nil, env); code != 2 {
				t.Errorf("validate-flags without the TLS key: exit %d, want 2: %s", code, out)
			}
		})
	}
}
