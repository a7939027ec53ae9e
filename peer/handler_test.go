package peer_test

import (
	"context"
	"fmt"
	"path"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
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

// A generated client reaches Replicate on either content-subtype: on
// "ringlimit-peer" the call is read by hand, on the default one by
// protobuf; both skip invalid states and refuse a non-member alike. A
// unary interceptor runs around it, as around the generated handler; one
// that reads the request as protobuf sees an empty message when the call
// was read by hand.
func TestReplicateGeneratedClient(t *testing.T) {
	clock := testkit.NewClock(0)
	var mu sync.Mutex
	var seen []string // "method bytes" of each call the interceptor saw
	icpt := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		mu.Lock()
		seen = append(seen, fmt.Sprint(path.Base(info.FullMethod), " ", proto.Size(req.(proto.Message))))
		mu.Unlock()
		return h(ctx, req)
	}
	a, b := startNode(t, "A", clock, nil), startNode(t, "B", clock, nil, grpc.UnaryInterceptor(icpt))
	formCluster(a, b)
	b.h.members = map[string]bool{"A": true, "B": true}
	lim := hourlyLimit(10)
	w := &peerv1.Limit{Algorithm: uint32(lim.Algorithm()), Limit: lim.Count(), PerNs: int64(lim.Per()), Burst: lim.Burst()}
	client := peerClient(t, b.addr)
	ctx := context.Background()
	for i, opts := range [][]grpc.CallOption{{grpc.CallContentSubtype(peer.CodecName)}, nil} {
		k := fmt.Sprint("g", i, "-")
		req := &peerv1.ReplicateRequest{From: "A", RingVersion: testVersion, Buckets: []*peerv1.BucketState{
			{Key: k + "bad-limit", Limit: &peerv1.Limit{Algorithm: 1}, Used: 1},
			{Key: k + "1", Limit: w, Used: 4},
			{Key: "", Limit: w, Used: 1},
			{Key: k + "2", Limit: w},
		}}
		resp, err := client.Replicate(ctx, req, opts...)
		if err != nil || resp.GetAccepted() != 2 || b.store.Has(k+"bad-limit") || !b.store.Has(k+"1") {
			t.Fatalf("call %d (%v): %v, %v; want the two valid states taken", i, opts, resp, err)
		}
		if _, used, _ := b.store.Used(k+"1", clock.Now()); used != 4 {
			t.Fatalf("call %d: %s1 at %d, want 4", i, k, used)
		}
		req.From = "C"
		if _, err := client.Replicate(ctx, req, opts...); status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("call %d from a non-member: %v, want FailedPrecondition", i, err)
		}
	}
	if _, err := a.pool.Replicate(ctx, "B", []peer.State{{Key: "p-1", Limit: lim, Used: 1}}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 5 || seen[0] != "Replicate 0" || seen[1] != "Replicate 0" || seen[2] == "Replicate 0" ||
		seen[3] == "Replicate 0" || seen[4] != "Replicate 0" {
		t.Fatalf("the interceptor saw %q; want 5 Replicate calls, the 2nd pair (protobuf) alone non-empty", seen)
	}
}

// The keys handed to Handler.Replicate stay what they were for the
// duration of the call, under concurrent calls from two owners (the
// buffers they point into are pooled).
func TestReplicateConcurrentKeys(t *testing.T) {
	clock := testkit.NewClock(0)
	a, b, c := startNode(t, "A", clock, nil), startNode(t, "B", clock, nil), startNode(t, "C", clock, nil)
	formCluster(a, b, c)
	lim := hourlyLimit(1000)
	var wg sync.WaitGroup
	for _, n := range []*node{a, c} {
		wg.Go(func() {
			for round := range 20 {
				states := make([]peer.State, 50)
				for i := range states {
					states[i] = peer.State{Key: fmt.Sprintf("%s-%d-%d", n.name, round, i), Limit: lim, Used: int64(i + 1)}
				}
				if k, err := n.pool.Replicate(context.Background(), "B", states); err != nil || k != len(states) {
					t.Errorf("%s round %d: %d, %v", n.name, round, k, err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.h.mu.Lock()
	defer b.h.mu.Unlock()
	for _, s := range b.h.replicas {
		var from string
		var round, i int
		if _, err := fmt.Sscanf(strings.ReplaceAll(s.Key, "-", " "), "%s %d %d", &from, &round, &i); err != nil || s.Used != int64(i+1) {
			t.Fatalf("B kept %q with %d spent: a key changed under the handler (%v)", s.Key, s.Used, err)
		}
	}
	if len(b.h.replicas) != 2*20*50 {
		t.Fatalf("B took %d states, want %d", len(b.h.replicas), 2*20*50)
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

// A Pool's connections yield the CPU after each write (peer.YieldingListener
// makes a server's do too): B serves on a plain listener here, so every
// yield counted is A's, at least one for each of its 10 batches.
func TestPoolConnectionsYield(t *testing.T) {
	count, restore := peer.CountYields()
	defer restore()
	clock := testkit.NewClock(0)
	a, b := startNode(t, "A", clock, nil), startNode(t, "B", clock, nil)
	formCluster(a, b)
	for i := range 10 {
		if ans, owner := check1(t, a, "B", fmt.Sprint("yield-", i), hourlyLimit(5)); !ans.Allowed || owner != "B" {
			t.Fatalf("check %d: %+v from %s", i, ans, owner)
		}
	}
	if n := count(); n < 10 {
		t.Fatalf("10 batches sent on A's connection to B: %d yields, want at least 10", n)
	}
}
