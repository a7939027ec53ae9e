package deploy

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/ringlimit/ringlimit/api"
	"github.com/ringlimit/ringlimit/internal/certfile"
	"github.com/ringlimit/ringlimit/policy"
	"github.com/ringlimit/ringlimit/rls"
)

// nodeBin is ringlimit-node built from ../cmd/node, and devcertsBin
// ../cmd/devcerts, with the root module's own dependencies; "" when the go
// tool is missing.
var nodeBin, devcertsBin string

// imageEnv is the environment the container image sets.
var imageEnv = map[string]string{
	"RINGLIMIT_HTTP":   "0.0.0.0:8080",
	"RINGLIMIT_GRPC":   "0.0.0.0:9090",
	"RINGLIMIT_PEER":   "0.0.0.0:9190",
	"RINGLIMIT_GOSSIP": "0.0.0.0:7946",
}

func TestMain(m *testing.M) {
	os.Exit(buildNodeAndRun(m))
}

func buildNodeAndRun(m *testing.M) int {
	goTool, err := exec.LookPath("go")
	if err != nil {
		fmt.Fprintln(os.Stderr, "deploy: no go tool; the validate-flags tests are skipped")
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "ringlimit-deploy-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	build := exec.Command(goTool, "build", "-o", dir+string(filepath.Separator), "./cmd/node", "./cmd/devcerts")
	build.Dir = ".." // the root module, built with its own go.mod
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "deploy: go build ./cmd/node ./cmd/devcerts: %v\n%s", err, out)
		return 1
	}
	nodeBin, devcertsBin = filepath.Join(dir, "node"), filepath.Join(dir, "devcerts")
	return m.Run()
}

func needNode(t *testing.T) {
	t.Helper()
	if nodeBin == "" {
		t.Skip("no go tool to build ringlimit-node")
	}
}

