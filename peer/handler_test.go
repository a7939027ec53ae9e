package peer_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/internal/testkit"
	"github.com/ringlimit/ringlimit/peer"
	peerv1 "github.com/ringlimit/ringlimit/proto/peerv1"
)

// What the transport hands the Handler: the batch's ring version, each
// request's Final, the asking node's name; and what it hands back: Redirect.

// Every batch carries the version given to the sender's last SetMembers.
func TestBatchCarriesRingVersion(t *testing.T) {
	clock := testkit.NewClock(0)
	a, b := startNode(t, "A", clock, nil), startNode(t, "B", clock, nil)
	addrs := map[string]string{"A": a.addr, "B": b.addr}
	a.pool.SetMembers(41, addrs)
	check1(t, a, "B", "v-1", hourlyLimit(10))
	a.pool.SetMembers(1<<63+5, addrs) // same members, new ring
	check1(t, a, "B", "v-2", hourlyLimit(10))
	b.h.mu.Lock()
	defer b.h.mu.Unlock()
	if want := []uint64{41, 1<<63 + 5}; !slices.Equal(b.h.versions, want) {
		t.Fatalf("B decided batches of versions %v, want %v", b.h.versions, want)
	}
}

// Request.Final reaches the handler, set and unset, in the batch's order.
func TestFinalReachesHandler(t *testing.T) {
	clock := testkit.NewClock(0)
	a, b := startNode(t, "A", clock, nil), startNode(t, "B", clock, nil)
	formCluster(a, b)
	lim := hourlyLimit(10)
	reqs := []peer.Request{
		{Key: "f-1", Limit: lim, Cost: 1, Final: true},
		{Key: "f-2", Limit: lim, Cost: 1},
		{Key: "f-3", Limit: lim, Cost: 1, Final: true},
	}
	if _, err := a.pool.Check(context.Background(), "B", reqs, make([]peer.Answer, len(reqs))); err != nil {
		t.Fatal(err)
	}
	b.h.mu.Lock()
	defer b.h.mu.Unlock()
	if want := []bool{true, false, true}; !slices.Equal(b.h.finals, want) {
		t.Fatalf("B saw Final %v, want %v", b.h.finals, want)
	}
}

// A receiver whose ring names another owner answers with Redirect and
// spends nothing, unless the check is Final; the Redirect comes back in
// the caller's Answer, next to decided answers of the same batch.
func TestRedirectComesBack(t *testing.T) {
	clock := testkit.NewClock(0)
	a, b := startNode(t, "A", clock, nil), startNode(t, "B", clock, nil)
	b.h.owner = func(key string) string {
		if strings.HasPrefix(key, "c-") {
			return "C"
		}
		return "B"
	}
	formCluster(a, b)
	lim := hourlyLimit(10)
	reqs := []peer.Request{
		{Key: "c-1", Limit: lim, Cost: 1},
		{Key: "b-1", Limit: lim, Cost: 1},
		{Key: "c-2", Limit: lim, Cost: 1, Final: true},
	}
	out := make([]peer.Answer, len(reqs))
	owner, err := a.pool.Check(context.Background(), "B", reqs, out)
	if err != nil {
		t.Fatal(err)
	}
	want := []peer.Answer{
		{Redirect: "C"},
		{Allowed: true, Remaining: 9},
		{Allowed: true, Remaining: 9},
	}
	for i := range want {
		// Only the fields set above: reset times depend on the clock.
		got := peer.Answer{Allowed: out[i].Allowed, Remaining: out[i].Remaining, Redirect: out[i].Redirect}
		if got != want[i] {
			t.Errorf("answer %d: %+v, want %+v", i, out[i], want[i])
		}
	}
	if owner != "B" || b.store.Has("c-1") || !b.store.Has("c-2") {
		t.Fatalf("decided by %s; B holds c-1 %v, c-2 %v; want B, the redirected key not spent, the final one spent",
			owner, b.store.Has("c-1"), b.store.Has("c-2"))
	}
}

