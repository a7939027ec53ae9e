package ui

import (
	"context"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/api"
	"github.com/ringlimit/ringlimit/clock"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
	"github.com/ringlimit/ringlimit/policy"
)

// fakeSource answers the snapshots it is given, one per call, the last
// one again when they run out.
type fakeSource struct {
	mu    sync.Mutex
	snaps []Snapshot
	calls int
}

func (f *fakeSource) get(context.Context) Snapshot {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	s := f.snaps[0]
	if len(f.snaps) > 1 {
		f.snaps = f.snaps[1:]
	}
	return s
}

func clusterOf(states ...string) api.ClusterStatus {
	cs := api.ClusterStatus{Self: "node-1", RingVersion: 7,
		Replication: api.ReplicationStatus{Factor: 1, LagMs: 0.25, Pending: 2},
		Quorum:      api.QuorumStatus{ClusterSize: 3}}
	for i, s := range states {
		name := "node-" + string(rune('1'+i))
		cs.Members = append(cs.Members, api.ClusterMember{Name: name, HTTP: "127.0.0.1:808" + name[5:], GRPC: "g", Peer: "p", Gossip: "q",
			State: s, OnRing: s == "alive", Keys: -1})
	}
	return cs
}

func stats(name string, uptimeS float64, checks, refused, forwarded, degraded, peerChecks uint64) NodeStats {
	return NodeStats{Name: name, Version: "v1", UptimeS: uptimeS, Keys: 10, RingVersion: 7, Checks: checks, Refused: refused,
		Forwarded: forwarded, Degraded: degraded, PeerChecks: peerChecks, ReplicationLagMs: 0.25, PolicyVersion: "sha256:ab"}
}

