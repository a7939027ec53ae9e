package peer_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
	"github.com/ringlimit/ringlimit/peer"
	peerv1 "github.com/ringlimit/ringlimit/proto/peerv1"
)

// ---- batching ---------------------------------------------------------------

func TestConcurrentChecksAreCoalesced(t *testing.T) {
	const goroutines, perG, maxBatch = 64, 50, 8
	clock := testkit.NewClock(0)
	a := startNode(t, "A", clock, func(c *peer.Config) { c.Batch.MaxBatch = maxBatch })
	b := startNode(t, "B", clock, nil)
	formCluster(a, b)
	keys := testKeys("coalesce", 16)
	lim := hourlyLimit(1_000_000)

	var wg sync.WaitGroup
	start := make(chan struct{})
	for g := range goroutines {
		wg.Go(func() {
			<-start
			for i := range perG {
				ans, owner, err := check(a, "B", keys[(g+i)%len(keys)], lim, 10*time.Second)
				if err != nil || !ans.Allowed || owner != "B" {
					t.Errorf("%+v from %s: %v", ans, owner, err)
					return
				}
			}
		})
	}
	close(start)
	wg.Wait()

	const total = goroutines * perG
	checks := testkit.Metric(t, a.reg, "ringlimit_forward_checks_total")
	rpcs := testkit.Metric(t, a.reg, "ringlimit_forward_rpcs_total")
	factor := checks / rpcs
	t.Logf("batching factor: %d checks in %d RPCs = %.2f checks per RPC (MaxBatch %d)", int(checks), int(rpcs), factor, maxBatch)
	if checks != total {
		t.Fatalf("forward_checks_total = %v, want %d", checks, total)
	}
	if got := testkit.Metric(t, b.reg, "ringlimit_peer_checks_total"); got != total {
		t.Fatalf("B peer_checks_total = %v, want %d", got, total)
	}
	if factor < 2 {
		t.Fatalf("batching factor %.2f, want at least 2", factor)
	}
	if rpcs < total/maxBatch {
		t.Fatalf("%v RPCs for %d checks: some RPC carried more than MaxBatch=%d", rpcs, total, maxBatch)
	}
	if n := testkit.Metric(t, a.reg, "ringlimit_forward_batch_checks"); n != rpcs {
		t.Fatalf("batch-size histogram has %v samples, want %v", n, rpcs)
	}
	if over := testkit.HistogramAbove(t, a.reg, "ringlimit_forward_batch_checks", maxBatch); over != 0 {
		t.Fatalf("%d RPCs carried more than MaxBatch=%d checks", over, maxBatch)
	}
}

// A check call's checks and decisions are handed from call to call once
// answered: each caller still reads the answers of its own checks. 32
// callers, each on its own key under its own limit (100+g), share batches
// and, one after another, their arrays; a call of 3 checks (more than
// MaxBatch 2: two batches) on its key spends 3. Every answer's Remaining
// is exactly what the caller's own key has left.
func TestForwardedAnswersStayWithTheirCallers(t *testing.T) {
	const goroutines, perG = 32, 40
	clock := testkit.NewClock(0)
	a := startNode(t, "A", clock, func(c *peer.Config) { c.Batch.MaxBatch = 2 })
	b := startNode(t, "B", clock, nil)
	formCluster(a, b)
	keys := testKeys("own", goroutines)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for g := range goroutines {
		wg.Go(func() {
			<-start
			lim := hourlyLimit(int64(100 + g))
			left := int64(100 + g)
			for i := range perG {
				if i%4 == 3 { // three checks in one call: two batches
					reqs := []peer.Request{{Key: keys[g], Limit: lim, Cost: 1}, {Key: keys[g], Limit: lim, Cost: 1}, {Key: keys[g], Limit: lim, Cost: 1}}
					out := make([]peer.Answer, 3)
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					_, err := a.pool.Check(ctx, "B", reqs, out)
					cancel()
					if err != nil {
						t.Errorf("caller %d: %v", g, err)
						return
					}
					for j := range out {
						left--
						if !out[j].Allowed || out[j].Remaining != left {
							t.Errorf("caller %d, call %d, check %d: %+v, want allowed with %d left", g, i, j, out[j], left)
							return
						}
					}
					continue
				}
				ans, owner, err := check(a, "B", keys[g], lim, 10*time.Second)
				left--
				if err != nil || owner != "B" || !ans.Allowed || ans.Remaining != left {
					t.Errorf("caller %d, call %d: %+v from %s, %v; want allowed with %d left", g, i, ans, owner, err, left)
					return
				}
			}
		})
	}
	close(start)
	wg.Wait()
	if got, want := testkit.Metric(t, b.reg, "ringlimit_peer_checks_total"), float64(goroutines*(perG/4)*(3+3)); got != want {
		t.Fatalf("B decided %v checks, want %v", got, want)
	}
}

