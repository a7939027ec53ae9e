package peer_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/clock"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
	"github.com/ringlimit/ringlimit/peer"
	peerv1 "github.com/ringlimit/ringlimit/proto/peerv1"
)

// A peer message over its limit is refused whole, and nothing in it is
// applied; a message at the limit is taken.
func TestOversizeMessagesRefused(t *testing.T) {
	clock := testkit.NewClock(0)
	a, b := startNode(t, "A", clock, nil), startNode(t, "B", clock, nil)
	formCluster(a, b)
	lim := hourlyLimit(10)
	w := &peerv1.Limit{Algorithm: uint32(lim.Algorithm()), Limit: lim.Count(), PerNs: int64(lim.Per()), Burst: lim.Burst()}
	protoStates := func(prefix string, n int) []*peerv1.BucketState {
		out := make([]*peerv1.BucketState, n)
		for i := range out {
			out[i] = &peerv1.BucketState{Key: fmt.Sprintf("%s-%d", prefix, i), Limit: w, Used: 1}
		}
		return out
	}
	states := func(prefix string, n int) []peer.State {
		out := make([]peer.State, n)
		for i := range out {
			out[i] = peer.State{Key: fmt.Sprintf("%s-%d", prefix, i), Limit: lim, Used: 1}
		}
		return out
	}
	ctx := t.Context()
	client := peerClient(t, b.addr)
	held := func() int { return b.store.Len() }

	// Check: a batch of MaxCheckBatch+1 checks, on the stream as a node
	// writes it (content-subtype ringlimit-peer).
	st, err := client.Check(ctx, grpc.CallContentSubtype("ringlimit-peer"))
	if err != nil {
		t.Fatal(err)
	}
	checks := make([]*peerv1.Check, peer.MaxCheckBatch+1)
	for i := range checks {
		checks[i] = &peerv1.Check{Key: fmt.Sprintf("c-%d", i), Limit: w, Cost: 1}
	}
	if err := st.Send(&peerv1.CheckRequest{From: "A", Checks: checks, Id: 1, RingVersion: testVersion}); err != nil {
		t.Fatal(err)
	}
	resp, err := st.Recv()
	if err != nil || resp.GetError() == "" || len(resp.GetDecisions()) != 0 || held() != 0 {
		t.Fatalf("check batch of %d: %v, %v, %d keys held; want refused whole, nothing held", len(checks), resp, err, held())
	}
	_ = st.CloseSend()

	// Handoff of MaxHandoffStates+1 states.
	if _, err := client.Handoff(ctx, &peerv1.HandoffRequest{From: "A", Buckets: protoStates("h", peer.MaxHandoffStates+1)}); status.Code(err) != codes.InvalidArgument || held() != 0 {
		t.Fatalf("handoff of %d: %v, %d keys held; want InvalidArgument, nothing held", peer.MaxHandoffStates+1, err, held())
	}
	// Replicate of MaxReplicateStates+1 states: read by hand (the pool)
	// and by protobuf (a generated client).
	if _, err := a.pool.Replicate(ctx, "B", states("r", peer.MaxReplicateStates+1)); status.Code(err) != codes.InvalidArgument || held() != 0 {
		t.Fatalf("replicate of %d: %v, %d keys held; want InvalidArgument, nothing held", peer.MaxReplicateStates+1, err, held())
	}
	if _, err := client.Replicate(ctx, &peerv1.ReplicateRequest{From: "A", RingVersion: testVersion, Buckets: protoStates("p", peer.MaxReplicateStates+1)}); status.Code(err) != codes.InvalidArgument || held() != 0 {
		t.Fatalf("generated replicate of %d: %v, %d keys held; want InvalidArgument, nothing held", peer.MaxReplicateStates+1, err, held())
	}
	if got := testkit.Metric(t, b.reg, "ringlimit_peer_oversize_refused_total"); got != 4 {
		t.Fatalf("oversize_refused_total = %v, want 4", got)
	}

	// At the limits, everything is taken.
	if _, err := client.Handoff(ctx, &peerv1.HandoffRequest{From: "A", Buckets: protoStates("h", peer.MaxHandoffStates)}); err != nil || held() != peer.MaxHandoffStates {
		t.Fatalf("handoff of %d: %v, %d keys held", peer.MaxHandoffStates, err, held())
	}
	if n, err := a.pool.Replicate(ctx, "B", states("r", peer.MaxReplicateStates)); err != nil || n != peer.MaxReplicateStates {
		t.Fatalf("replicate of %d: %d taken, %v", peer.MaxReplicateStates, n, err)
	}
}

