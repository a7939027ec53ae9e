package deploy

import (
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"sigs.k8s.io/yaml"

	"github.com/ringlimit/ringlimit/internal/devca"
)

const (
	chartDir  = "helm/ringlimit"
	release   = "rl"
	namespace = "limits"
)

func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// monitoringCaps are the default capabilities plus the Prometheus
// Operator's ServiceMonitor.
func monitoringCaps() *chartutil.Capabilities {
	caps := *chartutil.DefaultCapabilities
	caps.APIVersions = append(slices.Clone(caps.APIVersions), "monitoring.coreos.com/v1", "monitoring.coreos.com/v1/ServiceMonitor")
	return &caps
}

// renderValues renders the chart as `helm template` would for release rl
// in namespace limits, with the values (YAML) over the chart's; values
// that values.schema.json refuses are an error, as with helm install.
func renderValues(t *testing.T, name, values string, caps *chartutil.Capabilities) (map[string]string, error) {
	t.Helper()
	ch := loadChart(t)
	vals, err := chartutil.ReadValues([]byte(values))
	if err != nil {
		t.Fatal(err)
	}
	rv, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{Name: name, Namespace: namespace, Revision: 1, IsInstall: true}, caps)
	if err != nil {
		return nil, err // values.schema.json refused the values
	}
	return engine.Render(ch, rv)
}

// render renders and decodes the chart's objects.
func render(t *testing.T, values string, caps *chartutil.Capabilities) *objects {
	t.Helper()
	return renderRelease(t, release, values, caps)
}

func renderRelease(t *testing.T, name, values string, caps *chartutil.Capabilities) *objects {
	t.Helper()
	out, err := renderValues(t, name, values, caps)
	if err != nil {
		t.Fatal(err)
	}
	return decodeRendered(t, out)
}

func decodeRendered(t *testing.T, out map[string]string) *objects {
	t.Helper()
	o := newObjects("chart")
	for _, file := range sortedKeys(out) {
		if strings.HasSuffix(file, "NOTES.txt") {
			continue
		}
		o.decodeInto(t, file, []byte(out[file]))
	}
	return o
}

func newGossipKey(t *testing.T) string {
	t.Helper()
	k := make([]byte, 32)
	for i := range k {
		k[i] = byte(i*7 + 1)
	}
	return base64.StdEncoding.EncodeToString(k)
}

// sharedCert is a CA and one certificate naming every pod of names, what
// cert-manager would make: Secret files ca.crt, tls.crt, tls.key.
func sharedCert(t *testing.T, names ...string) map[string][]byte {
	t.Helper()
	ca, err := devca.NewCA("test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := ca.Issue("ringlimit", names, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return map[string][]byte{"ca.crt": ca.CertPEM(), "tls.crt": cert, "tls.key": key}
}

func podNames(prefix string, n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("%s-%d", prefix, i))
	}
	return out
}

// A variant is one set of values and what its rendering must hold.
type variant struct {
	name   string
	values string
	want   want
	fix    func(t *testing.T) fixtures
}

