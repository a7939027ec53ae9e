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

// floodResult counts what a flood of checks got.
type floodResult struct {
	allowed  int64 // admitted by the owner
	rejected int64 // rejected by the owner
	shed     int64 // rejected by the entry node's pre-limiter
	degraded int64
	// One shed and one owner rejection, as examples.
	shedRes, rejectRes Result
}

// flood sends total checks of cost 1 on key through entry, from goroutines
// goroutines at once, with the given Prelimit.
func flood(t *testing.T, entry *node, key string, lim bucket.Limit, prelimit float64, goroutines, total int) floodResult {
	t.Helper()
	var res floodResult
	var mu sync.Mutex
	var next, allowed, rejected, shed, degraded atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range goroutines {
		wg.Go(func() {
			<-start
			for next.Add(1) <= int64(total) {
				var out [1]Result
				if err := entry.r.Check(context.Background(), []Check{{Key: key, Limit: lim, Cost: 1, Prelimit: prelimit}}, out[:]); err != nil {
					t.Error(err)
					return
				}
				r := out[0]
				switch {
				case r.Degraded:
					degraded.Add(1)
				case r.Shed:
					shed.Add(1)
					mu.Lock()
					res.shedRes = r
					mu.Unlock()
				case r.Allowed:
					allowed.Add(1)
				default:
					rejected.Add(1)
					mu.Lock()
					res.rejectRes = r
					mu.Unlock()
				}
			}
		})
	}
	close(start)
	wg.Wait()
	res.allowed, res.rejected, res.shed, res.degraded = allowed.Load(), rejected.Load(), shed.Load(), degraded.Load()
	return res
}

// tenPerHour is the flood tests' limit: 10 per hour, bursts of 10.
var tenPerHour = bucket.MustLimit(bucket.TokenBucket, 10, time.Hour, 10)

// The pre-limiter of a check with Prelimit 2 on a limit of 10 per hour
// (burst 10) is a sliding window counter of ceil(2 × max(10, 10)) = 20 per
// hour on the entry node, plus a cache of the owner's rejections. Of 1,000
// checks on a key owned by B entering through A, at most 20 are in flight
// to B at once; B admits 10; from B's first rejection on, A sheds the rest
// until B's retry-after without a network hop.
func TestPrelimitShedsFloodOnEntryNode(t *testing.T) {
	clock := testkit.NewClock(0)
	nodes := startNodes(t, clock, nil, "A", "B", "C")
	formCluster(clock, nodes...)
	a, b, c := nodes[0], nodes[1], nodes[2]
	key := keysOwnedBy(t, a.r, "B", "flood", 1)[0]

	got := flood(t, a, key, tenPerHour, 2, 16, 1000)
	t.Logf("Prelimit 2: %+v", got)
	// The window holds at most 20 at once; a check that missed the cache
	// just before a rejection landed may still take a slot that rejection
	// gave back, so each of the 16 callers can add one more.
	if got.allowed != 10 || got.rejected < 1 || got.rejected > 10+16 || got.shed != 990-got.rejected || got.degraded != 0 {
		t.Fatalf("allowed %d, rejected by B %d, shed on A %d, degraded %d; want 10, 1 to 26, 990 minus the rejections, 0",
			got.allowed, got.rejected, got.shed, got.degraded)
	}
	sent := float64(10 + got.rejected)
	if v := testkit.Metric(t, a.reg, "ringlimit_prelimit_shed_total"); v != float64(got.shed) {
		t.Fatalf("A prelimit_shed_total = %v, want %d", v, got.shed)
	}
	if v := testkit.Metric(t, a.reg, "ringlimit_forward_checks_total"); v != sent {
		t.Fatalf("A forward_checks_total = %v, want %v", v, sent)
	}
	rpcs := testkit.Metric(t, a.reg, "ringlimit_forward_rpcs_total")
	if rpcs < 1 || rpcs > 20 {
		t.Fatalf("A forward_rpcs_total = %v, want 1 to 20", rpcs)
	}
	if v := testkit.Metric(t, b.reg, "ringlimit_peer_checks_total"); v != sent {
		t.Fatalf("B peer_checks_total = %v, want %v", v, sent)
	}
	for _, n := range []*node{b, c} {
		if v := testkit.Metric(t, n.reg, "ringlimit_prelimit_shed_total"); v != 0 {
			t.Fatalf("%s shed %v", n.name, v)
		}
	}
	if _, used, _ := b.store.Used(key, clock.Now()); used != 10 {
		t.Fatalf("B: used %d, want 10", used)
	}
	if a.store.Has(key) || c.store.Has(key) {
		t.Fatal("a node other than the owner holds the key")
	}
	t.Logf("%v checks in %v RPCs from A to B", sent, rpcs)

	// The owner's rejection: one token of 10/h is 6 minutes away.
	want := Result{Decision: bucket.Decision{Limit: 10, RetryAfter: 6 * time.Minute, ResetAfter: time.Hour}, Owner: "B", OwnerAddr: b.addr}
	if got.rejectRes != want {
		t.Errorf("owner rejection: %+v, want %+v", got.rejectRes, want)
	}
	// A shed check is decided by A and names the limit. Shed by the
	// rejection cache it carries the owner's retry-after (6 minutes); shed
	// by the window of 20 per hour, while 20 were in flight, the window's:
	// the rest of this hour (the clock stands testGrace into it) plus 3
	// minutes.
	windowRetry := time.Hour - testGrace + 3*time.Minute
	if s := got.shedRes; !s.Shed || s.Owner != "A" || s.Allowed || s.Limit != 10 || s.Remaining != 0 ||
		(s.RetryAfter != 6*time.Minute && s.RetryAfter != windowRetry) {
		t.Errorf("shed result: %+v, want Shed by A, limit 10, nothing left, retry after 6m0s or %v", s, windowRetry)
	}
}