// A pool's batches may not be larger than a peer accepts; its batcher
// yields three times before a batch by default, and not at all when told
// so.
func TestMaxBatchBounded(t *testing.T) {
	if _, err := peer.NewPool(peer.Config{Self: "A", Clock: testkit.NewClock(0), Batch: peer.DefaultConfig().Batch}); err != nil {
		t.Fatal(err)
	}
	if y := peer.DefaultConfig().Batch.Yields; y != 3 {
		t.Errorf("default Batch.Yields %d, want 3", y)
	}
	off := peer.Config{Self: "A", Clock: testkit.NewClock(0)}
	off.Batch.Yields = -1 // none
	if p, err := peer.NewPool(off); err != nil {
		t.Errorf("NewPool with Batch.Yields -1: %v", err)
	} else {
		p.Close(context.Background())
	}
	cfg := peer.Config{Self: "A", Clock: testkit.NewClock(0)}
	cfg.Batch.MaxBatch = peer.MaxCheckBatch + 1
	if _, err := peer.NewPool(cfg); err == nil {
		t.Fatalf("NewPool with MaxBatch %d succeeded", cfg.Batch.MaxBatch)
	}
}

// A check that finds its peer's queue full fails at once with ErrBusy,
// without waiting for the peer's deadline.
func TestQueueFullFailsAtOnce(t *testing.T) {
	fake := testkit.NewClock(0)
	const timeout = 3 * time.Second
	a := startNode(t, "A", fake, func(c *peer.Config) {
		c.Clock, c.Timeout = clock.System(), timeout // real time: the deadline is the point
		c.Batch.MaxBatch, c.Batch.MaxInFlight, c.Batch.Queue = 1, 1, 4
	})
	addr := testkit.Blackhole(t)
	a.pool.SetMembers(testVersion, map[string]string{"A": a.addr, "B": addr})

	// The first call's batch opens a stream to the blackhole, holding the
	// only slot for Timeout; the calls after it wait in the queue (and stay
	// there once their callers give up) until it is full.
	start := time.Now()
	for i := 0; ; i++ {
		_, _, err := check(a, "B", fmt.Sprintf("q-%d", i), hourlyLimit(10), 50*time.Millisecond)
		if errorsIsBusy(err) {
			if i != 5 {
				t.Fatalf("ErrBusy after %d calls, want 5 (one in flight, 4 queued)", i)
			}
			break
		}
		if i == 5 {
			t.Fatalf("call %d: %v, want ErrBusy", i, err)
		}
	}
	for i := range 20 {
		_, el, err := timedCheck(a, "B", fmt.Sprintf("busy-%d", i), hourlyLimit(10), 10*time.Second)
		if !errorsIsBusy(err) || el > 100*time.Millisecond {
			t.Fatalf("check %d on a full queue: %v after %v, want ErrBusy at once (the deadline is %v)", i, err, el, timeout)
		}
	}
	if el := time.Since(start); el >= timeout {
		t.Fatalf("the test took %v, longer than the deadline it measures against (%v)", el, timeout)
	}
	if got := testkit.Metric(t, a.reg, "ringlimit_forward_busy_checks_total"); got != 21 {
		t.Fatalf("busy_checks_total = %v, want 21", got)
	}
}

func errorsIsBusy(err error) bool { return errors.Is(err, peer.ErrBusy) }
