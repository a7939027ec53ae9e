package forward

import (
	"context"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
)

// A peek through an entry node that holds a lease on the key, with the
// pre-limiter on, goes to the owner: it is not admitted from the lease,
// not shed and not counted by the pre-limiter's window (5 slots), and the
// owner's bucket is untouched by it (capacity 600; the first check and the
// 1-token lease it took leave 598, and every peek of 1 answers 597).
func TestPeekSkipsLeaseAndPrelimit(t *testing.T) {
	clock := testkit.NewClock(0)
	nodes := startNodes(t, clock, nil, "A", "B", "C")
	formCluster(clock, nodes...)
	a, b := nodes[0], nodes[1]
	key := keysOwnedBy(t, a.r, "B", "peek", 1)[0]
	lim := bucket.MustLimit(bucket.TokenBucket, 600, time.Hour, 600)
	if res := checkLeased(t, a.r, key, lim); !res.Allowed || res.Owner != "B" {
		t.Fatalf("first check: %+v", res)
	}
	if _, ok := a.r.leases.held.Load(key); !ok {
		t.Fatal("A holds no lease")
	}
	_, spent, _ := b.r.cfg.Store.Used(key, clock.Now())
	peek := func() Result {
		var out [1]Result
		c := Check{Key: key, Limit: lim, Cost: 1, Lease: true, Prelimit: 1, Peek: true}
		if err := a.r.Check(context.Background(), []Check{c}, out[:]); err != nil {
			t.Fatal(err)
		}
		return out[0]
	}
	for i := range 50 {
		res := peek()
		if res.Leased || res.Shed || res.Owner != "B" || !res.Allowed || res.Remaining != 597 || spent != 2 {
			t.Fatalf("peek %d: %+v (B spent %d); want decided by B, remaining 597", i, res, spent)
		}
	}
	if _, used, _ := b.r.cfg.Store.Used(key, clock.Now()); used != spent {
		t.Fatalf("B has spent %d after the peeks, want %d", used, spent)
	}
	if got := testkit.Metric(t, a.reg, "ringlimit_leased_checks_total"); got != 0 {
		t.Fatalf("%v checks admitted from the lease, want 0", got)
	}
	// The pre-limiter's window (at 1× a limit of 5) counted none of them.
	small := bucket.MustLimit(bucket.TokenBucket, 5, time.Hour, 5)
	other := keysOwnedBy(t, a.r, "B", "pre", 1)[0]
	for i := range 20 {
		var out [1]Result
		if err := a.r.Check(context.Background(), []Check{{Key: other, Limit: small, Cost: 1, Prelimit: 1, Peek: true}}, out[:]); err != nil || out[0].Shed || !out[0].Allowed {
			t.Fatalf("peek %d of a 5: %+v, %v", i, out[0], err)
		}
	}
	for i := range 5 {
		var out [1]Result
		if err := a.r.Check(context.Background(), []Check{{Key: other, Limit: small, Cost: 1, Prelimit: 1}}, out[:]); err != nil || !out[0].Allowed {
			t.Fatalf("check %d of a 5 after 20 peeks: %+v, %v", i, out[0], err)
		}
	}
}