// Without Prelimit the same flood sends every check to the owner (in
// coalesced RPCs); the admitted total is the same.
func TestNoPrelimitForwardsWholeFlood(t *testing.T) {
	clock := testkit.NewClock(0)
	nodes := startNodes(t, clock, nil, "A", "B", "C")
	formCluster(clock, nodes...)
	a, b := nodes[0], nodes[1]
	key := keysOwnedBy(t, a.r, "B", "flood", 1)[0]

	got := flood(t, a, key, tenPerHour, 0, 16, 1000)
	if got.allowed != 10 || got.rejected != 990 || got.shed != 0 || got.degraded != 0 {
		t.Fatalf("%+v; want 10 allowed, 990 rejected by B", got)
	}
	if v := testkit.Metric(t, a.reg, "ringlimit_forward_checks_total"); v != 1000 {
		t.Fatalf("A forward_checks_total = %v, want 1000", v)
	}
	if v := testkit.Metric(t, b.reg, "ringlimit_peer_checks_total"); v != 1000 {
		t.Fatalf("B peer_checks_total = %v, want 1000", v)
	}
	if v := testkit.Metric(t, a.reg, "ringlimit_prelimit_shed_total"); v != 0 {
		t.Fatalf("A prelimit_shed_total = %v, want 0", v)
	}
	t.Logf("no Prelimit: 1000 checks in %v RPCs from A to B", testkit.Metric(t, a.reg, "ringlimit_forward_rpcs_total"))
}

// The owner is the authority: on the owner itself the pre-limiter does not
// apply.
func TestPrelimitNotOnOwner(t *testing.T) {
	clock := testkit.NewClock(0)
	nodes := startNodes(t, clock, nil, "A", "B")
	formCluster(clock, nodes...)
	a, b := nodes[0], nodes[1]
	key := keysOwnedBy(t, a.r, "B", "own", 1)[0]
	got := flood(t, b, key, tenPerHour, 2, 16, 1000)
	if got.allowed != 10 || got.rejected != 990 || got.shed != 0 || got.degraded != 0 {
		t.Fatalf("flood on the owner: %+v; want 10 allowed, 990 rejected, none shed", got)
	}
	if v := testkit.Metric(t, b.reg, "ringlimit_prelimit_shed_total"); v != 0 {
		t.Fatalf("B prelimit_shed_total = %v, want 0", v)
	}
}

// After a flood through A, the owner refills at 10 per hour (5 tokens after
// 30 minutes). A's pre-limiter counts only what the owner admitted (10 of
// its 20 slots) and remembered the owner's rejection only until its
// retry-after (6 minutes), so 30 minutes on a caller entering through A is
// forwarded and admitted by the owner, as one entering through C is: the
// owner stays the authority.
func TestPrelimitAfterFloodOwnerStaysAuthority(t *testing.T) {
	clock := testkit.NewClock(0)
	nodes := startNodes(t, clock, nil, "A", "B", "C")
	formCluster(clock, nodes...)
	a, c := nodes[0], nodes[2]
	key := keysOwnedBy(t, a.r, "B", "flood", 1)[0]
	flood(t, a, key, tenPerHour, 2, 16, 1000)

	// Within the owner's retry-after, A sheds without asking.
	var early [1]Result
	if err := a.r.Check(context.Background(), []Check{{Key: key, Limit: tenPerHour, Cost: 1, Prelimit: 2}}, early[:]); err != nil {
		t.Fatal(err)
	}
	if !early[0].Shed || early[0].Allowed || early[0].RetryAfter <= 0 || early[0].RetryAfter > 6*time.Minute {
		t.Fatalf("right after the flood, via A: %+v, want shed with at most the owner's 6m retry", early[0])
	}
	clock.Advance(30 * time.Minute)
	var viaA, viaC [1]Result
	if err := a.r.Check(context.Background(), []Check{{Key: key, Limit: tenPerHour, Cost: 1, Prelimit: 2}}, viaA[:]); err != nil {
		t.Fatal(err)
	}
	if err := c.r.Check(context.Background(), []Check{{Key: key, Limit: tenPerHour, Cost: 1, Prelimit: 2}}, viaC[:]); err != nil {
		t.Fatal(err)
	}
	if !viaA[0].Allowed || viaA[0].Owner != "B" || viaA[0].Remaining != 4 || viaA[0].Shed {
		t.Fatalf("30 min after the flood, via A: %+v, want admitted by B with 4 left", viaA[0])
	}
	if !viaC[0].Allowed || viaC[0].Owner != "B" || viaC[0].Remaining != 3 {
		t.Fatalf("30 min after the flood, via C: %+v, want admitted by B with 3 left", viaC[0])
	}
}

