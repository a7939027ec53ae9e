package forward

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/internal/peermsg"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
)

// TestAcquireThreeNodes: a limit of 5 on a ring of three, 50 acquires at
// once through all three nodes: exactly 5 granted, by the key's owner,
// and its successor holds the same 5 before any answer; 2 released
// through non-owners free exactly 2 slots of a second wave of 50; a
// double release lowers the count once; the leases never released free
// all 5 slots after their 2 s TTL.
func TestAcquireThreeNodes(t *testing.T) {
	clk := testkit.NewClock(0)
	nodes := startNodes(t, clk, nil, "A", "B", "C")
	formCluster(clk, nodes...)
	a, b, c := nodes[0], nodes[1], nodes[2]
	key := bucket.NamespaceConcurrency + "k"
	for i := 0; ; i++ {
		if o, _ := a.r.Owner(key); o == "B" {
			break
		}
		key = bucket.NamespaceConcurrency + "k" + string(rune('a'+i%26)) + string(rune('a'+i/26))
	}
	succ := a.r.view.Load().ring.AppendSuccessors(nil, key, 1)[0]
	byName := map[string]*node{"A": a, "B": b, "C": c}
	acq := Acquire{Key: key, Limit: concurrency(5), Mode: bucket.FailClosed, TTL: 2 * time.Second}
	first := acquireWave(t, 50, acq, a.r, b.r, c.r)
	if len(first) != 5 || b.r.InFlight(key) != 5 {
		t.Fatalf("first wave: %d granted, owner holds %d; want 5", len(first), b.r.InFlight(key))
	}
	if n := byName[succ].r.InFlight(key); n != 5 {
		t.Fatalf("successor %s holds %d leases after the answers, want 5", succ, n)
	}
	for i, id := range first[:2] {
		via := []*Router{a.r, c.r}[i]
		res, err := via.Release(context.Background(), id, OutcomeOK, time.Millisecond)
		if err != nil || !res.Released || res.Owner != "B" {
			t.Fatalf("release through %s: %+v %v", via.Self(), res, err)
		}
	}
	res, err := c.r.Release(context.Background(), first[1], OutcomeOK, 0)
	if err != nil || res.Released || res.InFlight != 3 {
		t.Fatalf("double release: %+v %v, want released false, 3 in flight", res, err)
	}
	// A release is answered before its round: the successor catches up.
	testkit.WaitFor(t, 5*time.Second, "the successor counting two releases", func() error {
		if n := byName[succ].r.InFlight(key); n != 3 {
			return fmt.Errorf("successor holds %d after two releases, want 3", n)
		}
		return nil
	})
	second := acquireWave(t, 50, acq, a.r, b.r, c.r)
	if len(second) != 2 || b.r.InFlight(key) != 5 {
		t.Fatalf("second wave: %d granted, owner holds %d; want 2 and 5", len(second), b.r.InFlight(key))
	}
	ren, err := a.r.Renew(context.Background(), second[0], 3*time.Second)
	if err != nil || ren.ExpiresIn != 3*time.Second || ren.Owner != "B" {
		t.Fatalf("renew through A: %+v %v", ren, err)
	}
	clk.Advance(2 * time.Second)
	if n := b.r.InFlight(key); n != 1 {
		t.Fatalf("after 2 s: owner holds %d, want the renewed 1", n)
	}
	clk.Advance(time.Second)
	third := acquireWave(t, 50, acq, a.r, b.r, c.r)
	if len(third) != 5 {
		t.Fatalf("after every TTL: %d granted, want 5", len(third))
	}
}

// TestAcquiresShareRounds: 50 acquires at once of a limit of 50, all
// granted, each acknowledged by the successor before its answer, cost far
// fewer than 50 replicated states: the acquires waiting together share a
// round.
func TestAcquiresShareRounds(t *testing.T) {
	clk := testkit.NewClock(0)
	nodes := startNodes(t, clk, nil, "A", "B")
	formCluster(clk, nodes...)
	a, b := nodes[0], nodes[1]
	var key string
	for i := 0; ; i++ {
		key = fmt.Sprintf("%sshared-%d", bucket.NamespaceConcurrency, i)
		if o, _ := a.r.Owner(key); o == "A" {
			break
		}
	}
	before := testkit.Metric(t, a.reg, "ringlimit_peer_replicated_total")
	got := acquireWave(t, 50, Acquire{Key: key, Limit: concurrency(50), Mode: bucket.FailClosed, TTL: time.Minute}, a.r)
	if len(got) != 50 || b.r.InFlight(key) != 50 {
		t.Fatalf("%d granted, successor holds %d; want 50 and 50", len(got), b.r.InFlight(key))
	}
	sent := testkit.Metric(t, a.reg, "ringlimit_peer_replicated_total") - before
	t.Logf("50 grants acknowledged with %v replicated states", sent)
	if sent < 1 || sent > 25 {
		t.Fatalf("50 grants took %v replicated states, want between 1 and 25 (rounds shared)", sent)
	}
}

