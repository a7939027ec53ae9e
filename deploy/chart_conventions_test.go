package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"helm.sh/helm/v3/pkg/strvals"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
)

// TestChartKubeVersion: the chart asks for Kubernetes 1.30 or later (the
// preStop sleep action), pre-release and vendor builds of it included, as
// helm install checks against the cluster's version.
func TestChartKubeVersion(t *testing.T) {
	ch := loadChart(t)
	check(t, "kubeVersion", ch.Metadata.KubeVersion, ">=1.30.0-0")
	for version, ok := range map[string]bool{
		"v1.30.0": true, "v1.33.4-eks-0123abc": true, "v1.30.0-rc.1": true, "v2.0.0": true,
		"v1.29.9": false, "v1.20.0": false,
	} {
		if got := chartutil.IsCompatibleRange(ch.Metadata.KubeVersion, version); got != ok {
			t.Errorf("Kubernetes %s compatible: %v, want %v", version, got, ok)
		}
	}
}

// TestChartSchema: values.schema.json refuses values of the wrong type, out
// of range, outside an enumeration or misspelt, as helm install, template
// and lint do (with a file of values or --set), and takes the chart's
// variants and the values it documents.
func TestChartSchema(t *testing.T) {
	for _, c := range []struct{ values, err string }{
		{`replicaCount: three`, "at '/replicaCount': got string, want integer"},
		{`replicaCount: 0`, "at '/replicaCount': minimum: got 0, want 1"},
		{`clusterSize: -3`, "at '/clusterSize': minimum: got -3, want 0"},
		{`preStopSleepSeconds: -1`, "at '/preStopSleepSeconds': minimum: got -1, want 0"},
		{`terminationGracePeriodSeconds: 0`, "at '/terminationGracePeriodSeconds': minimum: got 0, want 1"},
		{`tls: {generatedValidityDays: 0}`, "at '/tls/generatedValidityDays': minimum: got 0, want 1"},
		{`tls: {enabled: "yes"}`, "at '/tls/enabled': got string, want boolean"},
		{`image: {pullPolicy: Sometimes}`, "at '/image/pullPolicy': value must be one of 'Always', 'IfNotPresent', 'Never'"},
		{`image: {tag: "v0.1.0+build"}`, "at '/image/tag': 'v0.1.0+build' does not match pattern"},
		{`logLevel: verbose`, "at '/logLevel': value must be one of '', 'debug', 'info', 'warn', 'error'"},
		{`probeScheme: http`, "at '/probeScheme': value must be one of 'HTTP', 'HTTPS'"},
		{`service: {type: Ingress}`, "at '/service/type': value must be one of 'ClusterIP', 'NodePort', 'LoadBalancer'"},
		{`pdb: {maxUnavailable: -1}`, "at '/pdb/maxUnavailable': minimum: got -1, want 0"},
		{`pdb: {maxUnavailable: half}`, "at '/pdb/maxUnavailable': 'oneOf' failed"},
		{`serviceMonitor: {interval: 30}`, "at '/serviceMonitor/interval': got number, want string"},
		{`extraArgs: --log-level=debug`, "at '/extraArgs': got string, want array"},
		{`replicaCont: 5`, "additional properties 'replicaCont' not allowed"},
		{`tls: {existingSecrets: certs}`, "at '/tls': additional properties 'existingSecrets' not allowed"},
		{`clusterName: ` + strings.Repeat("a", 256), "at '/clusterName': maxLength: got 256, want 255"},
	} {
		_, err := renderValues(t, release, c.values, nil)
		if err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("values %.60s: error %v, want one with %q", c.values, err, c.err)
		}
		vals, rerr := chartutil.ReadValues([]byte(c.values))
		if rerr != nil {
			t.Fatal(rerr)
		}
		if !lintFails(chartDir, vals, c.err) {
			t.Errorf("values %.60s: helm lint does not fail with %q", c.values, c.err)
		}
	}

	// --set gives integers and strings where a values file gives numbers.
	for set, err := range map[string]string{
		"replicaCount=5":               "",
		"replicaCount=three":           "at '/replicaCount': got string, want integer",
		"pdb.maxUnavailable=50%":       "",
		"pdb.maxUnavailable=2":         "",
		"grafanaDashboard.enabled=yes": "at '/grafanaDashboard/enabled': got string, want boolean",
	} {
		vals, perr := strvals.Parse(set)
		if perr != nil {
			t.Fatal(perr)
		}
		_, rerr := chartutil.ToRenderValues(loadChart(t), vals, chartutil.ReleaseOptions{Name: release, Namespace: namespace, IsInstall: true}, nil)
		switch {
		case err == "" && rerr != nil:
			t.Errorf("--set %s: %v", set, rerr)
		case err != "" && (rerr == nil || !strings.Contains(rerr.Error(), err)):
			t.Errorf("--set %s: error %v, want one with %q", set, rerr, err)
		}
	}

	// The values the chart documents are taken.
	for _, values := range []string{
		`pdb: {maxUnavailable: "34%"}`,
		`prometheusRule: {enabled: true, labels: {release: prometheus}}`,
		`grafanaDashboard: {enabled: true, annotations: {grafana_folder: ringlimit}}`,
		`tests: {enabled: false}`,
		`global: {imageRegistry: mirror.example.com}`,
		`logLevel: debug`,
		`image: {tag: 0.1.0-3-gabc1234-dirty}`,
		`image: {tag: "0.1.0@sha256:` + strings.Repeat("0f", 32) + `"}`,
	} {
		if _, err := renderValues(t, release, values, nil); err != nil {
			t.Errorf("values %s: %v", values, err)
		}
		vals, err := chartutil.ReadValues([]byte(values))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range lint.All(chartDir, vals, namespace, false).Messages {
			if m.Severity >= support.WarningSev {
				t.Errorf("values %s: helm lint: %s", values, m)
			}
		}
	}
}