// A refund through an entry node reaches the key's owner and gives the cost
// back there, never above the capacity, whatever the pre-limiter says.
func TestRefundThroughEntryNode(t *testing.T) {
	clock := testkit.NewClock(0)
	nodes := startNodes(t, clock, nil, "A", "B", "C")
	formCluster(clock, nodes...)
	a, b := nodes[0], nodes[1]
	key := keysOwnedBy(t, a.r, "B", "refund", 1)[0]
	used := func() int64 {
		t.Helper()
		_, u, _ := b.store.Used(key, clock.Now())
		return u
	}
	refund := func(cost int64, prelimit float64) Result {
		t.Helper()
		var out [1]Result
		if err := a.r.Check(context.Background(), []Check{{Key: key, Limit: tenPerHour, Cost: cost, Refund: true, Prelimit: prelimit}}, out[:]); err != nil {
			t.Fatal(err)
		}
		return out[0]
	}

	for i := range 3 {
		if res := check1(t, a.r, key, tenPerHour, 1); !res.Allowed || res.Remaining != int64(9-i) || res.Owner != "B" {
			t.Fatalf("spend %d: %+v", i, res)
		}
	}
	res := refund(2, 0)
	if res.Allowed || res.Remaining != 0 || res.Shed || res.Degraded || res.Owner != "B" {
		t.Fatalf("refund: %+v, want an empty answer from B", res)
	}
	if u := used(); u != 1 {
		t.Fatalf("after spending 3 and refunding 2: B used %d, want 1", u)
	}
	// Remaining goes up by the cost: 7 before the refund, 9 after, 8 after
	// one more spend.
	if res := check1(t, a.r, key, tenPerHour, 1); !res.Allowed || res.Remaining != 8 {
		t.Fatalf("spend after refund: %+v, want 8 left", res)
	}
	// Refunding more than was spent fills the bucket, no more.
	refund(5, 0)
	if u := used(); u != 0 {
		t.Fatalf("refund of 5 with 2 spent: used %d, want 0", u)
	}
	if res := check1(t, a.r, key, tenPerHour, 1); res.Remaining != 9 {
		t.Fatalf("spend after over-refund: %+v, want 9 left (capacity 10)", res)
	}
	// A refund of a key the owner never saw creates nothing.
	other := keysOwnedBy(t, a.r, "B", "never-seen", 1)[0]
	var out [1]Result
	if err := a.r.Check(context.Background(), []Check{{Key: other, Limit: tenPerHour, Cost: 3, Refund: true}}, out[:]); err != nil {
		t.Fatal(err)
	}
	if b.store.Has(other) {
		t.Fatal("a refund created a key on B")
	}

	// Refunds bypass the pre-limiter: fill A's pre-limiter window for the
	// key (20 per hour) and refund through A with Prelimit set.
	got := flood(t, a, key, tenPerHour, 2, 4, 100)
	if got.shed == 0 {
		t.Fatalf("flood did not fill the pre-limiter: %+v", got)
	}
	shedBefore := testkit.Metric(t, a.reg, "ringlimit_prelimit_shed_total")
	if u := used(); u != 10 {
		t.Fatalf("after the flood: used %d, want 10", u)
	}
	if res := refund(4, 2); res.Shed {
		t.Fatalf("refund shed by the pre-limiter: %+v", res)
	}
	if u := used(); u != 6 {
		t.Fatalf("refund of 4 through a full pre-limiter: used %d, want 6", u)
	}
	if v := testkit.Metric(t, a.reg, "ringlimit_prelimit_shed_total"); v != shedBefore {
		t.Fatalf("a refund counted as shed: %v → %v", shedBefore, v)
	}
	// A refund of a key A owns is applied to A's store.
	mine := keysOwnedBy(t, a.r, "A", "refund-local", 1)[0]
	check1(t, a.r, mine, tenPerHour, 4)
	if err := a.r.Check(context.Background(), []Check{{Key: mine, Limit: tenPerHour, Cost: 3, Refund: true}}, out[:]); err != nil {
		t.Fatal(err)
	}
	if _, u, _ := a.store.Used(mine, clock.Now()); u != 1 || out[0].Owner != "A" {
		t.Fatalf("local refund: used %d, result %+v; want 1 used, owner A", u, out[0])
	}
}