// Config.Batch.MaxBatch is "the most checks one peer RPC carries": a call of
// more checks than that is split into batches of at most MaxBatch.
func TestMaxBatchBoundsMultiCheckCalls(t *testing.T) {
	const maxBatch = 8
	clock := testkit.NewClock(0)
	a := startNode(t, "A", clock, func(c *peer.Config) { c.Batch.MaxBatch = maxBatch })
	b := startNode(t, "B", clock, nil)
	formCluster(a, b)
	keys := testKeys("multi", 20)
	lim := hourlyLimit(1000)
	reqs := make([]peer.Request, len(keys))
	for i, k := range keys {
		reqs[i] = peer.Request{Key: k, Limit: lim, Cost: 1}
	}
	out := make([]peer.Answer, len(reqs))
	if _, err := a.pool.Check(context.Background(), "B", reqs, out); err != nil {
		t.Fatal(err)
	}
	rpcs := testkit.Metric(t, a.reg, "ringlimit_forward_rpcs_total")
	if over := testkit.HistogramAbove(t, a.reg, "ringlimit_forward_batch_checks", maxBatch); over != 0 || rpcs < 3 {
		t.Fatalf("20 checks in %v RPCs, %d of them above MaxBatch=%d", rpcs, over, maxBatch)
	}
	for i := range out {
		if !out[i].Allowed || out[i].Remaining != 999 || !b.store.Has(keys[i]) {
			t.Fatalf("answer %d: %+v, want allowed with 999 left", i, out[i])
		}
	}
}

// The peer service applies a batch only if all of it is valid: a bad check
// (from a peer of another version, say) must not leave the checks before it
// spent.
func TestPeerBatchValidatedWhole(t *testing.T) {
	clock := testkit.NewClock(0)
	b := startNode(t, "B", clock, nil)
	client := peerClient(t, b.addr)
	lim := hourlyLimit(10)
	w := &peerv1.Limit{Algorithm: uint32(lim.Algorithm()), Limit: lim.Count(), PerNs: int64(lim.Per()), Burst: lim.Burst()}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := client.Check(ctx, grpc.CallContentSubtype(peer.CodecName))
	if err != nil {
		t.Fatal(err)
	}
	err = st.Send(&peerv1.CheckRequest{From: "A", Id: 7, Checks: []*peerv1.Check{
		{Key: "first", Limit: w, Cost: 1},
		{Key: "second", Limit: w, Cost: 11}, // above capacity
	}})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetId() != 7 || resp.GetError() != "checks[1]: bucket: invalid cost: cost 11 exceeds the capacity 10 of token_bucket 10/1h0m0s burst 10" || len(resp.GetDecisions()) != 0 {
		t.Fatalf("response %v, want batch 7 refused for checks[1] with no decisions", resp)
	}
	if b.store.Has("first") {
		t.Fatal("the check before the bad one was applied")
	}
}

// ---- streams and drain ------------------------------------------------------

