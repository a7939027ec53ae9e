package harness_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/internal/testonly/harness"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
	"github.com/ringlimit/ringlimit/node"
)

// leaseAnswer is the body of an acquire's (or a check's) answer.
type leaseAnswer struct {
	Allowed     bool   `json:"allowed"`
	Code        string `json:"code"`
	Scope       string `json:"scope"`
	Remaining   int64  `json:"remaining"`
	Limit       int64  `json:"limit"`
	Lease       string `json:"lease"`
	InFlight    int64  `json:"in_flight"`
	ExpiresInMs int64  `json:"expires_in_ms"`
	Owner       string `json:"owner"`
}

// postH is post, with the answer's headers.
func postH(t *testing.T, hc *http.Client, n *harness.Node, path, body string, out any) (int, http.Header) {
	t.Helper()
	resp, err := hc.Post("http://"+n.Node.HTTPAddr()+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Errorf("POST %s to %s: %v", path, n.Name, err)
		return 0, nil
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Errorf("POST %s to %s: %v", path, n.Name, err)
	}
	return resp.StatusCode, resp.Header
}

// TestAcquireHTTPThreeNodes: a limit of 5 in flight, 15 acquires at once,
// 5 through each of three nodes: exactly 5 granted (each with a lease,
// in_flight 1 to 5: grants replicated in one round answer together), 10
// refused 429 RATE_LIMITED with Retry-After 30 (the earliest lease's
// expiry). A release through another node frees exactly one slot (of two acquires
// then, one is granted), and a second release answers released false.
// A renew 10 s after an acquire of 30 s expires 30 s after the renew.
// An acquire repeated with its request_id, through another node, answers
// the same lease and takes no second slot.
func TestAcquireHTTPThreeNodes(t *testing.T) {
	clk := testkit.NewClock(0)
	c := harness.Start(t, harness.Options{PeerTimeout: peerTimeout, Clock: clk}, "A", "B", "C")
	hc := httpTo(c)
	defer hc.CloseIdleConnections()
	const acq = `{"key":"jobs","limit":{"algorithm":"concurrency","limit":5},"ttl":"30s"}`

	var mu sync.Mutex
	var granted []leaseAnswer
	refused := 0
	var wg sync.WaitGroup
	for i := range 15 {
		n := c.Nodes[i%3]
		wg.Go(func() {
			var r leaseAnswer
			st, h := postH(t, hc, n, "/v1/acquire", acq, &r)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case st == 200 && r.Allowed && r.Lease != "" && r.Limit == 5 && r.ExpiresInMs == 30000:
				granted = append(granted, r)
			case st == 429 && !r.Allowed && r.Code == "RATE_LIMITED" && r.Lease == "" && h.Get("Retry-After") == "30":
				refused++
			default:
				t.Errorf("acquire through %s: %d %+v, Retry-After %q", n.Name, st, r, h.Get("Retry-After"))
			}
		})
	}
	wg.Wait()
	if len(granted) != 5 || refused != 10 {
		t.Fatalf("%d granted, %d refused; want 5 and 10", len(granted), refused)
	}
	for _, g := range granted {
		if g.InFlight < 1 || g.InFlight > 5 {
			t.Errorf("a grant answered in_flight %d, want 1 to 5: %+v", g.InFlight, g)
		}
	}

	var rel struct {
		Released bool  `json:"released"`
		InFlight int64 `json:"in_flight"`
	}
	body := fmt.Sprintf(`{"lease":%q,"outcome":"ok","latency_ms":120}`, granted[0].Lease)
	if st, _ := postH(t, hc, c.Nodes[1], "/v1/release", body, &rel); st != 200 || !rel.Released || rel.InFlight != 4 {
		t.Fatalf("release through B: %d %+v; want released, in_flight 4", st, rel)
	}
	if st, _ := postH(t, hc, c.Nodes[2], "/v1/release", body, &rel); st != 200 || rel.Released {
		t.Fatalf("second release through C: %d %+v; want released false", st, rel)
	}
	ok, full := 0, 0
	for i := range 2 {
		var r leaseAnswer
		switch st, _ := postH(t, hc, c.Nodes[i], "/v1/acquire", acq, &r); st {
		case 200:
			ok++
		case 429:
			full++
		}
	}
	if ok != 1 || full != 1 {
		t.Fatalf("after one release: %d granted, %d refused; want 1 and 1", ok, full)
	}

	clk.Advance(10 * time.Second)
	var ren struct {
		Renewed     bool  `json:"renewed"`
		ExpiresInMs int64 `json:"expires_in_ms"`
		InFlight    int64 `json:"in_flight"`
	}
	if st, _ := postH(t, hc, c.Nodes[0], "/v1/renew", fmt.Sprintf(`{"lease":%q,"ttl":"30s"}`, granted[1].Lease), &ren); st != 200 || !ren.Renewed || ren.ExpiresInMs != 30000 || ren.InFlight != 5 {
		t.Fatalf("renew: %d %+v; want renewed for 30000 ms, in_flight 5", st, ren)
	}
	clk.Advance(25 * time.Second) // the others expired, the renewed one lives 5 s more
	if st, _ := postH(t, hc, c.Nodes[2], "/v1/renew", fmt.Sprintf(`{"lease":%q}`, granted[2].Lease), &ren); st != 404 {
		t.Fatalf("renew of an expired lease: %d, want 404 LEASE_NOT_FOUND", st)
	}
	if st, _ := postH(t, hc, c.Nodes[1], "/v1/release", fmt.Sprintf(`{"lease":%q}`, granted[1].Lease), &rel); st != 200 || !rel.Released || rel.InFlight != 0 {
		t.Fatalf("release of the renewed lease: %d %+v; want released, in_flight 0", st, rel)
	}

	const idem = `{"key":"idem","limit":{"algorithm":"concurrency","limit":2},"request_id":"job-7"}`
	var first, again leaseAnswer
	if st, _ := postH(t, hc, c.Nodes[0], "/v1/acquire", idem, &first); st != 200 || first.InFlight != 1 {
		t.Fatalf("acquire with request_id: %d %+v", st, first)
	}
	if st, _ := postH(t, hc, c.Nodes[2], "/v1/acquire", idem, &again); st != 200 || again.Lease != first.Lease || again.InFlight != 1 {
		t.Fatalf("the same acquire again through C: %d %+v; want lease %s, in_flight 1", st, again, first.Lease)
	}
}

