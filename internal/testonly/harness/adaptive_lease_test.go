package harness_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/internal/testonly/harness"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
	"github.com/ringlimit/ringlimit/node"
)

// capped is a policy of two concurrency routes: /export holds an adaptive
// number in flight per user (AIMD from 4 within [2, 10], judged every
// second on at least 3 samples, a cut multiplying by 0.75: 4 → 3), whose
// layer's own limit, 10, is only where the controller may go; /slow holds
// 5 in flight per user, whose leases renew for at most a minute.
const capped = `
version: capped
policies:
  api:
    default_tier: free
    tiers:
      free: { limit: 1000, per: 24h }
    routes:
      - match: /export
        limit:
          algorithm: concurrency
          limit: 10
          key: identity+route
          lease_ttl: 1m
          adaptive: { algorithm: aimd, min: 2, max: 10, initial: 4, window: 1s, min_samples: 3, backoff: 0.75 }
      - match: /slow
        limit: { algorithm: concurrency, limit: 5, key: identity+route, lease_ttl: 30s, max_lease_ttl: 1m }
`

// startCapped starts A, B and C on a fake clock with the policy capped.
func startCapped(t *testing.T) (*harness.Cluster, *testkit.Clock, *http.Client) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(capped), 0o644); err != nil {
		t.Fatal(err)
	}
	clk := testkit.NewClock(0)
	c := harness.Start(t, harness.Options{PeerTimeout: peerTimeout, Clock: clk, Node: func(cfg *node.Config) { cfg.PolicyPath = path }}, "A", "B", "C")
	hc := httpTo(c)
	t.Cleanup(hc.CloseIdleConnections)
	return c, clk, hc
}

// grants acquires body through each of nodes perNode times, in turn, and
// returns the leases granted and their owner; every grant must answer
// limit want.
func grants(t *testing.T, hc *http.Client, nodes []*harness.Node, body string, perNode int, want int64) ([]string, string) {
	t.Helper()
	var leases []string
	owner := ""
	for range perNode {
		for _, n := range nodes {
			var r leaseAnswer
			switch st, _ := postH(t, hc, n, "/v1/acquire", body, &r); {
			case st == 200 && r.Lease != "" && r.Limit == want:
				leases, owner = append(leases, r.Lease), r.Owner
			case st == 429 && r.Code == "RATE_LIMITED":
			default:
				t.Fatalf("acquire through %s: %d %+v, want a grant at limit %d or a refusal", n.Name, st, r, want)
			}
		}
	}
	return leases, owner
}

// others returns c's nodes but the one named.
func others(c *harness.Cluster, name string) []*harness.Node {
	var out []*harness.Node
	for _, n := range c.Nodes {
		if n.Name != name {
			out = append(out, n)
		}
	}
	return out
}

// TestAcquireAdaptivePolicyThroughEveryNode: acquires of /export, 3
// through each node (the two that do not own the layer's key too), are
// granted exactly 4 (the controller's initial limit, not the layer's 10),
// each answering limit 4. The 4 released with outcome error through the
// non-owners are a window of errors: a second later the limit is 3, and 3
// acquires through each non-owner are granted exactly 3, answering limit 3.
func TestAcquireAdaptivePolicyThroughEveryNode(t *testing.T) {
	c, clk, hc := startCapped(t)
	const export = `{"user":"u1","route":"/export"}`
	leases, owner := grants(t, hc, c.Nodes, export, 3, 4)
	if len(leases) != 4 || owner == "" {
		t.Fatalf("%d of 9 acquires granted (owner %q), want 4", len(leases), owner)
	}
	rest := others(c, owner)
	var rel struct {
		Released bool `json:"released"`
	}
	for i, l := range leases {
		body := fmt.Sprintf(`{"lease":%q,"outcome":"error","latency_ms":40}`, l)
		if st, _ := postH(t, hc, rest[i%2], "/v1/release", body, &rel); st != 200 || !rel.Released {
			t.Fatalf("release %d through %s: %d %+v", i, rest[i%2].Name, st, rel)
		}
	}
	clk.Advance(time.Second)
	if leases, _ := grants(t, hc, rest, export, 3, 3); len(leases) != 3 {
		t.Fatalf("after a window of errors: %d of 6 acquires through the non-owners granted, want 3", len(leases))
	}
}

// TestRenewCappedByMaxLeaseTTL: a lease of /slow (max_lease_ttl 1m)
// renewed through a node that does not own its key, asking 30m, lives
// 60000 ms; its owner killed after a replication round, the successor,
// owner next, caps a second renew asking 30m at 60000 ms too. A renew
// with no ttl asks the default 30 s.
func TestRenewCappedByMaxLeaseTTL(t *testing.T) {
	c, clk, hc := startCapped(t)
	leases, owner := grants(t, hc, c.Nodes[:1], `{"user":"u1","route":"/slow"}`, 1, 5)
	if len(leases) != 1 {
		t.Fatalf("acquire of /slow: %d granted, want 1", len(leases))
	}
	var ren struct {
		Renewed     bool  `json:"renewed"`
		ExpiresInMs int64 `json:"expires_in_ms"`
	}
	renew := func(n *harness.Node, body string, want int64) {
		t.Helper()
		if st, _ := postH(t, hc, n, "/v1/renew", body, &ren); st != 200 || !ren.Renewed || ren.ExpiresInMs != want {
			t.Fatalf("renew %s through %s: %d %+v, want renewed for %d ms", body, n.Name, st, ren, want)
		}
	}
	rest := others(c, owner)
	long := fmt.Sprintf(`{"lease":%q,"ttl":"30m"}`, leases[0])
	renew(rest[0], long, 60000)
	renew(rest[1], fmt.Sprintf(`{"lease":%q}`, leases[0]), 30000)

	synced(t, c, owner)
	c.Node(owner).Stop()
	harness.SetView(rest, rest, owner)
	clk.Advance(10 * time.Second)
	for _, n := range rest {
		renew(n, long, 60000)
	}
}