var variants = []variant{{
	name: "defaults",
	want: want{name: "rl-ringlimit", headless: "rl-ringlimit-headless", replicas: 3, antiAffinity: "soft",
		tls: true, admin: true, policy: true, rls: true, monitor: true, memoryLimit: "256Mi"},
}, {
	name: "five-hard-existing",
	values: `
replicaCount: 5
antiAffinity: hard
tls: {existingSecret: node-certs, perPodCerts: true}
gossipKey: {existingSecret: gossip-keys}
adminTokens: {enabled: false}
policy: {existingConfigMap: limits-policy}
rls: {enabled: false}
serviceMonitor: {enabled: false}
networkPolicy:
  apiFrom:
    - namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: gateways}}
`,
	want: want{name: "rl-ringlimit", headless: "rl-ringlimit-headless", replicas: 5, antiAffinity: "hard",
		tls: true, perPodCerts: true, policy: true, memoryLimit: "256Mi",
		external: []string{"node-certs", "gossip-keys", "limits-policy"}},
	fix: func(t *testing.T) fixtures {
		example, err := os.ReadFile("../examples/policy.yaml")
		if err != nil {
			t.Fatal(err)
		}
		return fixtures{
			"node-certs":    devcerts(t, podNames("rl-ringlimit", 5)...),
			"gossip-keys":   {"gossip.key": []byte(newGossipKey(t) + "\n")},
			"limits-policy": {"policy.yaml": example},
		}
	},
}, {
	name: "insecure-extra",
	values: `
fullnameOverride: limiter
tls: {enabled: false}
gossipKey: {keys: "` + base64.StdEncoding.EncodeToString([]byte("0123456789abcdef")) + `"}
adminTokens: {tokens: "ops:0123456789abcdef0123456789"}
rls:
  files:
    edge.yaml: null
    api.yml: |
      domain: api
      descriptors:
        - key: tenant
          rate_limit: {unit: second, requests_per_unit: 50, algorithm: token_bucket}
extraArgs: ["--log-level=debug", "--rls-headers", "--replication-factor=2"]
extraEnv: [{name: GOGC, value: "200"}]
resources:
  requests: {cpu: 250m, memory: 256Mi}
  limits: {cpu: "1", memory: 512Mi}
`,
	want: want{name: "limiter", headless: "limiter-headless", replicas: 3, antiAffinity: "soft",
		admin: true, policy: true, rls: true, monitor: true, memoryLimit: "512Mi"},
}}

func (v variant) fixtures(t *testing.T) fixtures {
	if v.fix == nil {
		return nil
	}
	return v.fix(t)
}

// TestChart renders every variant and runs the shared assertions and the
// node's validate-flags on it.
func TestChart(t *testing.T) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			o := render(t, v.values, monitoringCaps())
			checkDeployment(t, o, v.want)
			checkNode(t, o, namespace, v.fixtures(t))
		})
	}
}

