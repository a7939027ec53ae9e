package forward

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
)

// checkLeased sends one leased check of key through r.
func checkLeased(t testing.TB, r *Router, key string, l bucket.Limit) Result {
	t.Helper()
	var out [1]Result
	if err := r.Check(context.Background(), []Check{{Key: key, Limit: l, Cost: 1, Lease: true}}, out[:]); err != nil {
		t.Fatal(err)
	}
	return out[0]
}

// With leases, a hot key hammered through every node still admits exactly
// its capacity: leased tokens are spent at the owner before they are used.
func TestLeaseExact(t *testing.T) {
	clock := testkit.NewClock(0)
	nodes := startNodes(t, clock, nil, "A", "B", "C")
	formCluster(clock, nodes...)
	key := keysOwnedBy(t, nodes[0].r, "B", "hot", 1)[0]
	lim := bucket.MustLimit(bucket.TokenBucket, 600, time.Hour, 600) // no refill to speak of
	var allowed atomic.Int64
	var wg sync.WaitGroup
	// Through the two nodes that do not own the key: the owner deciding its
	// own checks locally would empty the bucket before any lease is asked.
	for g := range 48 {
		wg.Go(func() {
			n := nodes[2*(g%2)]
			for range 40 {
				if checkLeased(t, n.r, key, lim).Allowed {
					allowed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	// 48×40 = 1,920 checks for 600 tokens. Tokens still sitting in a lease
	// are not admitted yet; give them back and count again.
	leased := testkit.Metric(t, nodes[0].reg, "ringlimit_leased_checks_total") + testkit.Metric(t, nodes[2].reg, "ringlimit_leased_checks_total")
	granted := testkit.Metric(t, nodes[0].reg, "ringlimit_lease_tokens_granted_total") + testkit.Metric(t, nodes[2].reg, "ringlimit_lease_tokens_granted_total")
	t.Logf("%d of 1,920 admitted, %v of them from leases (%v tokens leased)", allowed.Load(), leased, granted)
	if allowed.Load() > 600 {
		t.Fatalf("admitted %d of a capacity of 600", allowed.Load())
	}
	if leased == 0 {
		t.Fatal("no check was admitted from a lease")
	}
	// Once every lease has expired and been given back, the owner's bucket
	// and the admissions add up to the capacity exactly.
	clock.Advance(time.Second)
	testkit.Eventually(t, 5*time.Second, "leases given back", func() bool {
		held := int64(0)
		for _, n := range []*node{nodes[0], nodes[2]} {
			n.r.leases.held.Range(func(_, v any) bool { held += v.(*lease).tokens.Load(); return true })
		}
		return held == 0
	})
	testkit.Eventually(t, 5*time.Second, "owner's bucket settles", func() bool {
		_, used, _ := nodes[1].store.Used(key, clock.Now())
		return used == allowed.Load()
	})
}

// A hot key through a node that does not own it is mostly admitted there,
// from leases, instead of costing a peer check each.
func TestLeaseKeepsHotKeyLocal(t *testing.T) {
	clock := testkit.NewClock(0)
	nodes := startNodes(t, clock, nil, "A", "B", "C")
	formCluster(clock, nodes...)
	a := nodes[0]
	key := keysOwnedBy(t, a.r, "B", "hot", 1)[0]
	lim := bucket.MustLimit(bucket.TokenBucket, 1_000_000, time.Second, 1_000_000)
	for i := range 2000 {
		if res := checkLeased(t, a.r, key, lim); !res.Allowed {
			t.Fatalf("check %d rejected: %+v", i, res)
		}
	}
	forwarded := testkit.Metric(t, a.reg, "ringlimit_forward_checks_total")
	leased := testkit.Metric(t, a.reg, "ringlimit_leased_checks_total")
	t.Logf("2,000 checks through A: %v forwarded, %v from leases", forwarded, leased)
	// Leases of min(1e6 × 100ms, 1e6/6, 1000) = 1000 tokens: two leases
	// cover 2,000 checks, so A forwards about two checks.
	if forwarded > 4 || leased < 1996 {
		t.Fatalf("forwarded %v, leased %v; want at most 4 forwarded", forwarded, leased)
	}
	// Without Lease every check goes to the owner.
	other := keysOwnedBy(t, a.r, "B", "cold", 1)[0]
	for range 100 {
		check1(t, a.r, other, lim, 1)
	}
	if f := testkit.Metric(t, a.reg, "ringlimit_forward_checks_total") - forwarded; f != 100 {
		t.Fatalf("without leases, %v of 100 checks forwarded", f)
	}
}

// An expired lease gives its unused tokens back to the owner.
func TestLeaseExpiryGivesBack(t *testing.T) {
	clock := testkit.NewClock(0)
	nodes := startNodes(t, clock, nil, "A", "B", "C")
	formCluster(clock, nodes...)
	a, b := nodes[0], nodes[1]
	key := keysOwnedBy(t, a.r, "B", "lease", 1)[0]
	// Rate 10/s, burst 600: a lease is min(10 × 100ms = 1, 600/6, 1000) = 1
	// token. Use 6000/min instead: 6000 × 100ms / 1m = 10 tokens.
	lim := bucket.MustLimit(bucket.TokenBucket, 6000, time.Minute, 600)
	if res := checkLeased(t, a.r, key, lim); !res.Allowed || res.Owner != "B" {
		t.Fatalf("first check: %+v, want admitted by B", res)
	}
	if _, used, _ := b.store.Used(key, clock.Now()); used != 11 {
		t.Fatalf("B used %d, want 1 check + a lease of 10", used)
	}
	for i := range 10 {
		if res := checkLeased(t, a.r, key, lim); !res.Allowed || !res.Leased || res.Remaining != int64(9-i) {
			t.Fatalf("leased check %d: %+v", i, res)
		}
	}
	// The eleventh asks B again (and gets a new lease).
	if res := checkLeased(t, a.r, key, lim); res.Leased || res.Owner != "B" {
		t.Fatalf("after the lease is spent: %+v, want decided by B", res)
	}
	// Let the new lease expire unused: its 10 tokens go back to B.
	clock.Advance(200 * time.Millisecond)
	testkit.Eventually(t, 5*time.Second, "the lease given back", func() bool {
		return testkit.Metric(t, a.reg, "ringlimit_lease_tokens_returned_total") == 10
	})
	testkit.Eventually(t, 5*time.Second, "B's bucket refunded", func() bool {
		_, used, _ := b.store.Used(key, clock.Now())
		// 22 spent (2 checks, 2 leases of 10), 10 given back, 20 refilled in
		// 200 ms: max(22-10-20, 0) = 0.
		return used == 0
	})
}

func TestLeaseOnlyTokenBucket(t *testing.T) {
	err := ValidateChecks([]Check{{Key: "k", Limit: bucket.MustLimit(bucket.FixedWindow, 5, time.Second, 0), Cost: 1, Lease: true}})
	if err == nil {
		t.Fatal("a leased fixed window was accepted")
	}
}

// A lease is never longer than this node's own Lease.TTL, whatever the
// owner's config grants.
func TestLeaseTTLCappedByReceiver(t *testing.T) {
	clock := testkit.NewClock(0)
	nodes := startNodes(t, clock, func(c *nodeConfig) {
		if c.Self == "B" {
			c.Lease = LeaseConfig{TTL: time.Hour, Max: 1_000_000}
		}
	}, "A", "B", "C")
	formCluster(clock, nodes...)
	a := nodes[0]
	ttl := a.r.cfg.Lease.TTL
	key := keysOwnedBy(t, a.r, "B", "lease", 1)[0]
	lim := bucket.MustLimit(bucket.TokenBucket, 6000, time.Minute, 600)
	if res := checkLeased(t, a.r, key, lim); !res.Allowed || res.Owner != "B" {
		t.Fatalf("first check: %+v, want admitted by B", res)
	}
	v, ok := a.r.leases.held.Load(key)
	if !ok {
		t.Fatal("A holds no lease after a leased check")
	}
	if got := v.(*lease).expires.Sub(clock.Now()); got > ttl {
		t.Fatalf("lease expires in %v, want at most A's TTL %v (B grants %v)", got, ttl, time.Hour)
	}
	clock.Advance(ttl)
	if res := checkLeased(t, a.r, key, lim); res.Leased {
		t.Fatalf("check after A's TTL: %+v, want decided by the owner", res)
	}
}

// A grant larger than this node's Lease.Max or longer than its Lease.TTL,
// as a misbehaving peer might send, is cut down to both, and the tokens
// beyond Max go back to the owner.
func TestLeaseInstallCapped(t *testing.T) {
	clock := testkit.NewClock(0)
	a := startNode(t, "A", clock, nil)
	cfg := LeaseConfig{TTL: 100 * time.Millisecond, Max: 50}
	var back int64
	ls := newLeases(cfg, clock, a.r.leases.m, func(_ string, _ bucket.Limit, n int64) { back += n })
	c := &Check{Key: "k", Limit: bucket.MustLimit(bucket.TokenBucket, 1_000_000, time.Second, 1_000_000), Cost: 1}
	ls.install(c, 1_000_000, 24*time.Hour, clock.Now(), ls.resets.Load())
	v, _ := ls.held.Load("k")
	l := v.(*lease)
	if got := l.tokens.Load(); got != cfg.Max {
		t.Fatalf("lease holds %d tokens, want Max %d", got, cfg.Max)
	}
	if got := l.expires.Sub(clock.Now()); got != cfg.TTL {
		t.Fatalf("lease expires in %v, want TTL %v", got, cfg.TTL)
	}
	if back != 1_000_000-cfg.Max {
		t.Fatalf("gave back %d tokens, want %d", back, 1_000_000-cfg.Max)
	}
}

// After a reset, no lease gives tokens back: not the reset key's (dropped,
// 7 tokens), not another key's installed before it (its tokens may
// predate a reset), and a grant asked for before the reset and answered
// after it is not installed.
func TestLeaseAfterReset(t *testing.T) {
	clock := testkit.NewClock(0)
	a := startNode(t, "A", clock, nil)
	var back int64
	ls := newLeases(LeaseConfig{TTL: time.Second, Max: 50}, clock, a.r.leases.m, func(_ string, _ bucket.Limit, n int64) { back += n })
	lim := bucket.MustLimit(bucket.TokenBucket, 1000, time.Second, 1000)
	before := ls.resets.Load()
	ls.install(&Check{Key: "k", Limit: lim, Cost: 1}, 7, time.Second, clock.Now(), before)
	ls.install(&Check{Key: "other", Limit: lim, Cost: 1}, 5, time.Second, clock.Now(), before)
	if n := ls.drop("k"); n != 7 {
		t.Fatalf("drop = %d, want the lease's 7 tokens", n)
	}
	ls.install(&Check{Key: "late", Limit: lim, Cost: 1}, 9, time.Second, clock.Now(), before)
	if _, ok := ls.held.Load("late"); ok {
		t.Fatal("a grant asked for before the reset was installed after it")
	}
	v, _ := ls.held.Load("other")
	ls.release("other", v.(*lease))
	if back != 0 {
		t.Fatalf("%d tokens given back after a reset, want 0", back)
	}
}
