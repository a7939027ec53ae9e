package main

// Policy tests with three in-process nodes, each running its own policy
// file (--policy) and audit log (--audit-log): hot reload and its refusal
// of a bad file, incident overrides broadcast to every member, resolution
// of the layers through the cluster, and the entry node's pre-limiter.
// They reuse the harness of cluster_test.go.

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/api"
	"github.com/ringlimit/ringlimit/clock"
	"github.com/ringlimit/ringlimit/cluster"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/policy"
)

// testAdminToken is the admin token, named "oncall", of the nodes
// startPolicyNode starts; postJSON sends it.
const testAdminToken = "token-of-the-oncall-admin"

// tokenPath is the admin token file startPolicyNode gives node name.
func tokenPath(policyPath, name string) string {
	return filepath.Join(filepath.Dir(policyPath), name+".admin-tokens")
}

// startPolicyNode is harness.start with --policy, --audit-log,
// --admin-token-file (tokenPath, holding testAdminToken named "oncall") and
// --trusted-proxies 127.0.0.1/32 (the tests' gateways run on loopback): an
// in-process node on 127.0.0.1:0, closed in t.Cleanup.
func (h *harness) startPolicyNode(name, policyPath, auditPath string, join ...string) (*node.Node, *testkit.LogSink) {
	t := h.t
	t.Helper()
	tokens := tokenPath(policyPath, name)
	if err := os.WriteFile(tokens, []byte("oncall:"+testAdminToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	extra := append([]string{"--policy", policyPath, "--audit-log", auditPath, "--admin-token-file", tokens,
		"--trusted-proxies", "127.0.0.1/32"}, joinArgs(join)...)
	return h.startWith(name, extra, nil)
}

// policyCluster is three nodes joined together, node i running the policy
// file paths[i] and the audit log audits[i].
type policyCluster struct {
	h      *harness
	nodes  []*node.Node
	logs   []*testkit.LogSink
	names  []string
	addrs  []string // HTTP
	paths  []string
	audits []string
}

// startPolicyCluster writes content to one policy file per node (in dir)
// and starts three nodes on them, joined, with their rings converged.
func startPolicyCluster(h *harness, dir, content string) *policyCluster {
	h.t.Helper()
	c := &policyCluster{h: h, names: []string{"node-1", "node-2", "node-3"}}
	for i, name := range c.names {
		c.paths = append(c.paths, filepath.Join(dir, name+".yaml"))
		c.audits = append(c.audits, filepath.Join(dir, name+".audit.jsonl"))
		writePolicy(h.t, c.paths[i], content)
		var join []string
		if i > 0 {
			join = []string{c.nodes[0].Cluster().LocalAddr()}
		}
		n, l := h.startPolicyNode(name, c.paths[i], c.audits[i], join...)
		c.nodes = append(c.nodes, n)
		c.logs = append(c.logs, l)
		c.addrs = append(c.addrs, httpAddr(n))
	}
	h.waitRing(c.nodes, c.names, 10*time.Second)
	return c
}

// owner is the owner of key, as the first node's ring (which agrees with
// the others once waitRing returned) says.
func (c *policyCluster) owner(key string) string {
	o, _ := c.nodes[0].Router().Owner(key)
	return o
}

func (c *policyCluster) index(name string) int {
	i := slices.Index(c.names, name)
	if i < 0 {
		c.h.t.Fatalf("no node named %q", name)
	}
	return i
}

// writePolicy replaces path with content atomically (a temporary file
// renamed over it), so that a file watch never reads half a file.
func writePolicy(t *testing.T, path, content string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// versionOf is the version nodes report for a policy file's content.
func versionOf(t *testing.T, content string) string {
	t.Helper()
	set, err := policy.Parse([]byte(content), "test")
	if err != nil {
		t.Fatalf("test policy does not parse: %v\n%s", err, content)
	}
	return set.Version
}

// poll is testkit.WaitFor for a cond that describes the state it found.
func poll(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	testkit.WaitFor(t, timeout, what, func() error {
		if ok, state := cond(); !ok {
			return errors.New(state)
		}
		return nil
	})
}

// policyStatus is GET /v1/policy on addr.
func (h *harness) policyStatus(addr string) api.PolicyStatus {
	h.t.Helper()
	var st api.PolicyStatus
	if err := getJSON(h.client, "http://"+addr+"/v1/policy", &st); err != nil {
		h.t.Fatal(err)
	}
	return st
}

// overrides is GET /v1/overrides on addr.
func (h *harness) overrides(addr string) []policy.Override {
	h.t.Helper()
	var out []policy.Override
	if err := getJSON(h.client, "http://"+addr+"/v1/overrides", &out); err != nil {
		h.t.Fatal(err)
	}
	return out
}

// waitVersion polls GET /v1/policy on every node until all report version.
func (c *policyCluster) waitVersion(version string, timeout time.Duration) {
	c.h.t.Helper()
	poll(c.h.t, timeout, "every node on policy "+version, func() (bool, string) {
		var got []string
		for _, a := range c.addrs {
			got = append(got, c.h.policyStatus(a).Version)
		}
		return !slices.ContainsFunc(got, func(v string) bool { return v != version }), fmt.Sprintf("versions %v", got)
	})
}

// postJSON posts body to url with testAdminToken and returns the status
// and the body.
func postJSON(client *http.Client, url, body string) (int, []byte, error) {
	return send(client, http.MethodPost, url, body, "Bearer "+testAdminToken)
}

// send sends body (if not empty) to url with the Authorization header auth
// (if not empty) and returns the status and the body.
func send(client *http.Client, method, url, body, auth string) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// policyCheck posts a policy request (a JSON body) to POST /v1/check on
// addr. Safe to call from any goroutine.
func policyCheck(client *http.Client, addr, body string) (checkAnswer, error) {
	start := time.Now()
	status, b, err := postJSON(client, "http://"+addr+"/v1/check", body)
	a := checkAnswer{status: status, latency: time.Since(start)}
	if err != nil {
		return a, err
	}
	if status != http.StatusOK && status != http.StatusTooManyRequests {
		return a, fmt.Errorf("status %d: %s", status, b)
	}
	if err := json.Unmarshal(b, &a.body); err != nil {
		return a, fmt.Errorf("status %d, body %q: %w", status, b, err)
	}
	return a, nil
}

// mustCheck is policyCheck that fails the test on an error.
func (h *harness) mustCheck(addr, body string) checkAnswer {
	h.t.Helper()
	a, err := policyCheck(h.client, addr, body)
	if err != nil {
		h.t.Fatalf("check %s via %s: %v", body, addr, err)
	}
	return a
}

// metric is the value of the sample name{labels} (labels "" for none, else
// as in /metrics: `{result="error"}`) on addr, 0 when absent.
func (h *harness) metric(addr, name, labels string) float64 {
	h.t.Helper()
	m, err := testkit.Scrape(h.client, addr, name)
	if err != nil {
		h.t.Fatal(err)
	}
	return m[labels]
}

// auditLine is one line of an audit log.
type auditLine struct {
	Time    time.Time  `json:"time"`
	Actor   string     `json:"actor"`
	Action  string     `json:"action"`
	What    string     `json:"what"`
	Reason  string     `json:"reason"`
	Old     string     `json:"old"`
	New     string     `json:"new"`
	Expires *time.Time `json:"expires"`
}

// readAudit reads the complete lines of an audit log (a node may be
// appending one); every line must be a JSON object.
func readAudit(t *testing.T, path string) []auditLine {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []auditLine
	for line := range strings.Lines(string(b)) {
		if !strings.HasSuffix(line, "\n") {
			break // being written
		}
		var l auditLine
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("%s: bad audit line %q: %v", path, line, err)
		}
		out = append(out, l)
	}
	return out
}

func actions(lines []auditLine, action string) []auditLine {
	var out []auditLine
	for _, l := range lines {
		if l.Action == action {
			out = append(out, l)
		}
	}
	return out
}

const reloadV1 = `version: v1
policies:
  api:
    default_tier: free
    tiers:
      free: { limit: 5, per: 1h, burst: 5 }
    global: { limit: 100, per: 1h }
`

const reloadV2 = `version: v2
policies:
  api:
    default_tier: free
    tiers:
      free: { limit: 7, per: 1h }
    global: { limit: 100, per: 1h }
`

const reloadV3 = `version: v3
policies:
  api:
    default_tier: free
    tiers:
      free: { limit: 9, per: 1h }
    global: { limit: 100, per: 1h }
`

// Two bad files that would otherwise be new versions.
const (
	badAlgorithm = `version: v3
policies:
  api:
    default_tier: free
    tiers:
      free: { algorithm: leaky_faucet, limit: 9, per: 1h }
`
	badDuplicateTier = `version: v3
policies:
  api:
    default_tier: free
    tiers:
      free: { limit: 9, per: 1h }
      free: { limit: 11, per: 1h }
`
)

// TestClusterPolicyReload: three nodes, each watching its own copy of the
// policy file. A new file reaches every node by itself (file watch) and all
// three converge on the same version; a bad file (unknown algorithm, then a
// duplicate tier) is refused on every node, which keeps the old version,
// counts the error and keeps deciding under it; SIGHUP (Manager.Reload, as
// runPolicy calls it) refuses a bad file and loads a good one. Every
// accepted load, and nothing else, is in each node's audit log. A reload
// changes limits but refills nothing: the spent tokens carry over.
func TestClusterPolicyReload(t *testing.T) {
	h := newHarness(t)
	c := startPolicyCluster(h, t.TempDir(), reloadV1)
	v1, v2, v3 := versionOf(t, reloadV1), versionOf(t, reloadV2), versionOf(t, reloadV3)
	for _, bad := range []string{badAlgorithm, badDuplicateTier} {
		if _, err := policy.Parse([]byte(bad), "bad"); err == nil {
			t.Fatalf("the bad test policy parses:\n%s", bad)
		}
	}
	reloads := func(i int, result string) float64 {
		return h.metric(c.addrs[i], "ringlimit_policy_reloads_total", `{result="`+result+`"}`)
	}
	for i, a := range c.addrs {
		st := h.policyStatus(a)
		if st.Version != v1 || st.Source != c.paths[i] || st.Default != "api" || !slices.Equal(st.Policies, []string{"api"}) || len(st.Overrides) != 0 {
			t.Fatalf("%s: GET /v1/policy = %+v, want version %s from %s", c.names[i], st, v1, c.paths[i])
		}
		if ok, bad := reloads(i, "ok"), reloads(i, "error"); ok != 1 || bad != 0 {
			t.Fatalf("%s: reloads ok=%v error=%v at startup, want 1 and 0", c.names[i], ok, bad)
		}
	}
	tierKey := "p|api|tier:free|user:42"
	// check sends {"user":"42"} through node i and expects it admitted under
	// limit with remaining left, decided by the tier key's owner.
	check := func(label string, i int, version string, limit, remaining int64) {
		t.Helper()
		a := h.mustCheck(c.addrs[i], `{"user":"42"}`)
		b := a.body
		if a.status != http.StatusOK || b.Scope != "tier:free" || b.Limit != limit || b.Remaining != remaining ||
			b.PolicyVersion != version || b.Owner != c.owner(tierKey) || b.Degraded {
			t.Fatalf("%s: user 42 via %s: %d %+v, want 200 tier:free limit %d remaining %d under %s from %s",
				label, c.names[i], a.status, b, limit, remaining, version, c.owner(tierKey))
		}
	}

	// v2 on every node's file: each node reloads it by itself.
	start := time.Now()
	for _, p := range c.paths {
		writePolicy(t, p, reloadV2)
	}
	c.waitVersion(v2, 5*time.Second)
	t.Logf("every node on %s %v after the files were written", v2, time.Since(start).Round(time.Millisecond))
	for i := range c.nodes {
		check("v2", i, v2, 7, int64(6-i))
		if ok := reloads(i, "ok"); ok != 2 {
			t.Errorf("%s: ringlimit_policy_reloads_total{result=ok} = %v after v2, want 2", c.names[i], ok)
		}
	}

	// Bad files: refused by the file watch on every node.
	for k, bad := range []string{badAlgorithm, badDuplicateTier} {
		for _, p := range c.paths {
			writePolicy(t, p, bad)
		}
		poll(t, 5*time.Second, fmt.Sprintf("bad file %d refused by every node", k+1), func() (bool, string) {
			var got []float64
			for i := range c.nodes {
				got = append(got, reloads(i, "error"))
			}
			return !slices.ContainsFunc(got, func(v float64) bool { return v < float64(k+1) }), fmt.Sprintf("reload errors %v", got)
		})
	}
	// SIGHUP with the bad file in place: refused too, synchronously.
	for i, n := range c.nodes {
		err := n.Policy().Reload("sighup")
		if err == nil || !strings.Contains(err.Error(), `"free" already defined`) {
			t.Errorf("%s: Reload(sighup) of a file with a duplicate tier: %v, want an error naming the tier", c.names[i], err)
		}
		if got := reloads(i, "error"); got != 3 {
			t.Errorf("%s: ringlimit_policy_reloads_total{result=error} = %v after two bad files and a SIGHUP, want 3", c.names[i], got)
		}
	}
	// Nothing changes: every node stays on v2 (watched for 1.5 s), and
	// keeps deciding under it.
	hold := time.Now().Add(1500 * time.Millisecond)
	for time.Now().Before(hold) {
		for i, a := range c.addrs {
			if v := h.policyStatus(a).Version; v != v2 {
				t.Fatalf("%s: version %s after a bad file, want %s kept", c.names[i], v, v2)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	for i := range c.nodes {
		check("after the bad files", i, v2, 7, int64(3-i))
		if ok := reloads(i, "ok"); ok != 2 {
			t.Errorf("%s: ringlimit_policy_reloads_total{result=ok} = %v after the bad files, want still 2", c.names[i], ok)
		}
		var errs []string
		for _, r := range c.logs[i].Records("policy reload refused; the running policy stays") {
			errs = append(errs, fmt.Sprint(r["err"]))
			if r["running"] != v2 || r["source"] != c.paths[i] {
				t.Errorf("%s: refusal logged as %v, want running %s, source %s", c.names[i], r, v2, c.paths[i])
			}
		}
		if len(errs) != 3 || !strings.Contains(errs[0], "leaky_faucet") || !strings.Contains(errs[1], "already defined") {
			t.Errorf("%s: refusals logged: %q, want 3: the unknown algorithm, then the duplicate tier twice", c.names[i], errs)
		}
	}

	// A good file by SIGHUP. The node's background work (file watch and
	// SIGHUP handler) is stopped first, so that the watch cannot race the
	// SIGHUP to the new file; Reload is what the SIGHUP handler calls.
	for i, n := range c.nodes {
		n.StopBackground()
		writePolicy(t, c.paths[i], reloadV3)
		if err := n.Policy().Reload("sighup"); err != nil {
			t.Fatalf("%s: Reload(sighup) of v3: %v", c.names[i], err)
		}
		if v := h.policyStatus(c.addrs[i]).Version; v != v3 {
			t.Fatalf("%s: version %s after SIGHUP, want %s", c.names[i], v, v3)
		}
		// Once more: the same version is not reloaded (nor audited).
		if err := n.Policy().Reload("sighup"); err != nil {
			t.Fatalf("%s: second Reload(sighup) of v3: %v", c.names[i], err)
		}
	}
	c.waitVersion(v3, time.Second)
	// Six tokens spent under v2 stay spent under v3's 9.
	for i := range c.nodes {
		check("v3", i, v3, 9, int64(2-i))
	}

	// The audit logs: the startup load, v2 by the file watch, v3 by SIGHUP.
	for i, path := range c.audits {
		lines := readAudit(t, path)
		want := []auditLine{
			{Actor: "startup", Action: "policy_reload", What: c.paths[i], New: v1},
			{Actor: "file-watch", Action: "policy_reload", What: c.paths[i], Old: v1, New: v2},
			{Actor: "sighup", Action: "policy_reload", What: c.paths[i], Old: v2, New: v3},
		}
		ok := len(lines) == len(want)
		for j := 0; ok && j < len(want); j++ {
			l := lines[j]
			ok = l.Actor == want[j].Actor && l.Action == want[j].Action && l.What == want[j].What && l.Old == want[j].Old &&
				l.New == want[j].New && l.Reason == "" && l.Expires == nil && !l.Time.Before(start.Add(-time.Minute)) && time.Since(l.Time) < time.Minute
		}
		if !ok {
			t.Errorf("%s: audit log %+v, want %+v", c.names[i], lines, want)
		}
	}
}

const overridePolicy = `version: overrides
policies:
  api:
    default_tier: free
    tiers:
      free: { limit: 2, per: 1h }
      enterprise: { limit: 50, per: 1h }
`

// TestClusterOverride: an incident override posted to one node raises one
// user's tier on every node for two seconds, then lapses by itself on every
// node, and each node audits both. Bad overrides are refused with 400
// naming the field, and change nothing anywhere.
func TestClusterOverride(t *testing.T) {
	h := newHarness(t)
	h.validateOpenAPI()
	c := startPolicyCluster(h, t.TempDir(), overridePolicy)
	version := versionOf(t, overridePolicy)
	freeKey := "p|api|tier:free|user:42"
	entKey := "p|api|override:tier:enterprise|user:42"

	// User 42 on free: 2 admitted, then rejected by the tier, whichever
	// node it enters through.
	for i := range 5 {
		a := h.mustCheck(c.addrs[i%3], `{"user":"42"}`)
		want := http.StatusOK
		if i >= 2 {
			want = http.StatusTooManyRequests
		}
		if a.status != want || a.body.Scope != "tier:free" || a.body.Limit != 2 || a.body.Remaining != max(1-int64(i), 0) ||
			a.body.Owner != c.owner(freeKey) || a.body.PolicyVersion != version {
			t.Fatalf("free check %d via %s: %d %+v, want %d tier:free limit 2 from %s", i+1, c.names[i%3], a.status, a.body, want, c.owner(freeKey))
		}
		if want == http.StatusTooManyRequests && (a.body.Code != api.CodeRateLimited || a.body.RetryAfterMs <= 0) {
			t.Fatalf("free check %d: %+v, want code RATE_LIMITED and a retry-after", i+1, a.body)
		}
	}

	// Bad overrides, to every node: 400 naming the field, nothing
	// installed, nothing audited.
	for i, bad := range []struct{ body, field string }{
		{`{"actor":"oncall","user":"42","tier":"enterprise","expires_in":"2s"}`, "reason"},
		{`{"actor":"oncall","reason":"incident 12","user":"42","tier":"gold","expires_in":"2s"}`, `tier: policy api has no tier "gold"`},
		{`{"actor":"oncall","reason":"incident 12","user":"42","tier":"enterprise","expires_in":"-1s"}`, "expires_in"},
		{`{"actor":"oncall","reason":"incident 12","api_key":"k","user":"42","tier":"enterprise","expires_in":"2s"}`, "api_key"},
	} {
		addr := c.addrs[i%3]
		status, b, err := postJSON(h.client, "http://"+addr+"/v1/overrides", bad.body)
		if err != nil {
			t.Fatal(err)
		}
		var e api.ErrorResponse
		if status != http.StatusBadRequest || json.Unmarshal(b, &e) != nil || e.Code != api.CodeInvalidArgument || !strings.Contains(e.Message, bad.field) {
			t.Errorf("POST /v1/overrides %s via %s: %d %s, want 400 INVALID_ARGUMENT naming %s", bad.body, c.names[i%3], status, b, bad.field)
		}
	}
	for i, a := range c.addrs {
		if o := h.overrides(a); len(o) != 0 {
			t.Fatalf("%s: overrides %+v after bad requests only, want none", c.names[i], o)
		}
	}

	// The override, posted to node-2: installed there before the POST
	// answers, and on every other node, same ID, once the gossip carried
	// it (tens of milliseconds on loopback; polled for at most 1s of its 2s).
	posted := time.Now()
	status, b, err := postJSON(h.client, "http://"+c.addrs[1]+"/v1/overrides",
		`{"actor":"oncall","reason":"incident 12","user":"42","tier":"enterprise","expires_in":"2s"}`)
	if err != nil {
		t.Fatal(err)
	}
	var o policy.Override
	if status != http.StatusOK || json.Unmarshal(b, &o) != nil {
		t.Fatalf("POST /v1/overrides: %d %s", status, b)
	}
	if o.ID == "" || o.Actor != "oncall" || o.Reason != "incident 12" || o.User != "42" || o.Tier != "enterprise" || o.Policy != "api" ||
		o.Expires.Sub(o.Created).Round(100*time.Millisecond) != 2*time.Second {
		t.Fatalf("POST /v1/overrides answered %+v", o)
	}
	if got := h.overrides(c.addrs[1]); len(got) != 1 || got[0].ID != o.ID {
		t.Fatalf("node-2: GET /v1/overrides = %+v right after the POST, want %s", got, o.ID)
	}
	poll(t, time.Second, "the override on every node", func() (bool, string) {
		for i, a := range c.addrs {
			got := h.overrides(a)
			if len(got) != 1 || got[0].ID != o.ID || got[0].User != "42" || got[0].Tier != "enterprise" || !got[0].Expires.Equal(o.Expires) {
				return false, fmt.Sprintf("%s: GET /v1/overrides = %+v, want the one posted to node-2 (%s)", c.names[i], got, o.ID)
			}
		}
		return true, ""
	})
	t.Logf("the override on every node %v after the POST", time.Since(posted).Round(time.Millisecond))
	for i, a := range c.addrs {
		if st := h.policyStatus(a); len(st.Overrides) != 1 || st.Overrides[0].ID != o.ID {
			t.Fatalf("%s: GET /v1/policy overrides = %+v, want %s", c.names[i], st.Overrides, o.ID)
		}
	}
	// User 42 now has enterprise's 50 through every node, on a key of its
	// own.
	for i := range 6 {
		a := h.mustCheck(c.addrs[i%3], `{"user":"42"}`)
		if a.status != http.StatusOK || a.body.Scope != "override:tier:enterprise" || a.body.Limit != 50 || a.body.Remaining != int64(49-i) ||
			a.body.Owner != c.owner(entKey) {
			t.Fatalf("check %d under the override via %s (%v after the POST): %d %+v, want 200 override:tier:enterprise limit 50 remaining %d from %s",
				i+1, c.names[i%3], time.Since(posted).Round(time.Millisecond), a.status, a.body, 49-i, c.owner(entKey))
		}
	}
	if since := time.Since(posted); since > 1500*time.Millisecond {
		t.Logf("the checks under the override took until %v after the POST (the override lasts 2s)", since)
	}

	// It lapses by itself on every node (runPolicy expires overrides every
	// second; the check stops using it at its expiry already).
	poll(t, 5*time.Second, "the override gone from every node's audit log", func() (bool, string) {
		var n []int
		for _, p := range c.audits {
			n = append(n, len(actions(readAudit(t, p), "override_expired")))
		}
		return !slices.Contains(n, 0), fmt.Sprintf("override_expired lines per node %v", n)
	})
	if lapsed := time.Since(posted); lapsed < 2*time.Second {
		t.Fatalf("override expired %v after it was posted, want 2s", lapsed)
	}
	for i, a := range c.addrs {
		if got := h.overrides(a); len(got) != 0 {
			t.Errorf("%s: GET /v1/overrides = %+v after the expiry, want none", c.names[i], got)
		}
		// Back on free, whose bucket is still spent.
		r := h.mustCheck(a, `{"user":"42"}`)
		if r.status != http.StatusTooManyRequests || r.body.Scope != "tier:free" || r.body.Limit != 2 || r.body.Remaining != 0 || r.body.Owner != c.owner(freeKey) {
			t.Errorf("user 42 via %s after the override lapsed: %d %+v, want 429 tier:free from %s", c.names[i], r.status, r.body, c.owner(freeKey))
		}
	}
	for i, p := range c.audits {
		lines := readAudit(t, p)
		ovr, exp := actions(lines, "override"), actions(lines, "override_expired")
		if len(lines) != 3 || len(actions(lines, "policy_reload")) != 1 || len(ovr) != 1 || len(exp) != 1 {
			t.Fatalf("%s: audit log %+v, want the startup load, the override and its expiry", c.names[i], lines)
		}
		if l := ovr[0]; l.Actor != "oncall" || l.What != "api|user:42" || l.Reason != "incident 12" || l.Old != "" || l.New != "tier enterprise" ||
			l.Expires == nil || !l.Expires.Equal(o.Expires) {
			t.Errorf("%s: override audited as %+v", c.names[i], l)
		}
		if l := exp[0]; l.Actor != "system" || l.What != "api|user:42" || l.Reason != "incident 12" || l.Old != "tier enterprise" || l.New != "" ||
			l.Time.Before(o.Expires.Truncate(time.Millisecond)) {
			t.Errorf("%s: expiry audited as %+v, want after %v", c.names[i], l, o.Expires)
		}
	}
}

// TestClusterOverrideReachesLateMember: an override posted before a node
// joined reaches it when it joins (gossip's push/pull sync with its seed),
// with the same ID, and applies to checks entering through it; no node
// installs it twice.
func TestClusterOverrideReachesLateMember(t *testing.T) {
	h := newHarness(t)
	dir := t.TempDir()
	c := startPolicyCluster(h, dir, overridePolicy)
	status, b, err := postJSON(h.client, "http://"+c.addrs[0]+"/v1/overrides",
		`{"actor":"oncall","reason":"incident 13","user":"42","tier":"enterprise","expires_in":"1m"}`)
	if err != nil {
		t.Fatal(err)
	}
	var o policy.Override
	if status != http.StatusOK || json.Unmarshal(b, &o) != nil || o.ID == "" {
		t.Fatalf("POST /v1/overrides: %d %s", status, b)
	}
	// onlyIt reports whether the node at addr holds exactly o.
	onlyIt := func(name, addr string) (bool, string) {
		got := h.overrides(addr)
		if len(got) != 1 || got[0].ID != o.ID || got[0].User != "42" || got[0].Tier != "enterprise" || !got[0].Expires.Equal(o.Expires) {
			return false, fmt.Sprintf("%s: GET /v1/overrides = %+v, want %s", name, got, o.ID)
		}
		return true, ""
	}
	poll(t, 2*time.Second, "the override on the three nodes", func() (bool, string) {
		for i, a := range c.addrs {
			if ok, why := onlyIt(c.names[i], a); !ok {
				return false, why
			}
		}
		return true, ""
	})

	// node-4 joins through node-3 after the override spread.
	path, audit := filepath.Join(dir, "node-4.yaml"), filepath.Join(dir, "node-4.audit.jsonl")
	writePolicy(t, path, overridePolicy)
	joined := time.Now()
	n4, _ := h.startPolicyNode("node-4", path, audit, c.nodes[2].Cluster().LocalAddr())
	addr4 := httpAddr(n4)
	poll(t, 5*time.Second, "the override on node-4", func() (bool, string) { return onlyIt("node-4", addr4) })
	t.Logf("the override on node-4 %v after it started", time.Since(joined).Round(time.Millisecond))
	h.waitRing(append(slices.Clone(c.nodes), n4), append(slices.Clone(c.names), "node-4"), 10*time.Second)

	entKey := "p|api|override:tier:enterprise|user:42"
	owner, _ := c.nodes[0].Router().Owner(entKey)
	a := h.mustCheck(addr4, `{"user":"42"}`)
	if a.status != http.StatusOK || a.body.Scope != "override:tier:enterprise" || a.body.Limit != 50 || a.body.Remaining != 49 || a.body.Owner != owner {
		t.Errorf("user 42 via node-4: %d %+v, want 200 override:tier:enterprise limit 50 remaining 49 from %s", a.status, a.body, owner)
	}
	// Every node, the new one included, installed it once.
	for i, p := range append(slices.Clone(c.audits), audit) {
		name := "node-4"
		if i < len(c.names) {
			name = c.names[i]
		}
		if ovr := actions(readAudit(t, p), "override"); len(ovr) != 1 || ovr[0].What != "api|user:42" || ovr[0].Reason != "incident 13" {
			t.Errorf("%s: audited overrides %+v, want the one posted, once", name, ovr)
		}
		if ok, why := onlyIt(name, append(slices.Clone(c.addrs), addr4)[i]); !ok {
			t.Error(why)
		}
	}
}

// TestOverrideFitsOneBroadcast: the longest override message policy sends
// is what one cluster broadcast carries.
func TestOverrideFitsOneBroadcast(t *testing.T) {
	if policy.MaxOverrideMessageLen != cluster.MaxBroadcastLen {
		t.Errorf("policy.MaxOverrideMessageLen = %d, cluster.MaxBroadcastLen = %d: they must agree", policy.MaxOverrideMessageLen, cluster.MaxBroadcastLen)
	}
}

// layersPolicy tries the dry run and the refund with limits that do not
// refill during the test (the shipped example's refill in milliseconds).
const layersPolicy = `version: layers
policies:
  api:
    default_tier: free
    tiers:
      free: { limit: 20, per: 1h }
    routes:
      - match: /reports
        cost: 10
      - match: /export/*
        limit: { limit: 2, per: 1h }
        dry_run: true
    global: { limit: 100, per: 1h }
`

// TestClusterPolicyLayers: resolution through the cluster, exact numbers.
// With the shipped examples/policy.yaml: a free user's /reports costs 10
// of a burst of 20, so 2 are admitted and the 3rd is rejected by the tier;
// an anonymous caller gets 5 logins, then the route rejects, and the tier
// that admitted the 6th is refunded. Then, on a policy of slow limits
// reloaded on every node: the refund of the global layer, exactly, and a
// dry-run route that would reject but admits and is counted.
func TestClusterPolicyLayers(t *testing.T) {
	example, err := os.ReadFile("../../examples/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t)
	h.validateOpenAPI()
	// Each node runs a copy of the example (same bytes, same version), so
	// that the second half can reload its own file.
	c := startPolicyCluster(h, t.TempDir(), string(example))
	version := versionOf(t, string(example))
	if !strings.HasPrefix(version, "2026-11-29-") {
		t.Fatalf("the example's version is %s", version)
	}
	// used is what key has spent on its owner's store now.
	used := func(key string) int64 {
		t.Helper()
		n := c.nodes[c.index(c.owner(key))]
		_, u, ok := n.Store().Used(key, clock.FromTime(time.Now()))
		if !ok {
			t.Fatalf("%s: no state on its owner %s", key, c.owner(key))
		}
		return u
	}
	// expect sends body through node i and checks the answer.
	expect := func(label string, i int, body string, status int, scope string, limit, remaining int64, ownerKey string) api.CheckResponse {
		t.Helper()
		a := h.mustCheck(c.addrs[i%3], body)
		b := a.body
		if a.status != status || b.Scope != scope || b.Limit != limit || (remaining >= 0 && b.Remaining != remaining) ||
			b.Owner != c.owner(ownerKey) || b.Degraded {
			t.Fatalf("%s via %s: %d %+v, want %d scope %s limit %d remaining %d from %s", label, c.names[i%3], a.status, b,
				status, scope, limit, remaining, c.owner(ownerKey))
		}
		return b
	}

	// A free user on /reports (cost 10; free is 10/s, bursts of 20). The
	// tier refills a token every 100 ms, so the 2nd check's remaining is
	// exact (0) if it returns within 100 ms of the 1st being sent, and the
	// 3rd is surely rejected if it returns within 1 s: they do unless the
	// machine stalls, when the test says so and checks less.
	reports := `{"user":"7","route":"/reports"}`
	tier7 := "p|api|tier:free|user:7"
	t0 := time.Now()
	expect("/reports 1", 0, reports, http.StatusOK, "tier:free", 10, 10, tier7)
	b := expect("/reports 2", 1, reports, http.StatusOK, "tier:free", 10, -1, tier7)
	if since := time.Since(t0); since < 100*time.Millisecond && b.Remaining != 0 {
		t.Errorf("/reports 2: %d remaining, want 0", b.Remaining)
	} else if since >= 100*time.Millisecond {
		t.Logf("/reports 2 returned %v after the 1st was sent: remaining %d not checked", since, b.Remaining)
	}
	a := h.mustCheck(c.addrs[2], reports)
	if since := time.Since(t0); since < time.Second {
		b := a.body
		if a.status != http.StatusTooManyRequests || b.Scope != "tier:free" || b.Limit != 10 || b.Remaining > 9 ||
			b.RetryAfterMs <= 0 || b.RetryAfterMs > 1000 || b.Code != api.CodeRateLimited || b.Owner != c.owner(tier7) {
			t.Errorf("/reports 3 via node-3: %d %+v, want 429 tier:free limit 10 from %s, fewer than 10 remaining, retry within 1s", a.status, b, c.owner(tier7))
		}
	} else {
		t.Logf("/reports 3 returned %v after the 1st was sent, which may have refilled 10 tokens: %d %+v not checked", since, a.status, a.body)
	}

	// An anonymous caller (IP only) at /login: 5 per minute by IP and
	// route; the anonymous tier (60/min, bursts of 120, by IP) admits all.
	login := `{"ip":"203.0.113.7","route":"/login"}`
	loginKey := "p|api|route:/login|ip:203.0.113.7|/login"
	anonKey := "p|api|tier:anonymous|ip:203.0.113.7"
	t0 = time.Now()
	for i := range 5 {
		expect(fmt.Sprintf("/login %d", i+1), i, login, http.StatusOK, "route:/login", 5, int64(4-i), loginKey)
	}
	b = expect("/login 6", 5, login, http.StatusTooManyRequests, "route:/login", 5, 0, loginKey)
	if b.RetryAfterMs < 11000 || b.RetryAfterMs > 12000 {
		t.Errorf("/login 6: retry after %d ms, want about 12 s (a token per 12 s)", b.RetryAfterMs)
	}
	// The tier admitted the 6th and was refunded: 5 spent, not 6 (it
	// refills one a second, and rounds what is spent up, so the count is
	// exact within the first second).
	if u := used(anonKey); time.Since(t0) < time.Second && u != 5 {
		t.Errorf("%s spent %d after 5 logins admitted and 1 rejected, want 5: the rejected one is refunded", anonKey, u)
	}
	if u := used(loginKey); u != 5 {
		t.Errorf("%s spent %d, want 5", loginKey, u)
	}

	// The slow policy, on every node.
	for _, p := range c.paths {
		writePolicy(t, p, layersPolicy)
	}
	c.waitVersion(versionOf(t, layersPolicy), 5*time.Second)
	reports = `{"user":"8","route":"/reports"}`
	tier8, global := "p|api|tier:free|user:8", "p|api|global|all"
	expect("slow /reports 1", 0, reports, http.StatusOK, "tier:free", 20, 10, tier8)
	expect("slow /reports 2", 1, reports, http.StatusOK, "tier:free", 20, 0, tier8)
	expect("slow /reports 3", 2, reports, http.StatusTooManyRequests, "tier:free", 20, 0, tier8)
	// The global layer admitted the 3rd and got its 10 back.
	if u := used(global); u != 20 {
		t.Errorf("%s spent %d after 2 admitted /reports and 1 rejected, want 20: the rejected one is refunded", global, u)
	}
	if u := used(tier8); u != 20 {
		t.Errorf("%s spent %d, want 20", tier8, u)
	}
	// The dry-run route /export/*: 2 per hour, never rejects. The 3rd
	// request would have been rejected: admitted, listed, counted once, on
	// the node it entered through.
	export := `{"user":"9","route":"/export/x"}`
	for i := range 4 {
		b := expect(fmt.Sprintf("/export %d", i+1), 1, export, http.StatusOK, "tier:free", 20, int64(19-i), "p|api|tier:free|user:9")
		want := []string(nil)
		if i >= 2 {
			want = []string{"route:/export/*"}
		}
		if !slices.Equal(b.WouldReject, want) {
			t.Errorf("/export %d: would_reject %q, want %q", i+1, b.WouldReject, want)
		}
		if i == 2 {
			for j, a := range c.addrs {
				want := 0.0
				if j == 1 {
					want = 1
				}
				if got := h.metric(a, "ringlimit_policy_dry_run_rejections_total", `{scope="route:/export/*"}`); got != want {
					t.Errorf("%s: ringlimit_policy_dry_run_rejections_total{scope=route:/export/*} = %v after the 3rd /export via node-2, want %v", c.names[j], got, want)
				}
			}
		}
	}
	// One global ceiling for every caller (100/h: nothing refills here).
	if u := used(global); u != 20+4 {
		t.Errorf("%s spent %d after user 8's 20 and 4 admitted /export, want 24", global, u)
	}
	if logged := c.logs[1].Records("dry-run layer would have rejected"); len(logged) != 2 {
		t.Errorf("node-2 logged %d dry-run rejections, want 2", len(logged))
	}
}

const prelimitPolicy = `version: prelimit
policies:
  api:
    default_tier: free
    tiers:
      free: { limit: 10, per: 1h, burst: 10 }
    global: { limit: 1000, per: 1h }
    prelimit: 2
`

// floodStats is what a flood through one entry node got, with the entry
// node's metric deltas.
type floodStats struct {
	user, entry int
	admitted    int
	rejected    int
	scopes      map[string]int
	shed        float64 // ringlimit_prelimit_shed_total
	forwarded   float64 // ringlimit_forward_checks_total
	rpcs        float64 // ringlimit_forward_rpcs_total
}

// The flood: prelimitFlood requests for one user from prelimitClients
// clients at once, all through one node.
const prelimitFlood, prelimitClients = 600, 16

// floodPrelimit starts three nodes on prelimitPolicy, picks a user and an
// entry node that does not own the user's tier key (and owns its global
// key, or not, as asked), floods it and checks what holds whatever the
// pre-limiter's details: exactly 10 admitted (the owner is the authority),
// every rejection by the tier, and every tier check either shed on the entry
// node or forwarded to the owner.
func floodPrelimit(t *testing.T, entryOwnsGlobal bool) floodStats {
	h := newHarness(t)
	c := startPolicyCluster(h, t.TempDir(), prelimitPolicy)
	tierKey := func(u int) string { return fmt.Sprintf("p|api|tier:free|user:%d", u) }
	globalKey := func(int) string { return "p|api|global|all" }
	st := floodStats{user: -1, scopes: map[string]int{}}
	for u := 1; u <= 1000 && st.user < 0; u++ {
		for e, name := range c.names {
			if c.owner(tierKey(u)) != name && (c.owner(globalKey(u)) == name) == entryOwnsGlobal {
				st.user, st.entry = u, e
				break
			}
		}
	}
	if st.user < 0 {
		t.Fatalf("no user in 1..1000 with an entry node that does not own its tier key (and owns its global key: %v)", entryOwnsGlobal)
	}
	entry, name := c.addrs[st.entry], c.names[st.entry]
	// The entry node's /v1/owner says the same.
	for _, k := range []string{tierKey(st.user), globalKey(st.user)} {
		var o api.OwnerResponse
		if err := getJSON(h.client, "http://"+entry+"/v1/owner?key="+k, &o); err != nil {
			t.Fatal(err)
		}
		if o.Owner != c.owner(k) {
			t.Fatalf("/v1/owner?key=%s on %s: %+v, its ring says %s", k, name, o, c.owner(k))
		}
	}
	shedBefore := h.metric(entry, "ringlimit_prelimit_shed_total", "")
	fwdBefore := h.metric(entry, "ringlimit_forward_checks_total", "")
	rpcBefore := h.metric(entry, "ringlimit_forward_rpcs_total", "")
	body := fmt.Sprintf(`{"user":"%d"}`, st.user)
	var (
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
	)
	jobs := make(chan struct{}, prelimitFlood)
	for range prelimitFlood {
		jobs <- struct{}{}
	}
	close(jobs)
	deadline := time.Now().Add(20 * time.Second)
	start := time.Now()
	for range prelimitClients {
		wg.Go(func() {
			for range jobs {
				var a checkAnswer
				err := errors.New("not sent: deadline passed")
				if time.Now().Before(deadline) {
					a, err = policyCheck(h.client, entry, body)
				}
				mu.Lock()
				switch {
				case err != nil:
					firstErr = cmp.Or(firstErr, err)
				case a.body.Degraded:
					firstErr = cmp.Or(firstErr, fmt.Errorf("degraded answer %+v", a.body))
				case a.status == http.StatusOK:
					st.admitted++
				default:
					st.rejected++
					st.scopes[a.body.Scope]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	if firstErr != nil {
		t.Fatal(firstErr)
	}
	st.shed = h.metric(entry, "ringlimit_prelimit_shed_total", "") - shedBefore
	st.forwarded = h.metric(entry, "ringlimit_forward_checks_total", "") - fwdBefore
	st.rpcs = h.metric(entry, "ringlimit_forward_rpcs_total", "") - rpcBefore
	t.Logf("user %d via %s (tier key owned by %s, global key by %s): %d requests in %v from %d clients: %d admitted, %d rejected %v; on %s: %v shed, %v checks forwarded in %v RPCs",
		st.user, name, c.owner(tierKey(st.user)), c.owner(globalKey(st.user)), prelimitFlood, took.Round(time.Millisecond), prelimitClients,
		st.admitted, st.rejected, st.scopes, name, st.shed, st.forwarded, st.rpcs)
	if st.admitted != 10 || st.rejected != prelimitFlood-10 || st.scopes["tier:free"] != prelimitFlood-10 {
		t.Errorf("%d admitted, %d rejected %v, want exactly 10 admitted and %d rejected by tier:free", st.admitted, st.rejected, st.scopes, prelimitFlood-10)
	}
	owner := c.nodes[c.index(c.owner(tierKey(st.user)))]
	if _, n, ok := owner.Store().Used(tierKey(st.user), clock.FromTime(time.Now())); !ok || n != 10 {
		t.Errorf("%s spent %d on its owner (held: %v), want 10", tierKey(st.user), n, ok)
	}
	// Every tier check is shed or forwarded; the global layer's pre-limiter
	// (2,000 per hour) never sheds. At least 11 go to the owner (10
	// admitted, then a rejection); at most the window's 20, plus, if the
	// pre-limiter gives a rejected check's slot back, those of the other
	// clients that were already past the rejection cache.
	if tier := prelimitFlood - st.shed; tier < 11 || tier > 20+prelimitClients-1 {
		t.Errorf("%v of %d tier checks shed on %s, so %v forwarded: want between 11 and %d forwarded", st.shed, prelimitFlood, name, tier, 20+prelimitClients-1)
	}
	return st
}

// TestClusterPrelimitSheds: a flood of 600 requests for one user, from 16
// clients, all entering through one node that does not own the user's tier
// key but owns its global key. The tier's pre-limiter on the entry node is
// a sliding window of ceil(2 × max(10, 10)) = 20 per hour: the owner gets
// the tier checks that pass it (20, or fewer once its rejections are
// cached on the entry node) and admits exactly 10; the rest are shed on
// the entry node. The global layer is decided (and refunded)
// on the entry node itself. So the only checks that leave the entry node
// are the tier checks that were not shed.
func TestClusterPrelimitSheds(t *testing.T) {
	st := floodPrelimit(t, true)
	if tier := prelimitFlood - st.shed; st.forwarded != tier {
		t.Errorf("ringlimit_forward_checks_total grew by %v on the entry node, want %v: the tier checks not shed, and nothing else", st.forwarded, tier)
	}
}

// TestClusterPrelimitShedsEveryLayer: the same flood, through a node that
// owns neither the tier key nor the global key. A request whose tier check
// is shed is rejected before any network hop, so its global check should
// not leave the entry node either (nor come back as a refund). With T tier
// checks forwarded (600 − shed), at most T global checks go out, and at
// most T − 10 refunds (the forwarded requests the tier's owner rejected):
// 3T − 10 checks in all. (The router runs every layer's pre-limiter before
// it sends any layer, and a request's layers stand or fall together.)
func TestClusterPrelimitShedsEveryLayer(t *testing.T) {
	st := floodPrelimit(t, false)
	tier := prelimitFlood - st.shed
	if bound := 3*tier - 10; st.forwarded > bound {
		t.Errorf("ringlimit_forward_checks_total grew by %v on the entry node for %d requests, %v of whose tier checks were shed there; want at most %v: a request shed on one layer must not send (or refund) the others",
			st.forwarded, prelimitFlood, st.shed, bound)
	}
}