// TestLeaseRedirect: a member whose ring names another owner does not
// decide a forwarded acquire, renew or release: it names the owner and
// changes nothing; a last hop (final) it answers unavailable.
func TestLeaseRedirect(t *testing.T) {
	clk := testkit.NewClock(0)
	nodes := startNodes(t, clk, nil, "A", "B")
	formCluster(clk, nodes...)
	a, b := nodes[0], nodes[1]
	var key string
	for i := 0; ; i++ {
		key = fmt.Sprintf("%sredirect-%d", bucket.NamespaceConcurrency, i)
		if o, _ := a.r.Owner(key); o == "A" {
			break
		}
	}
	ctx := context.Background()
	q := peermsg.AcquireRequest{Key: key, Limit: concurrency(1), TTL: time.Minute}
	if ans := b.r.AcquireFor(ctx, "A", q); ans.Status != peermsg.LeaseRedirect || ans.Redirect != "A" || b.r.InFlight(key) != 0 {
		t.Fatalf("acquire on B: %+v, want a redirect to A", ans)
	}
	res, err := b.r.Acquire(ctx, Acquire{Key: key, Limit: concurrency(1), Mode: bucket.FailClosed, TTL: time.Minute})
	if err != nil || !res.Allowed || res.Owner != "A" {
		t.Fatalf("acquire through B: %+v %v", res, err)
	}
	if ans := b.r.RenewFor(ctx, "A", res.Lease, time.Minute, false); ans.Status != peermsg.LeaseRedirect || ans.Redirect != "A" {
		t.Fatalf("renew on B: %+v, want a redirect to A", ans)
	}
	if ans := b.r.ReleaseFor(ctx, "A", res.Lease, 0, 0, false); ans.Status != peermsg.LeaseRedirect || a.r.InFlight(key) != 1 {
		t.Fatalf("release on B: %+v, A holds %d; want a redirect and 1", ans, a.r.InFlight(key))
	}
	q.Final = true
	if ans := b.r.AcquireFor(ctx, "A", q); ans.Status != peermsg.LeaseUnavailable || a.r.InFlight(key) != 1 {
		t.Fatalf("final acquire on B: %+v, want unavailable (only the owner decides)", ans)
	}
}

// TestUnacknowledgedUndone: A owns the key and its successor B stops
// answering. An acquire is undone and answered in its failure mode
// (fail_closed refuses, fail_open admits with no lease), a renew is undone
// (ErrUnavailable, the expiry unchanged), a release stands.
func TestUnacknowledgedUndone(t *testing.T) {
	clk := testkit.NewClock(0)
	nodes := startNodes(t, clk, nil, "A", "B")
	formCluster(clk, nodes...)
	a, b := nodes[0], nodes[1]
	var key string
	for i := 0; ; i++ {
		key = fmt.Sprintf("%sundo-%d", bucket.NamespaceConcurrency, i)
		if o, _ := a.r.Owner(key); o == "A" {
			break
		}
	}
	ctx := context.Background()
	acq := Acquire{Key: key, Limit: concurrency(5), Mode: bucket.FailClosed, TTL: 10 * time.Second}
	held := make([]string, 2)
	for i := range held {
		res, err := a.r.Acquire(ctx, acq)
		if err != nil || !res.Allowed {
			t.Fatalf("acquire %d: %+v %v", i, res, err)
		}
		held[i] = res.Lease
	}
	b.stop() // B's peer service is gone; A's ring still names it
	res, err := a.r.Acquire(ctx, acq)
	if err != nil || res.Allowed || !res.Degraded || res.Lease != "" || res.RetryAfter != time.Second {
		t.Fatalf("fail_closed acquire without a successor: %+v %v", res, err)
	}
	open := acq
	open.Mode = bucket.FailOpen
	if res, err := a.r.Acquire(ctx, open); err != nil || !res.Allowed || !res.Degraded || res.Lease != "" {
		t.Fatalf("fail_open acquire without a successor: %+v %v", res, err)
	}
	if n := a.r.InFlight(key); n != 2 {
		t.Fatalf("A holds %d leases after two undone acquires, want 2", n)
	}
	clk.Advance(5 * time.Second)
	if _, err := a.r.Renew(ctx, held[0], 10*time.Second); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("renew without a successor: %v, want ErrUnavailable", err)
	}
	rel, err := a.r.Release(ctx, held[1], OutcomeOK, 0)
	if err != nil || !rel.Released || rel.InFlight != 1 {
		t.Fatalf("release without a successor: %+v %v, want released, 1 in flight", rel, err)
	}
	clk.Advance(5 * time.Second) // the first lease's TTL, not renewed
	if n := a.r.InFlight(key); n != 0 {
		t.Fatalf("A holds %d leases after the TTL of the one whose renew was undone, want 0", n)
	}
	wantMetric(t, a.reg, "ringlimit_leases_total", "op", "acquire", "result", "degraded", 2)
	wantMetric(t, a.reg, "ringlimit_leases_total", "op", "renew", "result", "unavailable", 1)
}

