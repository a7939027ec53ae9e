package harness_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/forward"
	"github.com/ringlimit/ringlimit/internal/testonly/harness"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
)

// budget is 1,000 tokens refilling 1 a second; the tests' clock is fake,
// so nothing refills unless a test says so.
var budget = bucket.MustLimit(bucket.TokenBucket, 1000, 1000*time.Second, 1000)

func startFake(t *testing.T) (*harness.Cluster, *testkit.Clock) {
	t.Helper()
	clk := testkit.NewClock(0)
	return harness.Start(t, harness.Options{PeerTimeout: peerTimeout, Clock: clk}, "A", "B", "C"), clk
}

// reserve checks cost of key with a reservation through n.
func reserve(t *testing.T, n *harness.Node, key string, cost int64, ttl time.Duration) forward.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	defer cancel()
	out := make([]forward.Result, 1)
	if err := n.Router.Check(ctx, []forward.Check{{Key: key, Limit: budget, Cost: cost, Mode: bucket.FailClosed, Reserve: ttl}}, out); err != nil {
		t.Fatalf("reserve %d of %s through %s: %v", cost, key, n.Name, err)
	}
	return out[0]
}

func checkBudget(t *testing.T, n *harness.Node, key string, cost int64) forward.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	defer cancel()
	out := make([]forward.Result, 1)
	if err := n.Router.Check(ctx, []forward.Check{{Key: key, Limit: budget, Cost: cost, Mode: bucket.FailClosed}}, out); err != nil {
		t.Fatalf("check %d of %s through %s: %v", cost, key, n.Name, err)
	}
	return out[0]
}

func settle(t *testing.T, n *harness.Node, id string, cost int64) (forward.SettleResult, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	defer cancel()
	return n.Router.Settle(ctx, id, cost)
}

// TestReserveSettleThreeNodes: a budget of 1,000 on a key C owns, through
// every entry node. Reserve 100 and settle 30: 970 left; the same settle
// through the two other nodes applies once (ALREADY_SETTLED). Spend to
// 100, reserve it and settle 250: a debt of 150, and a check of 1 through
// every node is refused for exactly 151 s. A settle after the TTL is not
// found and the reserved spend stays.
func TestReserveSettleThreeNodes(t *testing.T) {
	c, clk := startFake(t)
	a, b, own := c.Node("A"), c.Node("B"), c.Node("C")
	key := c.KeyWith("C", "B", "llm")

	r := reserve(t, a, key, 100, 5*time.Minute)
	if !r.Allowed || r.Remaining != 900 || r.Reservation == "" || r.Owner != "C" {
		t.Fatalf("reserve 100 through A: %+v", r)
	}
	if s, err := settle(t, b, r.Reservation, 30); err != nil || s.Remaining != 970 || s.Cost != 30 || s.Owner != "C" {
		t.Fatalf("settle 30 through B: %+v, %v", s, err)
	}
	for _, n := range []*harness.Node{own, a} {
		if _, err := settle(t, n, r.Reservation, 30); !errors.Is(err, forward.ErrAlreadySettled) {
			t.Fatalf("the same settle through %s: %v, want already settled", n.Name, err)
		}
	}
	if got := c.Used("C", key); got != 30 {
		t.Fatalf("C's key has spent %d, want 30", got)
	}
	if res := checkBudget(t, own, key, 870); !res.Allowed || res.Remaining != 100 {
		t.Fatalf("spend 870 through C: %+v", res)
	}
	r = reserve(t, b, key, 100, 5*time.Minute)
	if !r.Allowed || r.Remaining != 0 || r.Reservation == "" {
		t.Fatalf("reserve the last 100 through B: %+v", r)
	}
	if s, err := settle(t, own, r.Reservation, 250); err != nil || s.Remaining != 0 {
		t.Fatalf("settle 250 through C: %+v, %v", s, err)
	}
	for _, n := range []*harness.Node{a, b, own} {
		if res := checkBudget(t, n, key, 1); res.Allowed || res.Remaining != 0 || res.RetryAfter != 151*time.Second {
			t.Fatalf("check of 1 in a debt of 150 through %s: %+v, want refused for 151s", n.Name, res)
		}
	}
	if res := reserve(t, a, key, 1, time.Minute); res.Allowed || res.Reservation != "" {
		t.Fatalf("a refused reserve: %+v, want no reservation", res)
	}

	// A reservation made through each entry node settles through the next.
	nodes := []*harness.Node{a, b, own}
	for i, n := range nodes {
		k := c.KeyOwnedBy([]string{"A", "B", "C"}[(i+1)%3], "each")
		r := reserve(t, n, k, 10, time.Minute)
		if s, err := settle(t, nodes[(i+1)%3], r.Reservation, 4); err != nil || s.Remaining != 996 {
			t.Fatalf("reserve through %s, settle 4 through the next: %+v, %v", n.Name, s, err)
		}
	}

	// After the TTL: not found, and the reserved spend stays.
	ttlKey := c.KeyWith("A", "C", "ttl")
	r = reserve(t, b, ttlKey, 100, time.Second)
	clk.Advance(time.Second)
	if _, err := settle(t, own, r.Reservation, 0); !errors.Is(err, forward.ErrReservationNotFound) {
		t.Fatalf("settle after the TTL: %v, want not found", err)
	}
	if got := c.Used("A", ttlKey); got != 100-1 { // a second refilled 1
		t.Fatalf("after an expired reservation the key has spent %d, want 99", got)
	}
}

