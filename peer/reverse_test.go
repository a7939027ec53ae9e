package peer_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/clock"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
	"github.com/ringlimit/ringlimit/peer"
)

// startLinked starts nodes whose peer services are made with their Pools
// (ServerConfig.Pool), as a node's are, so that a pair's batches share the
// stream the node whose name sorts first opens.
func startLinked(t *testing.T, tweak func(*peer.Config), names ...string) []*node {
	t.Helper()
	nodes := make([]*node, len(names))
	for i, name := range names {
		n, lis := newNode(t, name, clock.System(), tweak)
		n.scfg.Pool = n.pool
		n.serve(t, lis)
		nodes[i] = n
	}
	formCluster(nodes...)
	return nodes
}

// checkN sends n checks of cost 1 on key under l from n to the member to,
// one at a time, and returns how many were admitted.
func checkN(t *testing.T, from *node, to, key string, n int, limit int64) int {
	t.Helper()
	admitted := 0
	for range n {
		a, owner := check1(t, from, to, key, hourlyLimit(limit))
		if owner != to {
			t.Fatalf("check of %s from %s to %s decided by %q", key, from.name, to, owner)
		}
		if a.Allowed {
			admitted++
		}
	}
	return admitted
}

// Of "a" and "b", "a" opens the stream and b's batches for a come back on
// it: b's checks are decided on a's store, exactly (100 of 150 against a
// limit of 100), every batch b sent went on a's stream, and a's own checks
// on b are decided too.
func TestReverseBatchesRideTheOpenersStream(t *testing.T) {
	nodes := startLinked(t, nil, "a", "b")
	a, b := nodes[0], nodes[1]

	// a's first batch opens a's stream to b, which then takes b's batches.
	if got := checkN(t, a, "b", "on-b", 1, 100); got != 1 {
		t.Fatalf("a's check on b: %d admitted, want 1", got)
	}
	if got := checkN(t, b, "a", "on-a", 150, 100); got != 100 {
		t.Fatalf("b's checks on a: %d of 150 admitted against a limit of 100, want 100", got)
	}
	sent := testkit.Metric(t, b.reg, "ringlimit_forward_rpcs_total")
	reverse := testkit.Metric(t, b.reg, "ringlimit_forward_reverse_rpcs_total")
	if sent != 150 || reverse != 150 {
		t.Fatalf("b sent %v batches, %v of them on a's stream; want 150 and 150", sent, reverse)
	}
	if got := testkit.Metric(t, a.reg, "ringlimit_forward_reverse_rpcs_total"); got != 0 {
		t.Fatalf("a sent %v batches on a stream b opened, want 0", got)
	}
	if _, used, _ := a.store.Used("on-a", a.h.clk.Now()); used != 100 {
		t.Fatalf("a's store spent %d on on-a, want 100", used)
	}
	if got := checkN(t, a, "b", "on-b", 120, 100); got != 99 {
		t.Fatalf("a's further checks on b: %d of 120 admitted, want 99", got)
	}
}

// Concurrent checks both ways on one pair stay exact: each side's batches
// and the answers to the other side's share a's stream (and often one
// message).
func TestReverseBatchesBothWaysExact(t *testing.T) {
	nodes := startLinked(t, nil, "a", "b")
	a, b := nodes[0], nodes[1]
	checkN(t, a, "b", "warm", 1, 1000)

	const callers, each, limit = 8, 50, 150
	errs := make(chan error, 2*callers)
	admitted := make(chan [2]int, 2*callers)
	for i := range 2 * callers {
		from, to, key := a, "b", "on-b"
		if i%2 == 1 {
			from, to, key = b, "a", "on-a"
		}
		go func() {
			var got int
			for range each {
				ans, _, err := check(from, to, key, hourlyLimit(limit), 10*time.Second)
				if err != nil {
					errs <- fmt.Errorf("%s to %s: %w", from.name, to, err)
					admitted <- [2]int{i % 2, got}
					return
				}
				if ans.Allowed {
					got++
				}
			}
			errs <- nil
			admitted <- [2]int{i % 2, got}
		}()
	}
	var total [2]int
	for range 2 * callers {
		if err := <-errs; err != nil {
			t.Error(err)
		}
		r := <-admitted
		total[r[0]] += r[1]
	}
	if total[0] != limit || total[1] != limit {
		t.Fatalf("admitted %d on b and %d on a of %d each, want %d and %d", total[0], total[1], callers*each, limit, limit)
	}
	if got := testkit.Metric(t, b.reg, "ringlimit_forward_reverse_rpcs_total"); got == 0 {
		t.Fatal("b sent no batch on a's stream")
	}
}

// When a's stream ends (a's Pool closes), b's checks on a go on b's own
// stream, and the count goes on where it was.
func TestReverseLinkEndsWithTheStream(t *testing.T) {
	nodes := startLinked(t, nil, "a", "b")
	a, b := nodes[0], nodes[1]
	checkN(t, a, "b", "warm", 1, 100)
	if got := checkN(t, b, "a", "on-a", 60, 100); got != 60 {
		t.Fatalf("b's checks on a: %d of 60 admitted, want 60", got)
	}
	reverse := testkit.Metric(t, b.reg, "ringlimit_forward_reverse_rpcs_total")
	if reverse != 60 {
		t.Fatalf("b sent %v batches on a's stream, want 60", reverse)
	}
	if !peer.ReverseLinked(b.pool, "a") {
		t.Fatal("b has no reverse link to a")
	}
	if err := a.pool.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "b to drop its reverse link to a", func() bool { return !peer.ReverseLinked(b.pool, "a") })
	if got := checkN(t, b, "a", "on-a", 60, 100); got != 40 {
		t.Fatalf("b's checks on a after a's stream ended: %d of 60 admitted, want 40", got)
	}
	if got := testkit.Metric(t, b.reg, "ringlimit_forward_reverse_rpcs_total"); got != reverse {
		t.Fatalf("b sent %v batches on a's stream after it ended, want none (%v before)", got-reverse, reverse)
	}
}

// A node whose Pool serves no Server (as a node that does not know reverse
// batches) opens its stream without asking for them: the other node sends
// its batches on its own stream.
func TestReverseNeedsTheOpenersAsk(t *testing.T) {
	a, lis := newNode(t, "a", clock.System(), nil)
	a.serve(t, lis) // scfg.Pool unset
	b, lis := newNode(t, "b", clock.System(), nil)
	b.scfg.Pool = b.pool
	b.serve(t, lis)
	formCluster(a, b)

	checkN(t, a, "b", "warm", 1, 100)
	if got := checkN(t, b, "a", "on-a", 20, 10); got != 10 {
		t.Fatalf("b's checks on a: %d of 20 admitted, want 10", got)
	}
	if got := testkit.Metric(t, b.reg, "ringlimit_forward_reverse_rpcs_total"); got != 0 {
		t.Fatalf("b sent %v batches on a's stream, which did not ask for them", got)
	}
	if got := testkit.Metric(t, b.reg, "ringlimit_forward_rpcs_total"); got != 20 {
		t.Fatalf("b sent %v batches, want 20", got)
	}
}