// A stopping node asks its peers to end their Check streams to it
// (peer.Server.Drain), so that a graceful stop of its gRPC server returns instead
// of waiting for streams that would otherwise stay open for good. After it,
// the peer's checks to the node fail at once.
func TestDrainEndsPeerStreams(t *testing.T) {
	clock := testkit.NewClock(0)
	nodes := startNodes(t, clock, nil, "A", "B")
	formCluster(nodes...)
	a, b := nodes[0], nodes[1]
	key := "drain-0"
	if ans, owner := check1(t, a, "B", key, hourlyLimit(10)); !ans.Allowed || owner != "B" || ans.Remaining != 9 {
		t.Fatalf("first check from A: %+v by %s, want allowed by B with 9 left", ans, owner)
	}
	stopped := make(chan struct{})
	go func() {
		b.srv.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
		t.Fatal("GracefulStop returned while A's Check stream to B was open and not drained")
	case <-time.After(300 * time.Millisecond):
	}
	start := time.Now()
	b.psrv.Drain()
	select {
	case <-stopped:
		t.Logf("GracefulStop returned %v after Drain", time.Since(start))
	case <-time.After(5 * time.Second):
		t.Fatal("GracefulStop still waiting 5s after Drain")
	}
	if ans, el, err := timedCheck(a, "B", key, hourlyLimit(10), 5*time.Second); err == nil || errors.Is(err, context.DeadlineExceeded) || el > time.Second {
		t.Fatalf("check from A after B stopped: %+v, %v after %v, want a prompt failure", ans, err, el)
	}
}

// An owner that takes batches on its Check stream and never answers them:
// each batch fails once it has waited Timeout (the stream breaks). A batch
// sent within Timeout of that fails at once without a stream; the first
// one after it opens a new stream, held again.
func TestOwnerHoldsBatches(t *testing.T) {
	clock := testkit.NewClock(0)
	// The deadline is the point: A's transport runs on real time.
	a := startNode(t, "A", clock, realTransport)
	slow := testkit.NewSlowServer(func() any { return new(peerv1.CheckRequest) })
	b := startNode(t, "B", clock, nil, grpc.StreamInterceptor(slow.Stream))
	formCluster(a, b)
	for i, key := range testKeys("held", 2) {
		if i > 0 {
			quick := testKeys("held-quick", 1)[0]
			if _, el, err := timedCheck(a, "B", quick, hourlyLimit(10), 5*time.Second); err == nil || el > failTimeout/2 {
				t.Fatalf("check right after a held batch failed: %v after %v, want a failure at once", err, el)
			}
			time.Sleep(failTimeout) // the quiet window after the broken stream
		}
		ans, el, err := timedCheck(a, "B", key, hourlyLimit(10), 5*time.Second)
		if err == nil || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("check %d on a held batch: %+v, %v; want the transport's failure", i, ans, err)
		}
		if el < failTimeout || el > failTimeout+time.Second {
			t.Fatalf("check %d failed after %v, want Timeout (%v) and not much more", i, el, failTimeout)
		}
	}
	if n := len(slow.Held); n != 2 {
		t.Fatalf("B held %d streams, want 2 (one per check: the first broke at its deadline)", n)
	}
}

