package deploy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
	pb "github.com/ringlimit/ringlimit/proto/ringlimitv1"
)

// needPromtool returns promtool's path; without it the test is skipped,
// unless CI=true, where .ci/run installs it and its absence is a failure.
func needPromtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("promtool not found under CI=true (.ci/run installs Debian's prometheus): %v", err)
		}
		t.Skip("no promtool (apt-get install prometheus)")
	}
	return p
}

// promtool runs promtool args in dir and returns its output; it fails
// the test when promtool does.
func promtool(t *testing.T, bin, dir string, stdin []byte, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func TestRulesPromtool(t *testing.T) {
	bin := needPromtool(t)
	promtool(t, bin, "prometheus", nil, "check", "rules", "ringlimit-rules.yaml")
	out := promtool(t, bin, "prometheus", nil, "test", "rules", "ringlimit-rules_test.yaml")
	if !strings.Contains(out, "SUCCESS") {
		t.Fatalf("promtool test rules: no SUCCESS in\n%s", out)
	}
}

// ruleFile is the part of a Prometheus rule file the tests read.
type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Record string `yaml:"record"`
			Alert  string `yaml:"alert"`
			Expr   string `yaml:"expr"`
			Labels map[string]string
			Annot  map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func readRules(t *testing.T) ruleFile {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("prometheus", "ringlimit-rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	if err := yaml.Unmarshal(data, &rf); err != nil {
		t.Fatal(err)
	}
	return rf
}

// The alerts the issue asks for are there, each with a severity, a summary
// and a description.
func TestRulesAlerts(t *testing.T) {
	rf := readRules(t)
	var alerts []string
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts = append(alerts, r.Alert)
			if s := r.Labels["severity"]; s != "warning" && s != "critical" {
				t.Errorf("%s: severity %q, want warning or critical", r.Alert, s)
			}
			if r.Annot["summary"] == "" || r.Annot["description"] == "" {
				t.Errorf("%s: a summary and a description are required", r.Alert)
			}
		}
	}
	for _, want := range []string{"RingLimitNodeDown", "RingLimitRingDisagreement", "RingLimitDegradedAnswers", "RingLimitReplicationLag",
		"RingLimitRefusalSpike", "RingLimitTLSCertificateExpiringSoon", "RingLimitConfigReloadFailed", "RingLimitStoreFull"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("no alert %s in %v", want, alerts)
		}
	}
}

// dashboard is the part of a Grafana dashboard the tests read.
type dashboard struct {
	Panels []struct {
		Type       string          `json:"type"`
		Title      string          `json:"title"`
		Datasource json.RawMessage `json:"datasource"`
		Targets    []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
	Templating struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("grafana", "ringlimit.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&d); err != nil {
		t.Fatal(err)
	}
	return d
}

// grafanaVars replaces Grafana's variables in a panel's expression by
// values PromQL parses.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h", "$job", ".*", "$instance", ".*")

// labelValues matches a variable's label_values(METRIC..., label) query.
var labelValues = regexp.MustCompile(`^label_values\(([a-zA-Z_:][a-zA-Z0-9_:]*)`)

// queries are the expressions of the dashboard (panels, and the metric of
// each label_values variable) and of the rule file, by where they are.
func queries(t *testing.T) (exprs map[string]string, recorded map[string]bool) {
	t.Helper()
	exprs, recorded = map[string]string{}, map[string]bool{}
	d := readDashboard(t)
	if len(d.Panels) == 0 {
		t.Fatal("the dashboard has no panels")
	}
	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			t.Fatalf("variable %s: %v", v.Name, err)
		}
		m := labelValues.FindStringSubmatch(q.Query)
		if m == nil {
			t.Fatalf("variable %s: query %q is not label_values(METRIC, label)", v.Name, q.Query)
		}
		exprs["variable "+v.Name] = m[1]
	}
	for _, want := range []string{"datasource", "job", "instance"} {
		if !vars[want] {
			t.Errorf("the dashboard has no %s variable", want)
		}
	}
	for i, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		if !strings.Contains(string(p.Datasource), "${datasource}") {
			t.Errorf("panel %q: datasource %s, want ${datasource}", p.Title, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for j, tg := range p.Targets {
			exprs[fmt.Sprintf("panel %d %q target %d", i, p.Title, j)] = grafanaVars.Replace(tg.Expr)
		}
	}
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			exprs[fmt.Sprintf("rule %s%s", r.Record, r.Alert)] = r.Expr
			if r.Record != "" {
				recorded[r.Record] = true
			}
		}
	}
	return exprs, recorded
}