// TestReserveSettleAfterOwnerCrash: the owner C dies right after a
// reserve; its successor B, which holds the replica and the record,
// settles the reservation exactly once.
func TestReserveSettleAfterOwnerCrash(t *testing.T) {
	c, _ := startFake(t)
	a, b, own := c.Node("A"), c.Node("B"), c.Node("C")
	key := c.KeyWith("C", "B", "crash")
	r := reserve(t, a, key, 100, 5*time.Minute)
	if !r.Allowed || r.Reservation == "" {
		t.Fatalf("reserve: %+v", r)
	}
	synced(t, c, "C")
	own.Stop() // kill -9: nothing it says reaches the others
	harness.SetView([]*harness.Node{a, b}, []*harness.Node{a, b}, "C")
	if s, err := settle(t, a, r.Reservation, 30); err != nil || s.Owner != "B" || s.Remaining != 970 {
		t.Fatalf("settle 30 through A after C died: %+v, %v", s, err)
	}
	for _, n := range []*harness.Node{a, b} {
		if _, err := settle(t, n, r.Reservation, 30); !errors.Is(err, forward.ErrAlreadySettled) {
			t.Fatalf("settle again through %s: %v, want already settled", n.Name, err)
		}
	}
	if got := c.Used("B", key); got != 30 {
		t.Fatalf("B's key has spent %d, want 30", got)
	}
}