// Checks to an owner that is draining (stopping, still serving) never wait
// past their deadline: each batch is either answered by the owner or, when
// the owner ends the new stream before the batch is on it, fails at once.
// Before the fix, a batch that lost that race was on no stream at all, and
// its checks (and every later check to that owner) waited for their
// callers' deadlines. After the first 10 checks the race is lost on
// purpose: a batch on a new stream waits for the drain to arrive first.
//
// The owner sends a stream's drain from a goroutine of its own, which a
// busy machine may leave waiting to run for some milliseconds while the
// stream goes on answering: a hundred checks or more. Until that stream's
// drain arrives, checks are answered on it and open nothing; so the test
// sends checks on fresh keys until 5 streams opened, not a fixed number.
func TestChecksWhileOwnerDrains(t *testing.T) {
	// At most maxChecks keys, well within B's store (startNode's MaxKeys)
	// so that every fresh key is taken, and at most 30s: a drain still
	// missing by then is taken for one that never comes.
	const maxChecks, wantOpened = 1 << 15, 5
	clock := testkit.NewClock(0)
	nodes := startNodes(t, clock, nil, "A", "B")
	formCluster(nodes...)
	a, b := nodes[0], nodes[1]
	b.psrv.Drain() // B keeps serving, and drains every stream opened to it
	t.Cleanup(func() { peer.SetTestHookOpened(nil) })
	var opened atomic.Int32 // streams opened once the hook is set
	failedLate := 0         // checks failed once the hook is set
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; opened.Load() < wantOpened; i++ {
		if i == maxChecks || time.Now().After(deadline) {
			t.Fatalf("after %d checks, %d failed and %d opened a stream once the hook was set; want %d: a stream never drained",
				i, failedLate, opened.Load(), wantOpened)
		}
		if i == 10 {
			peer.SetTestHookOpened(func(broken func() bool) {
				opened.Add(1)
				testkit.Poll(2*time.Second, broken)
			})
		}
		ans, owner, err := check(a, "B", fmt.Sprintf("draining-%d", i), hourlyLimit(10), 3*time.Second)
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			t.Fatalf("check %d: %v (it waited for its deadline)", i, err)
		case err != nil:
			if i >= 10 {
				failedLate++
			}
		case owner == "B" && ans.Allowed && ans.Remaining == 9:
		default:
			t.Fatalf("check %d: %+v by %s", i, ans, owner)
		}
	}
	// A check that finds the previous stream not yet drained is answered
	// on it; one that opens a stream fails.
	if n := int(opened.Load()); n < wantOpened || failedLate != n {
		t.Fatalf("%d checks failed and %d opened a stream that drained before their batch; want as many, and %d", failedLate, n, wantOpened)
	}
}

// An owner that drains a stream and then never answers the batch in flight
// on it: the batch keeps its deadline, and fails once it has waited
// Timeout.
func TestDrainedStreamKeepsDeadline(t *testing.T) {
	clock := testkit.NewClock(0)
	// The deadline is the point: A's transport runs on real time.
	a := startNode(t, "A", clock, realTransport)
	hold := func(_ any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, _ grpc.StreamHandler) error {
		var req peerv1.CheckRequest
		if err := ss.RecvMsg(&req); err != nil {
			return err
		}
		if err := ss.SendMsg(&peerv1.CheckResponse{Owner: "B", Drain: true}); err != nil {
			return err
		}
		<-ss.Context().Done()
		return ss.Context().Err()
	}
	b := startNode(t, "B", clock, nil, grpc.StreamInterceptor(hold))
	formCluster(a, b)
	for i, key := range testKeys("drained", 2) {
		if i > 0 {
			time.Sleep(failTimeout) // the quiet window after the overdue stream
		}
		ans, el, err := timedCheck(a, "B", key, hourlyLimit(10), 3*time.Second)
		if err == nil || errors.Is(err, context.DeadlineExceeded) || el < failTimeout || el > failTimeout+time.Second {
			t.Fatalf("check %d: %+v, err %v after %v, want the transport's failure after Timeout (%v)", i, ans, err, el, failTimeout)
		}
	}
}

// gatedStream holds the first message of every Check stream until open is
// closed, then serves the stream as usual.
type gatedStream struct {
	grpc.ServerStream
	open  chan struct{}
	first bool
}

func (g *gatedStream) RecvMsg(m any) error {
	if !g.first {
		g.first = true
		<-g.open
	}
	return g.ServerStream.RecvMsg(m)
}