// lintFails reports whether helm lint, with vals, reports an error that
// contains want.
func lintFails(dir string, vals map[string]any, want string) bool {
	for _, m := range lint.All(dir, vals, namespace, false).Messages {
		if m.Severity == support.ErrorSev && strings.Contains(m.Err.Error(), want) {
			return true
		}
	}
	return false
}

// TestChartHelmTest: `helm test` runs one pod, a test hook, that runs the
// node image's probe against the Service's /readyz, hardened like the nodes.
// Its arguments, run against a live node at the Service's place, succeed;
// against a node that is not ready they fail.
func TestChartHelmTest(t *testing.T) {
	o := render(t, "", nil)
	check(t, "test pods", sortedKeys(o.pods), []string{"rl-ringlimit-test"})
	pod := o.pods["rl-ringlimit-test"]
	check(t, "hook", pod.Annotations["helm.sh/hook"], "test")
	check(t, "hook delete policy", pod.Annotations["helm.sh/hook-delete-policy"], "before-hook-creation,hook-succeeded")
	check(t, "restartPolicy", pod.Spec.RestartPolicy, corev1.RestartPolicyNever)
	check(t, "automountServiceAccountToken", pod.Spec.AutomountServiceAccountToken, new(false))
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]
	check(t, "image", c.Image, container(t, o.statefulSet(t)).Image)
	check(t, "command", c.Command, []string(nil))
	const url = "http://rl-ringlimit.limits.svc.cluster.local:8080/readyz"
	check(t, "args", c.Args, []string{"probe", url})
	if c.SecurityContext == nil || c.SecurityContext.ReadOnlyRootFilesystem == nil || !*c.SecurityContext.ReadOnlyRootFilesystem {
		t.Errorf("securityContext %+v, want a read-only root file system", c.SecurityContext)
	}
	if psc := pod.Spec.SecurityContext; psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
		t.Errorf("pod securityContext %+v, want runAsNonRoot", psc)
	}
	// The Service the pod names exists and serves HTTP on that port.
	svc, ok := o.services["rl-ringlimit"]
	if !ok || len(svc.Spec.Ports) == 0 || svc.Spec.Ports[0].Port != 8080 || svc.Spec.Ports[0].Name != "http" {
		t.Errorf("Service rl-ringlimit: %+v, want port http 8080", svc)
	}

	https := render(t, "probeScheme: HTTPS\nfullnameOverride: limiter\nclusterDomain: example.org", nil).pods["limiter-test"]
	if https == nil {
		t.Fatalf("no limiter-test pod with fullnameOverride: limiter")
	}
	check(t, "args with HTTPS", https.Spec.Containers[0].Args, []string{"probe", "https://limiter.limits.svc.example.org:8080/readyz"})
	check(t, "test pods with tests.enabled=false", sortedKeys(render(t, "tests: {enabled: false}", nil).pods), []string{})

	// The pod's command, against a live node in the Service's place.
	needNode(t)
	n := startMetricsNode(t, "helm-test")
	local := strings.Replace(url, "rl-ringlimit.limits.svc.cluster.local:8080", n.http, 1)
	testkit.WaitFor(t, 20*time.Second, "the probe passes", func() error {
		out, err := exec.Command(nodeBin, "probe", local).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		if !strings.Contains(string(out), `"status":"ready"`) {
			return fmt.Errorf("probe printed %q", out)
		}
		return nil
	})
	notReady := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, `{"status":"not ready","reason":"joining"}`)
	}))
	defer notReady.Close()
	local = strings.Replace(url, "http://rl-ringlimit.limits.svc.cluster.local:8080", notReady.URL, 1)
	if out, err := exec.Command(nodeBin, "probe", local).CombinedOutput(); err == nil {
		t.Errorf("probe %s passed against a node that is not ready: %s", local, out)
	}
}