// metricNames parses expr and returns the metric names it selects.
func metricNames(expr string) ([]string, error) {
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	var names []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			name := vs.Name
			for _, m := range vs.LabelMatchers {
				if m.Name == "__name__" {
					name = m.Value
				}
			}
			names = append(names, name)
		}
		return nil
	})
	return names, nil
}

// The dashboard's and the rules' expressions parse, and each selects
// metrics by name.
func TestQueriesParse(t *testing.T) {
	exprs, _ := queries(t)
	for where, e := range exprs {
		names, err := metricNames(e)
		if err != nil {
			t.Errorf("%s: %q: %v", where, e, err)
		} else if len(names) == 0 {
			t.Errorf("%s: %q selects no metric", where, e)
		}
	}
}

// metricsNode is a node process started for TestMetricsLive.
type metricsNode struct {
	name               string
	cmd                *exec.Cmd
	http, grpc, gossip string
	mu                 sync.Mutex
	log                bytes.Buffer
	started            chan map[string]any
	exited             chan struct{}
}

func (n *metricsNode) Write(p []byte) (int, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.log.Write(p)
}

func (n *metricsNode) logTail() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	lines := strings.Split(n.log.String(), "\n")
	return strings.Join(lines[max(0, len(lines)-30):], "\n")
}

// startMetricsNode starts nodeBin as name on 127.0.0.1 port 0 with flags,
// reads its addresses from its "node started" log line, and stops it
// (SIGTERM, then SIGKILL) when the test ends.
func startMetricsNode(t *testing.T, name string, flags ...string) *metricsNode {
	t.Helper()
	args := append([]string{"--name", name, "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--peer", "127.0.0.1:0", "--gossip", "127.0.0.1:0"}, flags...)
	n := &metricsNode{name: name, cmd: exec.Command(nodeBin, args...), started: make(chan map[string]any, 1), exited: make(chan struct{})}
	for _, kv := range os.Environ() { // only the flags configure the node
		if !strings.HasPrefix(kv, "RINGLIMIT_") {
			n.cmd.Env = append(n.cmd.Env, kv)
		}
	}
	pr, pw := io.Pipe()
	n.cmd.Stdout, n.cmd.Stderr = pw, pw
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		n.cmd.Wait()
		pw.Close()
		close(n.exited)
	}()
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			n.Write(append(sc.Bytes(), '\n'))
			var rec map[string]any
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec["msg"] == "node started" {
				select {
				case n.started <- rec:
				default:
				}
			}
		}
		io.Copy(io.Discard, pr)
	}()
	t.Cleanup(func() {
		n.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-n.exited:
		case <-time.After(10 * time.Second):
			n.cmd.Process.Kill()
			<-n.exited
		}
		if t.Failed() {
			t.Logf("last log lines of %s:\n%s", name, n.logTail())
		}
	})
	select {
	case rec := <-n.started:
		n.http, _ = rec["http"].(string)
		n.grpc, _ = rec["grpc"].(string)
		n.gossip, _ = rec["gossip"].(string)
	case <-n.exited:
		t.Fatalf("%s exited before it started:\n%s", name, n.logTail())
	case <-time.After(20 * time.Second):
		t.Fatalf("%s did not start within 20s:\n%s", name, n.logTail())
	}
	return n
}