// Pool.Replicate reaches the successor's handler, which counts what it
// took; invalid states are left out; a refusal comes back to the caller as
// FailedPrecondition.
func TestReplicate(t *testing.T) {
	clock := testkit.NewClock(0)
	a, b, c := startNode(t, "A", clock, nil), startNode(t, "B", clock, nil), startNode(t, "C", clock, nil)
	formCluster(a, b, c)
	b.h.members = map[string]bool{"A": true, "B": true}
	lim := hourlyLimit(10)
	states := []peer.State{{Key: "r-1", Limit: lim, Used: 3}, {Key: "r-2", Limit: lim, Used: 10}}
	ctx := context.Background()
	n, err := a.pool.Replicate(ctx, "B", states)
	if err != nil || n != 2 {
		t.Fatalf("Replicate A → B: %d, %v; want 2 taken", n, err)
	}
	b.h.mu.Lock()
	got := slices.Clone(b.h.replicas)
	b.h.mu.Unlock()
	if len(got) != 2 || got[0].Key != "r-1" || got[0].Used != 3 || got[1].Key != "r-2" || got[1].Used != 10 {
		t.Fatalf("B got %+v, want %+v", got, states)
	}
	if _, used, ok := b.store.Used("r-1", clock.Now()); !ok || used != 3 {
		t.Fatalf("B holds r-1 at %d (%v), want 3", used, ok)
	}

	// C is not a member of B's ring: B refuses the whole batch.
	if n, err := c.pool.Replicate(ctx, "B", states); status.Code(err) != codes.FailedPrecondition || n != 0 ||
		!strings.Contains(err.Error(), "C is not a member") {
		t.Fatalf("Replicate C → B: %d, %v; want FailedPrecondition with the handler's error", n, err)
	}
	// D is not a member of A's pool.
	if _, err := a.pool.Replicate(ctx, "D", states); err == nil {
		t.Fatal("Replicate to a non-member succeeded")
	}
	for _, m := range []struct {
		n    *node
		name string
		want float64
	}{
		{a, "ringlimit_peer_replicated_total", 2},
		{a, "ringlimit_peer_replicate_errors_total", 0},
		{c, "ringlimit_peer_replicated_total", 0},
		{c, "ringlimit_peer_replicate_errors_total", 1},
		{b, "ringlimit_peer_replicas_received_total", 2},
	} {
		if got := testkit.Metric(t, m.n.reg, m.name); got != m.want {
			t.Errorf("%s %s = %v, want %v", m.n.name, m.name, got, m.want)
		}
	}

	// A state with a bad key or limit is skipped, as Handoff skips it.
	client := peerClient(t, b.addr)
	w := &peerv1.Limit{Algorithm: uint32(lim.Algorithm()), Limit: lim.Count(), PerNs: int64(lim.Per()), Burst: lim.Burst()}
	resp, err := client.Replicate(ctx, &peerv1.ReplicateRequest{From: "A", RingVersion: testVersion, Buckets: []*peerv1.BucketState{
		{Key: "", Limit: w, Used: 1},
		{Key: "r-3", Used: 1},
		{Key: "r-4", Limit: w, Used: 1},
	}})
	if err != nil || resp.GetAccepted() != 1 || b.store.Has("r-3") || !b.store.Has("r-4") {
		t.Fatalf("Replicate with invalid states: %v, %v; want the valid one alone taken", resp, err)
	}
}

// Lookup is told which node asks.
func TestLookupGetsAsker(t *testing.T) {
	clock := testkit.NewClock(0)
	a, b := startNode(t, "A", clock, nil), startNode(t, "B", clock, nil)
	formCluster(a, b)
	lim := hourlyLimit(10)
	check1(t, a, "B", "l-1", lim)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, found, err := a.pool.Fetch(ctx, "B", "l-1", &lim)
	if err != nil || !found || st.Used != 1 {
		t.Fatalf("Fetch: %+v, %v, %v; want l-1 found with 1 spent", st, found, err)
	}
	b.h.mu.Lock()
	defer b.h.mu.Unlock()
	if want := []string{"A l-1"}; !slices.Equal(b.h.lookups, want) {
		t.Fatalf("B's Lookups %q, want %q", b.h.lookups, want)
	}
}