// mixed is a policy whose /export route holds at most 2 in flight per
// user, under a tier of 4 a day.
const mixed = `
version: mixed
policies:
  api:
    default_tier: free
    tiers:
      free: { limit: 4, per: 24h }
    routes:
      - match: /export
        limit: { algorithm: concurrency, limit: 2, key: identity+route, lease_ttl: 1m }
`

// TestAcquirePolicyMixedThreeNodes: six acquires of /export through the
// three nodes: 2 granted, 4 refused by route:/export, whose tier spends
// are refunded (a peek of the tier then says 2 remain). With both leases
// released, 2 more are granted (the tier is spent), and the next is
// refused by tier:free: 4 refusals by the concurrency layer, 1 by the rate
// layer. A /v1/check of /export through the policy takes a lease too.
func TestAcquirePolicyMixedThreeNodes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(mixed), 0o644); err != nil {
		t.Fatal(err)
	}
	o := harness.Options{PeerTimeout: peerTimeout, Clock: testkit.NewClock(0), Node: func(cfg *node.Config) { cfg.PolicyPath = path }}
	c := harness.Start(t, o, "A", "B", "C")
	hc := httpTo(c)
	defer hc.CloseIdleConnections()
	const export = `{"user":"u1","route":"/export"}`
	refusedBy := map[string]int{}
	var leases []string
	acquire := func(n *harness.Node) {
		t.Helper()
		var r leaseAnswer
		switch st, h := postH(t, hc, n, "/v1/acquire", export, &r); {
		case st == 200 && r.Lease != "" && r.Scope == "route:/export" && r.Limit == 2 && r.ExpiresInMs == 60000:
			leases = append(leases, r.Lease)
		case st == 429 && r.Code == "RATE_LIMITED" && h.Get("Retry-After") != "":
			refusedBy[r.Scope]++
		default:
			t.Fatalf("acquire through %s: %d %+v", n.Name, st, r)
		}
	}
	for i := range 6 {
		acquire(c.Nodes[i%3])
	}
	if len(leases) != 2 || refusedBy["route:/export"] != 4 || len(refusedBy) != 1 {
		t.Fatalf("%d granted, refused %v; want 2, and 4 by route:/export", len(leases), refusedBy)
	}
	var peek leaseAnswer
	if st, _ := postH(t, hc, c.Nodes[1], "/v1/check", `{"user":"u1","route":"/home","peek":true}`, &peek); st != 200 || peek.Remaining != 1 {
		t.Fatalf("peek of the tier: %d %+v; want remaining 1 (2 of 4 spent, refusals refunded, 1 peeked)", st, peek)
	}
	var rel struct {
		Released bool `json:"released"`
	}
	for i, l := range leases {
		if st, _ := postH(t, hc, c.Nodes[i], "/v1/release", fmt.Sprintf(`{"lease":%q}`, l), &rel); st != 200 || !rel.Released {
			t.Fatalf("release %d: %d %+v", i, st, rel)
		}
	}
	leases = nil
	for i := range 3 {
		acquire(c.Nodes[i])
	}
	if len(leases) != 2 || refusedBy["route:/export"] != 4 || refusedBy["tier:free"] != 1 {
		t.Fatalf("%d granted, refused %v; want 2, 4 by route:/export and 1 by tier:free", len(leases), refusedBy)
	}
	var chk leaseAnswer
	if st, _ := postH(t, hc, c.Nodes[2], "/v1/check", `{"user":"u2","route":"/export"}`, &chk); st != 200 || chk.Lease == "" || chk.InFlight != 1 {
		t.Fatalf("check of /export: %d %+v; want a lease, in_flight 1", st, chk)
	}
}
