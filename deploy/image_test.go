package deploy

import (
	"archive/tar"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// imageConfig is the part of `podman image inspect` the image test reads.
type imageConfig struct {
	Config struct {
		User         string
		Entrypoint   []string
		Cmd          []string
		ExposedPorts map[string]struct{}
		Env          []string
	}
	HealthCheck struct {
		Test []string
	}
	Architecture string
	Os           string
}

// podman returns the path of podman, skipping the test where it is missing
// (it is required under CI=true, where .ci/run installs it).
func podman(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("podman")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("podman is missing under CI=true: .ci/run installs it")
		}
		t.Skip("podman is not installed (apt-get install podman)")
	}
	return p
}

// TestImage builds the image with scripts/image.sh and checks what a
// runtime would read from it: entrypoint, user, ports, environment and
// health check. It then takes the binary out of the image's only layer and
// runs it here: it is static, prints its version, and accepts the flags the
// image's environment gives it with the Kubernetes manifests' arguments.
func TestImage(t *testing.T) {
	pm := podman(t)
	tag := fmt.Sprintf("localhost/ringlimit-node:test-%d", time.Now().UnixNano())
	build := exec.Command("../scripts/image.sh", tag)
	build.Stderr = os.Stderr
	out, err := build.Output()
	if err != nil {
		t.Fatalf("scripts/image.sh: %v", err)
	}
	t.Cleanup(func() {
		if out, err := exec.Command(pm, "rmi", "-f", tag).CombinedOutput(); err != nil {
			t.Errorf("podman rmi %s: %v: %s", tag, err, out)
		}
	})
	if got := lastLine(string(out)); got != tag {
		t.Fatalf("scripts/image.sh printed %q last, want the tag %q", got, tag)
	}

	raw, err := exec.Command(pm, "image", "inspect", tag).Output()
	if err != nil {
		t.Fatalf("podman image inspect: %v", err)
	}
	var imgs []imageConfig
	if err := json.Unmarshal(raw, &imgs); err != nil || len(imgs) != 1 {
		t.Fatalf("podman image inspect: %d images, %v: %s", len(imgs), err, raw)
	}
	img := imgs[0]
	if want := []string{"/ringlimit-node"}; !reflect.DeepEqual(img.Config.Entrypoint, want) {
		t.Errorf("entrypoint %q, want %q", img.Config.Entrypoint, want)
	}
	if len(img.Config.Cmd) != 0 {
		t.Errorf("cmd %q, want none (arguments are the node's flags)", img.Config.Cmd)
	}
	if img.Config.User != "65532:65532" {
		t.Errorf("user %q, want 65532:65532 (not root)", img.Config.User)
	}
	var ports []string
	for p := range img.Config.ExposedPorts {
		ports = append(ports, p)
	}
	slices.Sort(ports)
	if want := []string{"7946/tcp", "7946/udp", "8080/tcp", "9090/tcp", "9190/tcp"}; !reflect.DeepEqual(ports, want) {
		t.Errorf("exposed ports %q, want %q", ports, want)
	}
	wantEnv := []string{
		"RINGLIMIT_HTTP=0.0.0.0:8080", "RINGLIMIT_GRPC=0.0.0.0:9090",
		"RINGLIMIT_PEER=0.0.0.0:9190", "RINGLIMIT_GOSSIP=0.0.0.0:7946",
	}
	for _, e := range wantEnv {
		if !slices.Contains(img.Config.Env, e) {
			t.Errorf("environment %q lacks %s", img.Config.Env, e)
		}
	}
	if want := []string{"CMD", "/ringlimit-node", "probe"}; !reflect.DeepEqual(img.HealthCheck.Test, want) {
		t.Errorf("health check %q, want %q", img.HealthCheck.Test, want)
	}

	bin := extractBinary(t, pm, tag)
	v, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatalf("ringlimit-node version, from the image: %v", err)
	}
	if !strings.HasPrefix(string(v), "ringlimit-node ") || strings.Contains(string(v), "unknown") {
		t.Errorf("ringlimit-node version printed %q, want a version and the commit", v)
	}
	if ldd, err := exec.Command("ldd", bin).CombinedOutput(); err == nil || !strings.Contains(string(ldd), "not a dynamic executable") {
		t.Errorf("ldd %s: %v: %s: want a static binary", bin, err, ldd)
	}
	// The image's environment binds every listener to 0.0.0.0; with an
	// advertised pod address and the manifests' TLS flags the node takes it.
	args := []string{"validate-flags", "--name=ringlimit-0", "--insecure"}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(slices.Clone(wantEnv), "POD_IP=10.0.0.5")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("%s %q with the image's environment: %v: %s", bin, args, err, out)
	}
	cmd = exec.Command(bin, "validate-flags", "--name=ringlimit-0")
	cmd.Env = append(slices.Clone(wantEnv), "POD_IP=10.0.0.5")
	if out, err := cmd.CombinedOutput(); err == nil || cmd.ProcessState.ExitCode() != 2 {
		t.Errorf("validate-flags without TLS on 0.0.0.0: %v (exit %d), want exit 2: %s", err, cmd.ProcessState.ExitCode(), out)
	}
}

// extractBinary saves the image as a docker archive and copies
// /ringlimit-node out of its layer into a temporary directory.
func extractBinary(t *testing.T, pm, tag string) string {
	t.Helper()
	dir := t.TempDir()
	archive := filepath.Join(dir, "image.tar")
	if out, err := exec.Command(pm, "save", "--format", "docker-archive", "-o", archive, tag).CombinedOutput(); err != nil {
		t.Fatalf("podman save: %v: %s", err, out)
	}
	files := readTar(t, archive, nil)
	var manifest []struct{ Layers []string }
	if err := json.Unmarshal(files["manifest.json"], &manifest); err != nil || len(manifest) != 1 {
		t.Fatalf("manifest.json: %v: %s", err, files["manifest.json"])
	}
	if n := len(manifest[0].Layers); n != 1 {
		t.Errorf("%d layers, want 1 (the binary alone, FROM scratch)", n)
	}
	var names []string
	var bin []byte
	for _, l := range manifest[0].Layers {
		layer := filepath.Join(dir, "layer.tar")
		if err := os.WriteFile(layer, files[l], 0o600); err != nil {
			t.Fatal(err)
		}
		readTar(t, layer, func(h *tar.Header, body []byte) {
			names = append(names, h.Name)
			if strings.TrimPrefix(h.Name, "/") == "ringlimit-node" {
				bin = body
				if h.Mode&0o111 == 0 {
					t.Errorf("/ringlimit-node has mode %o, want executable", h.Mode)
				}
			}
		})
	}
	if bin == nil {
		t.Fatalf("no /ringlimit-node in the image's layers: %q", names)
	}
	if len(names) != 1 {
		t.Errorf("the image holds %q, want /ringlimit-node alone", names)
	}
	path := filepath.Join(dir, "ringlimit-node")
	if err := os.WriteFile(path, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// readTar reads every regular file of a tar archive, calling each with its
// header and contents when each is set, and returns them by name.
func readTar(t *testing.T, path string, each func(*tar.Header, []byte)) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatalf("%s: %s: %v", path, h.Name, err)
		}
		files[h.Name] = body
		if each != nil {
			each(h, body)
		}
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