func serve(t *testing.T, cfg Config) *httptest.Server {
	t.Helper()
	if cfg.Clock == nil {
		cfg.Clock = clock.System()
	}
	h, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

func get(t *testing.T, srv *httptest.Server, path, token string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest("GET", srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// The status endpoint's JSON, field by field, over two calls 1.5 s apart
// in the nodes' uptimes: the second carries rates.
func TestStatusJSON(t *testing.T) {
	expires := time.Date(2026, 12, 2, 4, 0, 0, 0, time.UTC)
	ring := api.NewRingStatus([]string{"node-1", "node-2", "node-1", "node-2", "node-1"}, 7)
	pol := &Policy{Version: "sha256:ab", Overrides: []policy.Override{{ID: "o-1", Actor: "admin", Reason: "incident",
		Policy: "default", User: "42", Limit: &policy.LimitArg{Limit: 5, Per: "1s"}, Created: expires.Add(-time.Hour), Expires: expires}}}
	src := &fakeSource{snaps: []Snapshot{
		{Cluster: clusterOf("alive", "alive", "dead"), Ring: ring, Policy: pol,
			Stats: []NodeStats{stats("node-1", 10, 100, 10, 50, 0, 7), stats("node-2", 20, 1000, 0, 0, 0, 0)}},
		{Cluster: clusterOf("alive", "alive", "dead"), Ring: ring, Policy: pol,
			Stats: []NodeStats{stats("node-1", 11.5, 400, 40, 200, 3, 37), stats("node-2", 20.5, 1010, 0, 0, 0, 0)}},
	}}
	srv := serve(t, Config{Source: src.get, MinInterval: -1})
	if resp, body := get(t, srv, "/ui/api/status", ""); resp.StatusCode != 200 {
		t.Fatalf("first status: %d %s", resp.StatusCode, body)
	}
	resp, body := get(t, srv, "/ui/api/status", "")
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" || resp.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("status: %d, %v", resp.StatusCode, resp.Header)
	}
	// node-1: 300 checks in 1.5 s = 200/s; 30 refused = 20/s, 10%; 150
	// forwarded = 50%; 3 degraded = 2/s; 30 peer checks = 20/s. node-2:
	// only 0.5 s since its last sample, too short for a rate. node-3 did
	// not answer.
	want := `{"self":"node-1","ring_version":"7","members":[` +
		`{"name":"node-1","http":"127.0.0.1:8081","grpc":"g","peer":"p","gossip":"q","state":"alive","on_ring":true,"keys":10,"self":true,` +
		`"stats":{"name":"node-1","version":"v1","uptime_s":11.5,"keys":10,"ring_version":7,"checks":400,"refused":40,"forwarded":200,"degraded":3,"peer_checks":37,"replication_lag_ms":0.25,"replication_pending":0,"policy_version":"sha256:ab"},` +
		`"rates":{"window_s":1.5,"checks_per_s":200,"refused_per_s":20,"degraded_per_s":2,"peer_checks_per_s":20,"refusal_rate":0.1,"forwarded_share":0.5}},` +
		`{"name":"node-2","http":"127.0.0.1:8082","grpc":"g","peer":"p","gossip":"q","state":"alive","on_ring":true,"keys":10,"self":false,` +
		`"stats":{"name":"node-2","version":"v1","uptime_s":20.5,"keys":10,"ring_version":7,"checks":1010,"refused":0,"forwarded":0,"degraded":0,"peer_checks":0,"replication_lag_ms":0.25,"replication_pending":0,"policy_version":"sha256:ab"},` +
		`"rates":null},` +
		`{"name":"node-3","http":"127.0.0.1:8083","grpc":"g","peer":"p","gossip":"q","state":"dead","on_ring":false,"keys":-1,"self":false,"stats":null,"rates":null}],` +
		`"ring":{"ring_version":7,"members":[{"name":"node-1","partitions":3,"share":0.6},{"name":"node-2","partitions":2,"share":0.4}],"owners":[0,1,0,1,0]},` +
		`"replication":{"factor":1,"lag_ms":0.25,"pending":2,"replicas":0,"successor_keys":0},` +
		`"quorum":{"cluster_size":3,"minority":false},` +
		`"policy":{"version":"sha256:ab","overrides":[{"id":"o-1","actor":"admin","reason":"incident","policy":"default","user":"42","limit":{"limit":5,"per":"1s"},"created":"2026-12-02T03:00:00Z","expires":"2026-12-02T04:00:00Z"}]}}` + "\n"
	if body != want {
		t.Fatalf("status body:\n%s\nwant:\n%s", body, want)
	}
}

// Before any sample, without a ring or a policy: empty lists, not nulls,
// and a null policy.
func TestStatusJSONEmpty(t *testing.T) {
	srv := serve(t, Config{Source: (&fakeSource{snaps: []Snapshot{{Cluster: api.ClusterStatus{Self: "node-1"}}}}).get})
	_, body := get(t, srv, "/ui/api/status", "")
	want := `{"self":"node-1","ring_version":"0","members":[],"ring":{"ring_version":0,"members":[],"owners":[]},` +
		`"replication":{"factor":0,"lag_ms":0,"pending":0,"replicas":0,"successor_keys":0},"quorum":{"cluster_size":0,"minority":false},"policy":null}` + "\n"
	if body != want {
		t.Fatalf("status body:\n%s\nwant:\n%s", body, want)
	}
}

// Rates: over the newest sample at least 1 s older; a restart (uptime or a
// count going back) starts over; samples over 10 s old are dropped, but
// the newest is always kept.
func TestRates(t *testing.T) {
	k := newRateKeeper()
	steps := []struct {
		uptime float64
		checks uint64
		want   *Rates
	}{
		{0.5, 0, nil},
		{1.0, 10, nil}, // 0.5 s since the first: too close
		{1.5, 40, &Rates{WindowS: 1, ChecksPerS: 40}},    // against 0.5
		{2.5, 40, &Rates{WindowS: 1, ChecksPerS: 0}},     // against 1.5
		{2.75, 50, &Rates{WindowS: 1.25, ChecksPerS: 8}}, // against 1.5
		{1.0, 5, nil}, // restarted
		{2.0, 25, &Rates{WindowS: 1, ChecksPerS: 20}},    // against the restart's 1.0
		{40.0, 405, &Rates{WindowS: 38, ChecksPerS: 10}}, // 2.0 is the newest kept
		{41.0, 415, &Rates{WindowS: 1, ChecksPerS: 10}},  // against 40 (2.0 dropped)
		{41.5, 405, nil}, // a count went back
	}
	for i, s := range steps {
		got := k.add(NodeStats{Name: "n", UptimeS: s.uptime, Checks: s.checks})
		if (got == nil) != (s.want == nil) || got != nil && *got != *s.want {
			t.Errorf("step %d: add(uptime %v, checks %d) = %+v, want %+v", i, s.uptime, s.checks, got, s.want)
		}
	}
	if n := len(k.seen["n"]); n != 1 {
		t.Errorf("%d samples kept after the last restart, want 1", n)
	}
	if got := k.add(NodeStats{Name: "old", Checks: 5}); got != nil || k.seen["old"] != nil {
		t.Errorf("a node without uptime: rates %+v, samples %v; want none", got, k.seen["old"])
	}
	// Polled every 10 ms for 20 s, 100 checks a second: one sample in ten
	// is kept, of the last 10 s, at most maxSamples; the rates hold.
	var last *Rates
	for i := 1; i <= 2000; i++ {
		last = k.add(NodeStats{Name: "busy", UptimeS: float64(i) / 100, Checks: uint64(i)})
	}
	if n := len(k.seen["busy"]); n != maxSamples {
		t.Errorf("%d samples kept of a node polled 2,000 times, want %d", n, maxSamples)
	}
	if last == nil || last.WindowS < 1 || last.WindowS > 1.1 || math.Abs(last.ChecksPerS-100) > 1e-9 {
		t.Errorf("rates of the busy node: %+v, want 100 checks/s over 1 to 1.1 s", last)
	}
	k.forget(map[string]bool{"other": true})
	if len(k.seen) != 0 {
		t.Errorf("samples of a forgotten node kept: %v", k.seen)
	}
}

// GET / redirects to /ui/; the page and its files are served with the
// security headers; other paths are 404.
func TestPageAndRedirect(t *testing.T) {
	srv := serve(t, Config{Source: (&fakeSource{snaps: []Snapshot{{}}}).get})
	resp, _ := get(t, srv, "/", "")
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/ui/" {
		t.Fatalf("GET /: %d to %q, want 302 to /ui/", resp.StatusCode, resp.Header.Get("Location"))
	}
	for path, want := range map[string]string{
		"/ui/":          `<script src="app.js" defer></script>`,
		"/ui/app.js":    "function slicePath(p, n)",
		"/ui/style.css": ".state-dead",
	} {
		resp, body := get(t, srv, path, "")
		if resp.StatusCode != 200 || !strings.Contains(body, want) {
			t.Errorf("GET %s: %d, body without %q", path, resp.StatusCode, want)
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.HasPrefix(csp, "default-src 'none'; script-src 'self';") {
			t.Errorf("GET %s: Content-Security-Policy %q", path, csp)
		}
		if resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: no X-Content-Type-Options: nosniff", path)
		}
	}
	if _, body := get(t, srv, "/ui/", ""); strings.Contains(body, "<script>") || strings.Contains(body, "style=") || strings.Contains(body, "http") && strings.Contains(body, "://") {
		t.Errorf("the page has inline script or style, or refers to another origin")
	}
	for _, path := range []string{"/nothing", "/ui/nothing.js"} {
		if resp, _ := get(t, srv, path, ""); resp.StatusCode != 404 {
			t.Errorf("GET %s: %d, want 404", path, resp.StatusCode)
		}
	}
}

// With PrivateReads the status needs an admin token; the page does not.
func TestPrivateReads(t *testing.T) {
	tokens := &api.Tokens{}
	tokens.Set([]api.Token{{Name: "ops", Token: "0123456789abcdef0123"}})
	srv := serve(t, Config{Source: (&fakeSource{snaps: []Snapshot{{}}}).get, AdminTokens: tokens, PrivateReads: true})
	for _, c := range []struct {
		path, token string
		want        int
	}{
		{"/ui/api/status", "", 401},
		{"/ui/api/status", "wrong-token-wrong-token", 403},
		{"/ui/api/status", "0123456789abcdef0123", 200},
		{"/ui/", "", 200},
		{"/ui/app.js", "", 200},
	} {
		if resp, body := get(t, srv, c.path, c.token); resp.StatusCode != c.want {
			t.Errorf("GET %s with token %q: %d %s, want %d", c.path, c.token, resp.StatusCode, body, c.want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	if _, err := New(Config{}); err == nil || err.Error() != "ui: Source is required" {
		t.Errorf("New without Source: %v", err)
	}
	if _, err := New(Config{Source: (&fakeSource{}).get, Clock: clock.System(), Timeout: -1}); err == nil {
		t.Error("New with a negative Timeout: no error")
	}
	if _, err := New(Config{Source: (&fakeSource{}).get}); err == nil || err.Error() != "ui: Config.Clock is required" {
		t.Errorf("New without Clock: %v", err)
	}
}

// TestStatusShared: status calls within MinInterval of a gathering answer
// its result: Source is called once for three calls, all three bodies the
// same; past MinInterval it is called again.
func TestStatusShared(t *testing.T) {
	src := &fakeSource{snaps: []Snapshot{
		{Cluster: clusterOf("alive"), Stats: []NodeStats{stats("node-1", 10, 100, 0, 0, 0, 0)}},
		{Cluster: clusterOf("alive"), Stats: []NodeStats{stats("node-1", 12, 300, 0, 0, 0, 0)}},
	}}
	clk := testkit.NewClock(0)
	srv := serve(t, Config{Source: src.get, MinInterval: 300 * time.Millisecond, Clock: clk})
	_, first := get(t, srv, "/ui/api/status", "")
	for range 2 {
		if _, body := get(t, srv, "/ui/api/status", ""); body != first {
			t.Fatalf("a call within MinInterval answered\n%s\nwant the first gathering's\n%s", body, first)
		}
	}
	src.mu.Lock()
	calls := src.calls
	src.mu.Unlock()
	if calls != 1 {
		t.Errorf("Source called %d times for 3 calls within MinInterval, want 1", calls)
	}
	clk.Advance(299 * time.Millisecond)
	if _, body := get(t, srv, "/ui/api/status", ""); body != first {
		t.Fatalf("a call 299ms after the gathering answered\n%s\nwant the first gathering's\n%s", body, first)
	}
	clk.Advance(time.Millisecond)
	if _, body := get(t, srv, "/ui/api/status", ""); body == first || !strings.Contains(body, `"checks":300`) {
		t.Errorf("a call past MinInterval answered %s, want the second gathering", body)
	}
}