var httpClient = &http.Client{Timeout: 5 * time.Second}

func get(url string) (int, []byte, error) {
	resp, err := httpClient.Get(url)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}

func post(t *testing.T, url, body string) (int, map[string]any) {
	t.Helper()
	resp, err := httpClient.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("POST %s %s: %d, %v", url, body, resp.StatusCode, err)
	}
	return resp.StatusCode, out
}

// sampleNames returns the names of the samples in a text exposition
// (a histogram's NAME_bucket, _sum and _count; a summary's NAME, _sum
// and _count).
func sampleNames(text string) map[string]bool {
	names := map[string]bool{}
	for _, line := range strings.Split(text, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			names[line[:i]] = true
		}
	}
	return names
}

// Three nodes with a policy, an RLS configuration and mutual TLS between
// them, driven so that every labelled series appears; then every metric
// the dashboard and the rules name is on every node's /metrics (but up,
// which Prometheus makes, and the rules' own recorded names), and promtool
// check metrics finds nothing to say about ringlimit's metrics.
func TestMetricsLive(t *testing.T) {
	needNode(t)
	promtoolBin := needPromtool(t)
	exprs, recorded := queries(t)

	dir := t.TempDir()
	names := []string{"m-1", "m-2", "m-3"}
	if out, err := exec.Command(devcertsBin, "-dir", dir, "-nodes", strings.Join(names, ","), "-ip", "127.0.0.1", "-days", "30").CombinedOutput(); err != nil {
		t.Fatalf("devcerts: %v: %s", err, out)
	}
	common := []string{"--policy", filepath.Join("..", "examples", "policy.yaml"), "--rls-config", filepath.Join("..", "examples", "envoy", "config"),
		"--tls-ca", filepath.Join(dir, "ca.pem")}
	tlsFlags := func(name string) []string {
		return []string{"--tls-cert", filepath.Join(dir, name+".pem"), "--tls-key", filepath.Join(dir, name+"-key.pem")}
	}
	nodes := []*metricsNode{startMetricsNode(t, names[0], append(common, tlsFlags(names[0])...)...)}
	for _, name := range names[1:] {
		nodes = append(nodes, startMetricsNode(t, name, append(append(common, tlsFlags(name)...), "--join", nodes[0].gossip)...))
	}
	for _, n := range nodes {
		testkit.WaitFor(t, 20*time.Second, n.name+" ready with 3 ring members", func() error {
			code, body, err := get("http://" + n.http + "/readyz")
			if err != nil || code != 200 {
				return fmt.Errorf("/readyz: %d %s %v", code, body, err)
			}
			_, body, err = get("http://" + n.http + "/metrics")
			if err != nil || !strings.Contains(string(body), "\nringlimit_ring_members 3\n") {
				return fmt.Errorf("ringlimit_ring_members is not 3 (%v)", err)
			}
			return nil
		})
	}

	// Traffic on every node: inline checks that are admitted then refused
	// (some of whose keys another node owns: forwarded), policy checks
	// (scopes), a gRPC check, an RLS request and a health check.
	forwarded := false
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i, n := range nodes {
		for k := range 6 {
			body := fmt.Sprintf(`{"key":"metrics-%d-%d","limit":{"limit":1,"per":"1m"}}`, i, k)
			if code, ans := post(t, "http://"+n.http+"/v1/check", body); code != 200 {
				t.Fatalf("%s: first check %s: %d %v", n.name, body, code, ans)
			} else if ans["owner"] != n.name {
				forwarded = true
			}
			if code, ans := post(t, "http://"+n.http+"/v1/check", body); code != 429 {
				t.Fatalf("%s: second check %s: %d %v, want 429", n.name, body, code, ans)
			}
		}
		for range 6 { // route:/login allows 5 a minute per IP
			post(t, "http://"+n.http+"/v1/check", fmt.Sprintf(`{"user":"u%d","route":"/login","ip":"192.0.2.%d"}`, i, i+1))
		}
		post(t, "http://"+n.http+"/v1/check", fmt.Sprintf(`{"user":"u%d","route":"/reports"}`, i))
		if code, ans := post(t, "http://"+n.http+"/v1/check", `{"key":"metrics-invalid","cost":0,"limit":{"limit":1,"per":"1m"}}`); code != 400 {
			t.Fatalf("%s: a check costing 0: %d %v, want 400", n.name, code, ans)
		}

		cc, err := grpc.NewClient(n.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		cost := int64(1)
		if _, err := pb.NewRateLimiterClient(cc).Check(ctx, &pb.CheckRequest{Checks: []*pb.Check{{Key: fmt.Sprintf("metrics-grpc-%d", i), Cost: &cost,
			Limit: &pb.Limit{Limit: 5, PerMs: 1000}}}}); err != nil {
			t.Fatalf("%s: gRPC Check: %v", n.name, err)
		}
		if _, err := rlsv3.NewRateLimitServiceClient(cc).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "shop",
			Descriptors: []*rlcommon.RateLimitDescriptor{{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "198.51.100.7"}}}}}); err != nil {
			t.Fatalf("%s: ShouldRateLimit: %v", n.name, err)
		}
		if _, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatalf("%s: health Check: %v", n.name, err)
		}
	}
	if !forwarded {
		t.Fatal("no check was decided by another node than the one asked: nothing was forwarded")
	}

	for _, n := range nodes {
		_, body, err := get("http://" + n.http + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		have := sampleNames(string(body))
		for where, e := range exprs {
			used, err := metricNames(e)
			if err != nil {
				t.Fatalf("%s: %q: %v", where, e, err)
			}
			for _, m := range used {
				if m != "up" && !recorded[m] && !have[m] {
					t.Errorf("%s: %s (in %s) is not on /metrics", n.name, m, where)
				}
			}
		}
		for _, line := range []string{
			`ringlimit_decisions_total{result="rejected",scope="inline"}`,
			`ringlimit_decisions_total{result="rejected",scope="route:/login"}`,
			`ringlimit_decisions_total{result="allowed",scope="rls:shop"}`,
			`ringlimit_decisions_total{result="degraded",scope="inline"} 0`,
			`ringlimit_grpc_server_handled_total{code="OK",method="Check",server="public",service="ringlimit.v1.RateLimiter"}`,
			`ringlimit_grpc_server_handled_total{code="OK",method="ShouldRateLimit",server="public",service="envoy.service.ratelimit.v3.RateLimitService"}`,
			`ringlimit_grpc_server_handled_total{code="OK",method="Check",server="public",service="grpc.health.v1.Health"}`,
			`ringlimit_tls_certificate_expiry_timestamp_seconds{listener="peer"}`,
			`ringlimit_policy_reloads_total{result="error"} 0`,
			`memberlist_msg_alive `,
			`memberlist_msg_suspect `,
		} {
			if !strings.Contains(string(body), "\n"+line) {
				t.Errorf("%s: no %s on /metrics", n.name, line)
			}
		}
		if !regexp.MustCompile(`\nringlimit_grpc_server_handled_total\{code="OK",method="[A-Za-z]+",server="peer",service="[a-z0-9.]+\.[A-Za-z]+"\} [1-9]`).Match(body) {
			t.Errorf("%s: no peer gRPC call counted", n.name)
		}
		// promtool check metrics: ringlimit's own metrics must pass its
		// lint; memberlist names its counters without _total and in
		// camelCase (memberlist_probeNode), which is not ours to change.
		cmd := exec.Command(promtoolBin, "check", "metrics")
		cmd.Stdin = bytes.NewReader(body)
		out, _ := cmd.CombinedOutput() // exits non-zero on lint findings, read below
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if line != "" && !strings.HasPrefix(line, "memberlist_") {
				t.Errorf("%s: promtool check metrics: %s", n.name, line)
			}
		}
	}
}