// TestChartPrometheusRule: off by default; on, and with the Prometheus
// Operator's API served, a PrometheusRule carrying the rule file's groups
// (every alert with its runbook_url) and the labels asked for.
func TestChartPrometheusRule(t *testing.T) {
	caps := monitoringCaps()
	caps.APIVersions = append(slices.Clone(caps.APIVersions), "monitoring.coreos.com/v1/PrometheusRule")
	if n := len(render(t, "", caps).prometheusRules); n != 0 {
		t.Errorf("%d PrometheusRules by default, want 0", n)
	}
	if n := len(render(t, "prometheusRule: {enabled: true}", nil).prometheusRules); n != 0 {
		t.Errorf("%d PrometheusRules without monitoring.coreos.com/v1/PrometheusRule, want 0", n)
	}
	o := render(t, "prometheusRule: {enabled: true, labels: {release: prometheus}}", caps)
	if len(o.prometheusRules) != 1 {
		t.Fatalf("%d PrometheusRules, want 1", len(o.prometheusRules))
	}
	pr := o.prometheusRules[0]
	check(t, "name", pr.Name, "rl-ringlimit")
	check(t, "release label", pr.Labels["release"], "prometheus")
	check(t, "instance label", pr.Labels["app.kubernetes.io/instance"], "rl")

	type rule struct{ Record, Alert, Expr, For, Labels, Annotations string }
	var got, want []rule
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			got = append(got, rule{r.Record, r.Alert, r.Expr, r.For, fmt.Sprint(r.Labels), fmt.Sprint(r.Annotations)})
		}
	}
	raw, err := os.ReadFile(filepath.Join("prometheus", "ringlimit-rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Record, Alert, Expr, For string
				Labels, Annotations      map[string]string
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	var alerts int
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			want = append(want, rule{r.Record, r.Alert, r.Expr, r.For, fmt.Sprint(r.Labels), fmt.Sprint(r.Annotations)})
			if r.Alert != "" {
				alerts++
				if !strings.HasPrefix(r.Annotations["runbook_url"], runbookBase) {
					t.Errorf("%s: runbook_url %q", r.Alert, r.Annotations["runbook_url"])
				}
			}
		}
	}
	if alerts < 10 {
		t.Errorf("%d alerts, want at least 10", alerts)
	}
	check(t, "PrometheusRule rules", got, want)
}

// TestChartDashboard: off by default; on, a ConfigMap with Grafana's
// sidecar label holding deploy/grafana/ringlimit.json as is.
func TestChartDashboard(t *testing.T) {
	if _, ok := render(t, "", nil).configMaps["rl-ringlimit-dashboard"]; ok {
		t.Errorf("a dashboard ConfigMap by default")
	}
	o := render(t, "grafanaDashboard: {enabled: true, labels: {team: edge}, annotations: {grafana_folder: ringlimit}}", nil)
	cm, ok := o.configMaps["rl-ringlimit-dashboard"]
	if !ok {
		t.Fatalf("no ConfigMap rl-ringlimit-dashboard in %v", sortedKeys(o.configMaps))
	}
	check(t, "sidecar label", cm.Labels["grafana_dashboard"], "1")
	check(t, "extra label", cm.Labels["team"], "edge")
	check(t, "folder annotation", cm.Annotations["grafana_folder"], "ringlimit")
	check(t, "files", sortedKeys(cm.Data), []string{"ringlimit.json"})
	want, err := os.ReadFile(filepath.Join("grafana", "ringlimit.json"))
	if err != nil {
		t.Fatal(err)
	}
	check(t, "dashboard", cm.Data["ringlimit.json"], strings.TrimRight(string(want), "\n"))
	if !json.Valid([]byte(cm.Data["ringlimit.json"])) {
		t.Errorf("the dashboard is not JSON")
	}
}

// TestChartFilesInStep: the chart cannot read files outside its directory,
// so it keeps copies of the rule file and the dashboard; they are the same
// as the originals. After editing deploy/prometheus/ringlimit-rules.yaml or
// deploy/grafana/ringlimit.json, copy it into helm/ringlimit/files/.
func TestChartFilesInStep(t *testing.T) {
	for original, copy := range map[string]string{
		"prometheus/ringlimit-rules.yaml": "helm/ringlimit/files/ringlimit-rules.yaml",
		"grafana/ringlimit.json":          "helm/ringlimit/files/ringlimit.json",
	} {
		a, err := os.ReadFile(original)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(copy)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs from %s: cp deploy/%s deploy/%s", copy, original, original, copy)
		}
	}
}