// TestNewOwnerWaitsForPreviousOwner: C's ring {A, B, C} gives it a key
// that A's ring {A, B} still gives A (A has not yet seen C join), and A
// holds 2 leases of a limit of 3. C's acquire asks A for the key's set;
// A, still its owner, gives none, so C waits, and A grants the 3rd
// meanwhile. Once A's ring holds C, A hands the 3 leases over and C
// refuses its acquire (3 in flight): the two never grant from one set,
// which would hold 4.
func TestNewOwnerWaitsForPreviousOwner(t *testing.T) {
	clk := testkit.NewClock(0)
	a, b, c := startNode(t, "A", clk, nil), startNode(t, "B", clk, nil), startNode(t, "C", clk, nil)
	formCluster(clk, a, b)
	setMembers(membersOf(a, b, c), c) // C's grace: A, the key's previous owner, is up
	key := ""
	for i := 0; key == ""; i++ {
		k := fmt.Sprintf("%smoving-%d", bucket.NamespaceConcurrency, i)
		if o, _ := a.r.Owner(k); o == "A" && ownerIn(c.r.view.Load().ring, "C", k) == "C" {
			key = k
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	acq := Acquire{Key: key, Limit: concurrency(3), Mode: bucket.FailClosed, TTL: time.Minute}
	for i := range 2 {
		if res, err := a.r.Acquire(ctx, acq); err != nil || !res.Allowed || res.Owner != "A" {
			t.Fatalf("acquire %d on A: %+v %v", i+1, res, err)
		}
	}
	timers := clk.Timers()
	type answer struct {
		res LeaseResult
		err error
	}
	fromC := make(chan answer, 1)
	go func() {
		res, err := c.r.Acquire(ctx, acq)
		fromC <- answer{res, err}
	}()
	var early *answer
	testkit.WaitFor(t, 5*time.Second, "C's acquire answered, or waiting on its timer for the set", func() error {
		select {
		case ans := <-fromC:
			early = &ans
			return nil
		default:
		}
		if clk.Timers() > timers {
			return nil
		}
		return errors.New("neither")
	})
	if early != nil {
		t.Fatalf("C answered %+v %v before A's ring moved the key, want it to wait for A's set", early.res, early.err)
	}
	if res, err := a.r.Acquire(ctx, acq); err != nil || !res.Allowed || res.InFlight != 3 {
		t.Fatalf("3rd acquire on A: %+v %v", res, err)
	}
	setMembers(membersOf(a, b, c), a) // A hands the key's set to C
	ans := <-fromC
	if ans.err != nil || ans.res.Allowed || ans.res.Degraded || ans.res.InFlight != 3 || ans.res.Owner != "C" {
		t.Fatalf("C's acquire: %+v %v, want refused by C with 3 in flight", ans.res, ans.err)
	}
	if n := c.r.InFlight(key); n != 3 {
		t.Fatalf("C holds %d leases, want 3", n)
	}
}