// A check whose caller gives up while it waits for the batch in flight is
// not sent: the owner spends nothing for a request that already failed.
// Before, it went out with the next batch and was charged at the owner.
func TestAbandonedCheckIsNotSent(t *testing.T) {
	clock := testkit.NewClock(0)
	a := startNode(t, "A", clock, nil)
	open := make(chan struct{})
	gate := func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		return h(srv, &gatedStream{ServerStream: ss, open: open})
	}
	b := startNode(t, "B", clock, nil, grpc.StreamInterceptor(gate))
	formCluster(a, b)
	keys := testKeys("abandoned", 3)

	// The first check's batch is held by B, so it keeps A's only slot.
	first := make(chan error, 1)
	go func() {
		ans, owner, err := check(a, "B", keys[0], hourlyLimit(10), 10*time.Second)
		if err == nil && (!ans.Allowed || owner != "B") {
			err = fmt.Errorf("first check: %+v by %s, want admitted by B", ans, owner)
		}
		first <- err
	}()
	testkit.Eventually(t, 5*time.Second, "the first batch is sent", func() bool {
		return testkit.Metric(t, a.reg, "ringlimit_forward_checks_total") == 1
	})
	// The second waits in the queue and its caller gives up.
	if _, _, err := check(a, "B", keys[1], hourlyLimit(10), 50*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("abandoned check: %v, want its deadline", err)
	}
	close(open)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if ans, owner := check1(t, a, "B", keys[2], hourlyLimit(10)); !ans.Allowed || owner != "B" {
		t.Fatalf("third check: %+v by %s, want admitted by B", ans, owner)
	}
	if got := testkit.Metric(t, a.reg, "ringlimit_forward_abandoned_checks_total"); got != 1 {
		t.Fatalf("abandoned checks %v, want 1", got)
	}
	if got := testkit.Metric(t, a.reg, "ringlimit_forward_checks_total"); got != 2 {
		t.Fatalf("checks sent %v, want 2", got)
	}
	if !b.store.Has(keys[0]) || b.store.Has(keys[1]) || !b.store.Has(keys[2]) {
		t.Fatalf("B holds %s %v, %s %v, %s %v; want the abandoned one alone missing",
			keys[0], b.store.Has(keys[0]), keys[1], b.store.Has(keys[1]), keys[2], b.store.Has(keys[2]))
	}
}

// The owner's side of a forwarded batch (decode, decide on the store,
// encode the answer) allocates nothing per check: a batch of 64 checks on
// keys the store holds costs exactly what a batch of 1 does, and deciding
// (the transport's part and a handler that allocates nothing) costs
// nothing at all.
func TestOwnerPathAllocations(t *testing.T) {
	store, err := bucket.NewStore(bucket.StoreConfig{MaxKeys: 1 << 12, Shards: 4})
	if err != nil {
		t.Fatal(err)
	}
	h := &storeHandler{self: "A", store: store, clk: testkit.NewClock(0)}
	limit := bucket.MustLimit(bucket.TokenBucket, 1_000_000_000, 1e9, 0)
	encoded := func(n int) []byte {
		return peer.EncodeBatch("B", testKeys("key", n), limit)
	}
	ctx := context.Background()
	srv, err := peer.NewServer(peer.ServerConfig{Self: "A", Handler: h, Clock: testkit.NewClock(0)})
	if err != nil {
		t.Fatal(err)
	}
	path := peer.NewOwnerPath(srv)
	roundTrip := func(msg []byte) func() {
		f := path.RoundTrip(ctx, msg)
		return func() {
			if err := f(); err != nil {
				t.Fatal(err)
			}
		}
	}
	one, many := roundTrip(encoded(1)), roundTrip(encoded(64))
	many() // the keys now exist; the pooled slices have grown
	if n, allowed, batchErr := path.Answer(); n != 64 || !allowed || batchErr != "" {
		t.Fatalf("answer: %d decisions, last allowed %v, error %q", n, allowed, batchErr)
	}
	// Below gRPC's pooling threshold (small batches) the codec's buffer is
	// allocated; above it, it comes from gRPC's pool. Either way the cost is
	// per message, not per check.
	a1, a64 := testing.AllocsPerRun(200, one), testing.AllocsPerRun(200, many)
	if a64 > a1 || a1 > 4 {
		t.Fatalf("a batch of 64 checks: %v allocations, a batch of 1: %v; want at most 4, and no more for 64", a64, a1)
	}
	if a := testing.AllocsPerRun(200, func() { path.Decide(ctx) }); a != 0 {
		t.Fatalf("deciding a batch of 64: %v allocations, want 0", a)
	}
	t.Logf("allocations per batch (codec in and out, decide): %v for 1 check, %v for 64", a1, a64)
}