func TestChartVariantDetails(t *testing.T) {
	t.Run("defaults", func(t *testing.T) {
		o := render(t, "", monitoringCaps())
		ch := loadChart(t)
		c := container(t, o.statefulSet(t))
		check(t, "image", c.Image, "ghcr.io/ringlimit/ringlimit-node:"+ch.Metadata.AppVersion)
		check(t, "chart version", ch.Metadata.Version, "0.1.0")
		check(t, "chart apiVersion", ch.Metadata.APIVersion, "v2")
		check(t, "Secrets", sortedKeys(o.secrets), []string{"rl-ringlimit-admin", "rl-ringlimit-gossip", "rl-ringlimit-tls", "rl-ringlimit-tls-ca"})
		check(t, "ConfigMaps", sortedKeys(o.configMaps), []string{"rl-ringlimit-policy", "rl-ringlimit-rls"})
		// The generated node certificate names every pod and nothing else.
		block, _ := pem.Decode(o.secrets["rl-ringlimit-tls"].Data["tls.crt"])
		if block == nil {
			t.Fatal("tls.crt: no PEM")
		}
		leaf, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		check(t, "certificate DNS names", leaf.DNSNames, podNames("rl-ringlimit", 3))
		check(t, "names annotation", o.secrets["rl-ringlimit-tls"].Annotations["ringlimit.io/names"], strings.Join(podNames("rl-ringlimit", 3), ","))
		if d := time.Until(leaf.NotAfter); d < 364*24*time.Hour || d > 366*24*time.Hour {
			t.Errorf("certificate valid for %v more, want 365 days", d)
		}
		// The generated gossip key: one 32-byte base64 key.
		key := strings.TrimSpace(string(o.secrets["rl-ringlimit-gossip"].Data["gossip.key"]))
		if k, err := base64.StdEncoding.DecodeString(key); err != nil || len(k) != 32 {
			t.Errorf("gossip key %q: %d bytes, %v", key, len(k), err)
		}
		if _, ok := o.statefulSet(t).Spec.Template.Annotations["checksum/config"]; !ok {
			t.Errorf("no checksum/config annotation")
		}
	})
	t.Run("insecure-extra", func(t *testing.T) {
		o := render(t, variants[2].values, monitoringCaps())
		c := container(t, o.statefulSet(t))
		check(t, "last arguments", c.Args[len(c.Args)-3:], []string{"--log-level=debug", "--rls-headers", "--replication-factor=2"})
		check(t, "cluster name", flagValues(t, c.Args)["cluster-name"], "limiter")
		check(t, "Secrets", sortedKeys(o.secrets), []string{"limiter-admin", "limiter-gossip"})
		check(t, "rls files", sortedKeys(o.configMaps["limiter-rls"].Data), []string{"api.yml"})
		p := newPod(t, o, 0, namespace, nil)
		check(t, "GOMEMLIMIT", p.env["GOMEMLIMIT"], "536870912")
		check(t, "GOGC", p.env["GOGC"], "200")
		check(t, "cpu limit", c.Resources.Limits.Cpu().String(), "1")
	})
	t.Run("five-hard-existing", func(t *testing.T) {
		o := render(t, variants[1].values, monitoringCaps())
		check(t, "Secrets", sortedKeys(o.secrets), []string{})
		check(t, "ConfigMaps", sortedKeys(o.configMaps), []string{})
		p := newPod(t, o, 3, namespace, variants[1].fixtures(t))
		cert, _ := p.flag("tls-cert")
		check(t, "pod 3's certificate", strings.TrimPrefix(cert, p.root), "/etc/ringlimit/tls/rl-ringlimit-3.crt")
		np := o.networkPolicies[0]
		if len(np.Spec.Ingress) != 2 || len(np.Spec.Ingress[1].From) != 1 || np.Spec.Ingress[1].From[0].NamespaceSelector == nil {
			t.Errorf("the public rule does not take networkPolicy.apiFrom: %+v", np.Spec.Ingress)
		}
	})
}

// TestChartValidateFlagsFails: the check can fail. A bad flag in extraArgs
// renders, and validate-flags refuses it; so does a node without TLS that
// lacks --insecure.
func TestChartValidateFlagsFails(t *testing.T) {
	needNode(t)
	o := render(t, `extraArgs: ["--drain-delay=banana"]`, nil)
	p := newPod(t, o, 0, namespace, nil)
	code, out := validateFlags(t, p.args, p.env)
	if code != 2 || !strings.Contains(out, "drain-delay") {
		t.Errorf("validate-flags with --drain-delay=banana: exit %d: %s", code, out)
	}

	o = render(t, variants[2].values, nil)
	p = newPod(t, o, 0, namespace, nil)
	args := slices.DeleteFunc(slices.Clone(p.args), func(a string) bool { return a == "--insecure" })
	if len(args) != len(p.args)-1 {
		t.Fatalf("no --insecure in %q", p.args)
	}
	code, out = validateFlags(t, args, p.env)
	if code != 2 || !strings.Contains(out, "--insecure") {
		t.Errorf("validate-flags without TLS nor --insecure: exit %d: %s", code, out)
	}
}

func TestChartRefuses(t *testing.T) {
	for _, c := range []struct{ values, err string }{
		{`terminationGracePeriodSeconds: 20`, "terminationGracePeriodSeconds (20) must exceed"},
		{`drainDelaySeconds: 20`, "must exceed"},
		{`tls: {perPodCerts: true}`, "tls.perPodCerts needs tls.existingSecret"},
		{`antiAffinity: maybe`, "at '/antiAffinity': value must be one of 'soft', 'hard', 'none'"},
		{`tls: {cert: "PEM"}`, "tls.ca"},
		{`policy: {file: ""}`, "policy.file"},
	} {
		if _, err := renderValues(t, release, c.values, nil); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("values %s: error %v, want one with %q", c.values, err, c.err)
		}
	}
}

