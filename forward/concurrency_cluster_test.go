package forward

import (
	"context"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
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
	if n := byName[succ].r.InFlight(key); n != 3 {
		t.Fatalf("successor holds %d after two releases, want 3", n)
	}
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