// devcerts runs cmd/devcerts for the nodes names and returns its files as
// secrets.yaml tells to put them in the Secret: ca.crt, and NAME.crt and
// NAME.key for each node.
func devcerts(t *testing.T, names ...string) map[string][]byte {
	t.Helper()
	needNode(t)
	dir := t.TempDir()
	cmd := exec.Command(devcertsBin, "-dir", dir, "-nodes", strings.Join(names, ","), "-ip", "", "-days", "1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("devcerts: %v: %s", err, out)
	}
	read := func(name string) []byte {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	files := map[string][]byte{"ca.crt": read("ca.pem")}
	for _, n := range names {
		files[n+".crt"], files[n+".key"] = read(n+".pem"), read(n+"-key.pem")
	}
	return files
}

// pod is what one pod of a StatefulSet sees: its arguments with $(VAR)
// expanded, its environment, and its mounted files under root.
type pod struct {
	name string
	root string   // the pod's file system: mount point P is at root+P
	args []string // expanded, file paths under root
	env  map[string]string
}

var varRef = regexp.MustCompile(`\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// expand expands $(VAR) as the kubelet does: a defined variable is
// replaced, an undefined reference kept, and $$ is a $.
func expand(s string, env map[string]string) string {
	return varRef.ReplaceAllStringFunc(s, func(m string) string {
		if m == "$$" {
			return "$"
		}
		if v, ok := env[m[2:len(m)-1]]; ok {
			return v
		}
		return m
	})
}

// fixtures are the contents of Secrets and ConfigMaps by name, used instead
// of (or where there is no) rendered object.
type fixtures map[string]map[string][]byte

// newPod lays out pod ordinal of o's StatefulSet in a temporary directory:
// every Secret and ConfigMap volume written out (fix first, then the
// rendered objects), the environment with the downward API's values, and
// the arguments expanded and pointed at the files.
func newPod(t *testing.T, o *objects, ordinal int, namespace string, fix fixtures) *pod {
	t.Helper()
	sts := o.statefulSet(t)
	c := container(t, sts)
	p := &pod{name: fmt.Sprintf("%s-%d", sts.Name, ordinal), root: t.TempDir(), env: map[string]string{}}
	for k, v := range imageEnv {
		p.env[k] = v
	}
	mem := c.Resources.Limits[corev1.ResourceMemory]
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			p.env[e.Name] = expand(e.Value, p.env)
		case e.ValueFrom.FieldRef != nil:
			switch path := e.ValueFrom.FieldRef.FieldPath; path {
			case "status.podIP":
				p.env[e.Name] = "10.0.0.5"
			case "metadata.namespace":
				p.env[e.Name] = namespace
			case "metadata.name":
				p.env[e.Name] = p.name
			default:
				t.Fatalf("env %s: fieldRef %s not simulated", e.Name, path)
			}
		case e.ValueFrom.ResourceFieldRef != nil:
			r := e.ValueFrom.ResourceFieldRef
			if r.Resource != "limits.memory" {
				t.Fatalf("env %s: resourceFieldRef %s not simulated", e.Name, r.Resource)
			}
			div := r.Divisor.Value()
			if div == 0 {
				div = 1
			}
			p.env[e.Name] = strconv.FormatInt(mem.Value()/div, 10)
		default:
			t.Fatalf("env %s: %+v not simulated", e.Name, e.ValueFrom)
		}
	}

	volumes := map[string]corev1.Volume{}
	for _, v := range sts.Spec.Template.Spec.Volumes {
		volumes[v.Name] = v
	}
	for _, pvc := range sts.Spec.VolumeClaimTemplates { // an empty volume of the pod's own
		volumes[pvc.Name] = corev1.Volume{Name: pvc.Name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}
	}
	var mountPaths []string
	for _, m := range c.VolumeMounts {
		v, ok := volumes[m.Name]
		if !ok {
			t.Fatalf("volumeMount %s: no such volume", m.Name)
		}
		var files map[string][]byte
		var items []corev1.KeyToPath
		switch {
		case v.Secret != nil:
			items = v.Secret.Items
			if f, ok := fix[v.Secret.SecretName]; ok {
				files = f
			} else if s, ok := o.secrets[v.Secret.SecretName]; ok {
				files = secretFiles(s)
			} else {
				t.Fatalf("volume %s: Secret %s neither rendered nor a fixture", v.Name, v.Secret.SecretName)
			}
		case v.ConfigMap != nil:
			items = v.ConfigMap.Items
			if f, ok := fix[v.ConfigMap.Name]; ok {
				files = f
			} else if cm, ok := o.configMaps[v.ConfigMap.Name]; ok {
				files = configMapFiles(cm)
			} else {
				t.Fatalf("volume %s: ConfigMap %s neither rendered nor a fixture", v.Name, v.ConfigMap.Name)
			}
		case v.EmptyDir != nil: // an empty directory
		default:
			t.Fatalf("volume %s: only Secret, ConfigMap, emptyDir and claimed volumes are simulated", v.Name)
		}
		if len(items) > 0 {
			picked := map[string][]byte{}
			for _, it := range items {
				picked[it.Path] = files[it.Key]
			}
			files = picked
		}
		dir := filepath.Join(p.root, m.MountPath)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, data := range files {
			if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		mountPaths = append(mountPaths, m.MountPath)
	}
	// The longest mount point first, for nested mounts.
	slices.SortFunc(mountPaths, func(a, b string) int { return len(b) - len(a) })
	for _, a := range c.Args {
		a = expand(a, p.env)
		if strings.Contains(a, "$(") {
			t.Errorf("argument %q refers to an undefined variable", a)
		}
		if flag, value, ok := strings.Cut(a, "="); ok {
			for _, mp := range mountPaths {
				if value == mp || strings.HasPrefix(value, mp+"/") {
					a = flag + "=" + p.root + value
					break
				}
			}
		}
		p.args = append(p.args, a)
	}
	return p
}

// flag is the value of the pod's last --name=value argument.
func (p *pod) flag(name string) (string, bool) {
	v, ok := "", false
	for _, a := range p.args {
		if f, val, cut := strings.Cut(a, "="); cut && f == "--"+name {
			v, ok = val, true
		}
	}
	return v, ok
}

// validateFlags runs `ringlimit-node validate-flags` on args with env
// alone as the environment, and returns its exit code and output.
func validateFlags(t *testing.T, args []string, env map[string]string) (int, string) {
	t.Helper()
	needNode(t)
	cmd := exec.Command(nodeBin, append([]string{"validate-flags"}, args...)...)
	cmd.Env = []string{}
	for _, k := range sortedKeys(env) {
		cmd.Env = append(cmd.Env, k+"="+env[k])
	}
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, string(out)
	case errors.As(err, &exit):
		return exit.ExitCode(), string(out)
	}
	t.Fatalf("validate-flags: %v", err)
	return -1, ""
}

// checkNode asserts that the node accepts pod p's flags, and loads the
// files they name as the node would: the policy, the rls configuration,
// the admin tokens and (for every pod of the StatefulSet) the TLS files.
func checkNode(t *testing.T, o *objects, namespace string, fix fixtures) {
	t.Helper()
	p := newPod(t, o, 0, namespace, fix)
	if code, out := validateFlags(t, p.args, p.env); code != 0 {
		t.Fatalf("validate-flags %q with env %v: exit %d: %s", p.args, p.env, code, out)
	} else if strings.TrimSpace(out) != "flags ok" {
		t.Errorf("validate-flags: %q, want \"flags ok\"", out)
	}
	if path, ok := p.flag("policy"); ok {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		set, err := policy.Parse(data, path)
		if err != nil {
			t.Errorf("policy file: %v", err)
		} else if len(set.Policies) == 0 || set.Policies[set.Default] == nil {
			t.Errorf("policy file: policies %v, default %q", sortedKeys(set.Policies), set.Default)
		}
	}
	if path, ok := p.flag("rls-config"); ok {
		cfg, err := rls.Load(path)
		if err != nil {
			t.Errorf("rls config: %v", err)
		} else {
			if len(cfg.Domains()) == 0 {
				t.Errorf("rls config: no domain")
			}
			if w := cfg.Warnings(); len(w) > 0 {
				t.Errorf("rls config: warnings %q", w)
			}
		}
	}
	if path, ok := p.flag("admin-token-file"); ok {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := api.ParseTokens(data); err != nil {
			t.Errorf("admin tokens: %v", err)
		}
	}
	if _, ok := p.flag("tls-cert"); ok {
		sts := o.statefulSet(t)
		for i := range int(*sts.Spec.Replicas) {
			checkNodeCert(t, newPod(t, o, i, namespace, fix))
		}
	}
}

// checkNodeCert loads pod p's --tls-* files with the node's loader and
// asserts what the node asserts before it starts: the certificate names
// the pod (--name) and verifies against the CA for server and client use.
func checkNodeCert(t *testing.T, p *pod) {
	t.Helper()
	ca, _ := p.flag("tls-ca")
	cert, _ := p.flag("tls-cert")
	key, _ := p.flag("tls-key")
	_, err := certfile.Load(certfile.Files{CA: ca, Cert: cert, Key: key,
		Check: func(c *tls.Certificate, roots *x509.CertPool) error {
			leaf := c.Leaf
			if !slices.Contains(leaf.DNSNames, p.name) && leaf.Subject.CommonName != p.name {
				return fmt.Errorf("the certificate names %q and %q, not %q", leaf.DNSNames, leaf.Subject.CommonName, p.name)
			}
			for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
				if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
					return err
				}
			}
			return nil
		}})
	if err != nil {
		t.Errorf("pod %s: TLS files: %v", p.name, err)
	}
}