// Without the Prometheus Operator's API, no ServiceMonitor.
func TestChartServiceMonitorNeedsCRD(t *testing.T) {
	o := render(t, "", nil)
	if len(o.serviceMonitors) != 0 {
		t.Errorf("a ServiceMonitor without monitoring.coreos.com/v1")
	}
	o = render(t, "serviceMonitor: {enabled: false}", monitoringCaps())
	if len(o.serviceMonitors) != 0 {
		t.Errorf("a ServiceMonitor with serviceMonitor.enabled=false")
	}
}

// The config checksum changes with the policy and only with it: secrets
// generated anew at every render do not roll the pods.
func TestChartConfigChecksum(t *testing.T) {
	sum := func(values string) string {
		return render(t, values, nil).statefulSet(t).Spec.Template.Annotations["checksum/config"]
	}
	a, b := sum(""), sum("")
	if a == "" || a != b {
		t.Errorf("checksums %q and %q of the same values", a, b)
	}
	if c := sum(`policy: {file: "policies: {api: {tiers: {free: {limit: 1, per: 1s}}, default_tier: free}}"}`); c == a {
		t.Errorf("checksum %q unchanged by another policy", c)
	}
	if ann := render(t, "rollOnConfigChange: false", nil).statefulSet(t).Spec.Template.Annotations; len(ann) != 0 {
		t.Errorf("annotations %v with rollOnConfigChange=false", ann)
	}
}

func TestChartNotes(t *testing.T) {
	out, err := renderValues(t, release, "tls: {enabled: false}", nil)
	if err != nil {
		t.Fatal(err)
	}
	notes := out["ringlimit/templates/NOTES.txt"]
	for _, s := range []string{"rollout status statefulset/rl-ringlimit", "rl-ringlimit-0,rl-ringlimit-1,rl-ringlimit-2", "--insecure", "/v1/cluster", "helm test rl -n limits"} {
		if !strings.Contains(notes, s) {
			t.Errorf("NOTES.txt lacks %q:\n%s", s, notes)
		}
	}
}

// The node certificate and keys given inline in the values.
func TestChartInlineTLS(t *testing.T) {
	files := sharedCert(t, podNames("rl-ringlimit", 3)...)
	values, err := yaml.Marshal(map[string]any{"tls": map[string]any{
		"ca": string(files["ca.crt"]), "cert": string(files["tls.crt"]), "key": string(files["tls.key"])}})
	if err != nil {
		t.Fatal(err)
	}
	o := render(t, string(values), nil)
	check(t, "Secrets", sortedKeys(o.secrets), []string{"rl-ringlimit-admin", "rl-ringlimit-gossip", "rl-ringlimit-tls"})
	check(t, "tls Secret", o.secrets["rl-ringlimit-tls"].Data, files)
	checkNode(t, o, namespace, nil)
}

// TestChartLint runs helm lint on every variant, and renders each with
// missingkey=error, as helm lint --strict does: no value is misspelt.
func TestChartLint(t *testing.T) {
	for _, v := range variants {
		vals, err := chartutil.ReadValues([]byte(v.values))
		if err != nil {
			t.Fatal(err)
		}
		l := lint.All(chartDir, vals, namespace, false)
		for _, m := range l.Messages {
			if m.Severity >= support.WarningSev {
				t.Errorf("%s: helm lint: %s", v.name, m)
			}
		}
		ch := loadChart(t)
		rv, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{Name: release, Namespace: namespace, IsInstall: true}, monitoringCaps())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := (engine.Engine{Strict: true}).Render(ch, rv); err != nil {
			t.Errorf("%s: strict rendering: %v", v.name, err)
		}
	}
}