// TestReserveHandoffOnLeave: C leaves; the key's new owner gets the
// reservation and the debt with the key: the debt stands, and the
// reservation settles there once.
func TestReserveHandoffOnLeave(t *testing.T) {
	c, _ := startFake(t)
	a, b, own := c.Node("A"), c.Node("B"), c.Node("C")
	debt := c.KeyWith("C", "A", "debt")
	open := c.KeyWith("C", "A", "open")

	r := reserve(t, b, debt, 1000, 5*time.Minute)
	if _, err := settle(t, b, r.Reservation, 1150); err != nil {
		t.Fatal(err)
	}
	pending := reserve(t, b, open, 100, 5*time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	harness.SetView([]*harness.Node{a, b}, []*harness.Node{a, b})
	if err := own.Router.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	if got := c.Used("A", debt); got != 1150 {
		t.Fatalf("A's copy of the key in debt has spent %d, want 1150", got)
	}
	for _, n := range []*harness.Node{a, b} {
		if res := checkBudget(t, n, debt, 1); res.Allowed || res.RetryAfter != 151*time.Second {
			t.Fatalf("check of 1 through %s after the handoff: %+v, want refused for 151s", n.Name, res)
		}
	}
	if _, err := settle(t, b, r.Reservation, 0); !errors.Is(err, forward.ErrAlreadySettled) {
		t.Fatalf("the settled reservation after the handoff: %v, want already settled", err)
	}
	if s, err := settle(t, b, pending.Reservation, 40); err != nil || s.Owner != "A" || s.Remaining != 960 {
		t.Fatalf("settle the handed-off reservation: %+v, %v", s, err)
	}
}

// TestReserveNeverFromLease: A holds a lease of a hot key C owns and
// admits plain checks from it; a reserve through A still goes to C, which
// records the reservation.
func TestReserveNeverFromLease(t *testing.T) {
	c, _ := startFake(t)
	a := c.Node("A")
	key := c.KeyWith("C", "B", "hot")
	hot := bucket.MustLimit(bucket.TokenBucket, 1000, time.Second, 1000) // leases of more than one token
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	defer cancel()
	out := make([]forward.Result, 1)
	leased := false
	for range 20 {
		if err := a.Router.Check(ctx, []forward.Check{{Key: key, Limit: hot, Cost: 1, Mode: bucket.FailClosed, Lease: true}}, out); err != nil {
			t.Fatal(err)
		}
		if leased = out[0].Leased; leased && out[0].Remaining > 0 {
			break // the lease has tokens left
		}
	}
	if !leased {
		t.Fatal("no check was admitted from a lease")
	}
	if err := a.Router.Check(ctx, []forward.Check{{Key: key, Limit: hot, Cost: 1, Mode: bucket.FailClosed, Lease: true, Reserve: time.Minute}}, out); err != nil {
		t.Fatal(err)
	}
	if r := out[0]; !r.Allowed || r.Leased || r.Owner != "C" || r.Reservation == "" {
		t.Fatalf("reserve through a node holding a lease: %+v, want decided by C with a reservation", r)
	}
}

// TestReserveDegradedHasNone: with the owner C and its successor B cut
// off, A answers a reserve in its failure mode (fail_open): admitted,
// degraded, and with no reservation; a settle through A fails as
// unavailable and changes nothing, and once the links heal the same
// settle applies, once.
func TestReserveDegradedHasNone(t *testing.T) {
	c := harness.Start(t, opts, "A", "B", "C")
	a := c.Node("A")
	key := c.KeyWith("C", "B", "cut")
	slow := bucket.MustLimit(bucket.TokenBucket, 1000, 1000*time.Hour, 1000) // the clock is real: nothing refills meanwhile
	ctx, cancel := context.WithTimeout(context.Background(), 3*checkTimeout)
	defer cancel()
	before, err := a.Router.Settle(ctx, "r1.x.AAAAAAAAAAAAAAAA", 1) // a malformed key part: invalid
	if !errors.Is(err, forward.ErrInvalid) {
		t.Fatalf("settle of a malformed id: %+v, %v", before, err)
	}
	out := make([]forward.Result, 1)
	if err := a.Router.Check(ctx, []forward.Check{{Key: key, Limit: slow, Cost: 100, Mode: bucket.FailOpen, Reserve: time.Minute}}, out); err != nil || out[0].Reservation == "" {
		t.Fatalf("reserve before the cut: %+v, %v", out[0], err)
	}
	id := out[0].Reservation
	c.Net.Isolate("B")
	c.Net.Isolate("C")
	if _, err := a.Router.Settle(ctx, id, 30); !errors.Is(err, forward.ErrUnavailable) {
		t.Fatalf("settle with the owner cut off: %v, want unavailable", err)
	}
	// Another key: a check cut off on its way back may have spent on C.
	other := c.KeyWith("C", "B", "cut-other")
	if err := a.Router.Check(ctx, []forward.Check{{Key: other, Limit: slow, Cost: 5, Mode: bucket.FailOpen, Reserve: time.Minute}}, out); err != nil {
		t.Fatal(err)
	}
	if r := out[0]; !r.Allowed || !r.Degraded || r.Reservation != "" {
		t.Fatalf("reserve with the owner cut off: %+v, want admitted, degraded, no reservation", r)
	}
	c.Net.Restore("B")
	c.Net.Restore("C")
	// The settle sent during the cut may have reached C with its answer
	// lost: the retry then answers already settled. Either way it applied
	// once.
	testkit.WaitFor(t, 5*time.Second, "the settle after the heal", func() error {
		s, err := a.Router.Settle(ctx, id, 30)
		if errors.Is(err, forward.ErrAlreadySettled) {
			return nil
		}
		if err != nil {
			return err
		}
		if s.Remaining != 970 || s.Owner != "C" {
			t.Fatalf("settle after the heal: %+v", s)
		}
		return nil
	})
	if _, err := a.Router.Settle(ctx, id, 30); !errors.Is(err, forward.ErrAlreadySettled) {
		t.Fatalf("settle again: %v", err)
	}
	if got := c.Used("C", key); got != 30 {
		t.Fatalf("C's key has spent %d, want 30", got)
	}
}

// TestReserveSettleAfterJoin: a key reserved on A moves to C when C
// joins; a settle that reaches C right after the ring change, before the
// handoff brought the record, applies once.
func TestReserveSettleAfterJoin(t *testing.T) {
	// Peer deadlines far above the delay below.
	c := harness.Start(t, harness.Options{PeerTimeout: 5 * time.Second, Clock: testkit.NewClock(0)}, "A", "B", "C")
	a, b, cc := c.Node("A"), c.Node("B"), c.Node("C")
	key := c.KeyWith("C", "A", "join") // A owns it while C is away
	c.SetMembers(a, b)
	r := reserve(t, b, key, 100, 5*time.Minute)
	if !r.Allowed || r.Owner != "A" || r.Reservation == "" {
		t.Fatalf("reserve while C is away: %+v", r)
	}
	// A's handoff to C lags: the settle reaches C before the record does,
	// and C has A, the key's previous owner, settle it.
	c.Net.Delay("A", "C", 500*time.Millisecond)
	c.SetMembers(a, b, cc)
	if s, err := settle(t, b, r.Reservation, 30); err != nil || s.Remaining != 970 {
		t.Fatalf("settle right after C joined: %+v, %v", s, err)
	}
	for _, n := range []*harness.Node{a, b, cc} {
		if _, err := settle(t, n, r.Reservation, 30); !errors.Is(err, forward.ErrAlreadySettled) {
			t.Fatalf("settle again through %s: %v", n.Name, err)
		}
	}
}
