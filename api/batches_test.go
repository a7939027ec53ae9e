package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/ringlimit/ringlimit/forward"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
	pb "github.com/ringlimit/ringlimit/proto/ringlimitv1"
)

func inlineCheck(key string, limit int64) *pb.Check {
	return &pb.Check{Key: key, Limit: &pb.Limit{Algorithm: pb.Algorithm_FIXED_WINDOW, Limit: limit, PerMs: 60_000}}
}

func checkMsg(id uint64, checks ...*pb.Check) *pb.BatchRequest {
	return &pb.BatchRequest{Id: id, Call: &pb.BatchRequest_Check{Check: &pb.CheckRequest{Checks: checks}}}
}

// recvAll reads n answers of st by id.
func recvAll(t *testing.T, st pb.RateLimiter_BatchesClient, n int) map[uint64]*pb.BatchResponse {
	t.Helper()
	got := map[uint64]*pb.BatchResponse{}
	for len(got) < n {
		r, err := st.Recv()
		if err != nil {
			t.Fatalf("Recv after %d of %d answers: %v", len(got), n, err)
		}
		if r.GetDrain() {
			t.Fatalf("drain before %d answers", n)
		}
		if _, dup := got[r.GetId()]; dup {
			t.Fatalf("id %d answered twice", r.GetId())
		}
		got[r.GetId()] = r
	}
	return got
}

// openStream opens a Batches stream on c for the test's time.
func openStream(t *testing.T, c pb.RateLimiterClient) pb.RateLimiter_BatchesClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	t.Cleanup(cancel)
	st, err := c.Batches(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// closeStream closes st's sending side and expects the node to end the
// stream with nothing more to answer.
func closeStream(t *testing.T, st pb.RateLimiter_BatchesClient) {
	t.Helper()
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("after CloseSend: %v, want EOF", err)
	}
}

// TestGRPCBatches: the messages of one Batches stream are answered by id
// as their own calls would be: three checks of a limit of 2 (2 admitted),
// two acquires of a limit of 1 (1 granted), a message with no call and a
// check batch with an invalid check (INVALID_ARGUMENT, each naming what is
// wrong, nothing applied: a later check of the key is refused, remaining
// 0). The interceptor sees each message as a call of its method.
func TestGRPCBatches(t *testing.T) {
	e := newTestEnv(t, nil)
	var mu sync.Mutex
	seen := map[string]int{}
	e.api.batchIntercept = func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		mu.Lock()
		seen[info.FullMethod]++
		mu.Unlock()
		return h(ctx, req)
	}
	c := e.startGRPC(t)
	st := openStream(t, c)
	msgs := []*pb.BatchRequest{
		checkMsg(7, inlineCheck("k", 2), inlineCheck("k", 2), inlineCheck("k", 2)),
		{Id: 8, TimeoutMs: 5000, Call: &pb.BatchRequest_Leases{Leases: &pb.LeasesRequest{Ops: []*pb.LeaseOp{acquireOp("jobs", 1), acquireOp("jobs", 1)}}}},
		{Id: 9},
		checkMsg(10, inlineCheck("other", 5), &pb.Check{Key: "bad"}),
	}
	for _, m := range msgs {
		if err := st.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	got := recvAll(t, st, len(msgs))
	allowed := 0
	for _, d := range got[7].GetCheck().GetDecisions() {
		if d.GetAllowed() {
			allowed++
		}
	}
	if got[7].GetCode() != 0 || len(got[7].GetCheck().GetDecisions()) != 3 || allowed != 2 {
		t.Fatalf("checks: %v; want 3 decisions, 2 allowed", got[7])
	}
	granted := 0
	for _, r := range got[8].GetLeases().GetResults() {
		if r.GetAcquire().GetDecision().GetAllowed() {
			granted++
		}
	}
	if got[8].GetCode() != 0 || len(got[8].GetLeases().GetResults()) != 2 || granted != 1 {
		t.Fatalf("acquires: %v; want 2 results, 1 granted", got[8])
	}
	if got[9].GetCode() != int32(codes.InvalidArgument) || got[9].GetMessage() != "call: one of check or leases is required" {
		t.Fatalf("empty message: %v", got[9])
	}
	if got[10].GetCode() != int32(codes.InvalidArgument) || got[10].GetResult() != nil {
		t.Fatalf("invalid batch: %v; want INVALID_ARGUMENT and no result", got[10])
	}
	t.Logf("invalid batch: %s", got[10].GetMessage())
	// Nothing of message 10 was applied; message 7 was.
	if err := st.Send(checkMsg(11, inlineCheck("other", 5), inlineCheck("k", 2))); err != nil {
		t.Fatal(err)
	}
	ds := recvAll(t, st, 1)[11].GetCheck().GetDecisions()
	if len(ds) != 2 || !ds[0].GetAllowed() || ds[0].GetRemaining() != 4 || ds[1].GetAllowed() || ds[1].GetRemaining() != 0 {
		t.Fatalf("after: %v; want other allowed with 4 left, k refused with 0", ds)
	}
	closeStream(t, st)
	mu.Lock()
	defer mu.Unlock()
	if seen[pb.RateLimiter_Check_FullMethodName] != 3 || seen[pb.RateLimiter_Leases_FullMethodName] != 1 || len(seen) != 2 {
		t.Fatalf("interceptor saw %v; want 3 Check and 1 Leases", seen)
	}
}

// gate holds every check until open is closed, counting how many it holds
// at once.
type gate struct {
	Checker
	open chan struct{}

	mu        sync.Mutex
	now, most int
}

func (g *gate) Check(ctx context.Context, checks []forward.Check, out []forward.Result) error {
	g.mu.Lock()
	g.now++
	g.most = max(g.most, g.now)
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.now--
		g.mu.Unlock()
	}()
	select {
	case <-g.open:
	case <-ctx.Done():
		return ctx.Err()
	}
	return g.Checker.Check(ctx, checks, out)
}

// gatedStream is an env whose checks pass g, its gRPC client, and a
// Batches stream open on it for the test's time.
func gatedStream(t *testing.T) (*gate, *testEnv, pb.RateLimiterClient, pb.RateLimiter_BatchesClient) {
	t.Helper()
	g := &gate{open: make(chan struct{})}
	e := newTestEnv(t, func(c Checker) Checker { g.Checker = c; return g })
	c := e.startGRPC(t)
	return g, e, c, openStream(t, c)
}

func (g *gate) held() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.now
}

// TestGRPCBatchesBound: of 100 messages sent at once, the node decides at
// most MaxBatchesInFlight at a time; once they may go on, all 100 are
// answered.
func TestGRPCBatchesBound(t *testing.T) {
	g, _, _, st := gatedStream(t)
	const n = 100
	for i := range n {
		if err := st.Send(checkMsg(uint64(i+1), inlineCheck(fmt.Sprint("key-", i), 1))); err != nil {
			t.Fatal(err)
		}
	}
	if !testkit.Poll(waitFor, func() bool { return g.held() == MaxBatchesInFlight }) {
		t.Fatalf("%d checks held, want %d", g.held(), MaxBatchesInFlight)
	}
	close(g.open)
	got := recvAll(t, st, n)
	for id, r := range got {
		if r.GetCode() != 0 || !r.GetCheck().GetDecisions()[0].GetAllowed() {
			t.Fatalf("message %d: %v", id, r)
		}
	}
	if g.most != MaxBatchesInFlight {
		t.Fatalf("at most %d held at once, want %d", g.most, MaxBatchesInFlight)
	}
}

// TestGRPCBatchesDrain: DrainStreams answers the messages in flight, then
// a drain message; a message sent after it is still answered, and the
// stream ends once the client closes its side. A stream opened after it is
// drained at once.
func TestGRPCBatchesDrain(t *testing.T) {
	g, e, c, st := gatedStream(t)
	if err := st.Send(checkMsg(1, inlineCheck("d", 3))); err != nil {
		t.Fatal(err)
	}
	if !testkit.Poll(waitFor, func() bool { return g.held() == 1 }) {
		t.Fatal("the first message was not decided")
	}
	e.api.DrainStreams()
	close(g.open)
	r, err := st.Recv()
	if err != nil || r.GetId() != 1 || r.GetCheck().GetDecisions()[0].GetRemaining() != 2 {
		t.Fatalf("first answer: %v, %v; want id 1 with 2 left", r, err)
	}
	if r, err = st.Recv(); err != nil || !r.GetDrain() {
		t.Fatalf("second: %v, %v; want drain", r, err)
	}
	if err := st.Send(checkMsg(2, inlineCheck("d", 3))); err != nil {
		t.Fatal(err)
	}
	if r, err = st.Recv(); err != nil || r.GetId() != 2 || r.GetCheck().GetDecisions()[0].GetRemaining() != 1 {
		t.Fatalf("after the drain: %v, %v; want id 2 with 1 left", r, err)
	}
	closeStream(t, st)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	st2, err := c.Batches(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := st2.Recv(); err != nil || !r.GetDrain() {
		t.Fatalf("a new stream: %v, %v; want drain", r, err)
	}
	_ = st2.CloseSend()
	if _, err := st2.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("new stream after CloseSend: %v, want EOF", err)
	}
}

// TestGRPCBatchesReuse: with ReuseBatchResponses, the answers of 400
// check messages (1 to 9 checks each, on keys of their own with limits of
// their own, many decided at once) each carry their own decisions: the
// limit and what remains of each check's key, in order. An interceptor
// that keeps the responses it sees turns the reuse off for what it keeps:
// those still hold their decisions after the stream ended.
func TestGRPCBatchesReuse(t *testing.T) {
	for _, keep := range []bool{false, true} {
		t.Run(fmt.Sprintf("interceptor keeps responses %v", keep), func(t *testing.T) {
			e := newTestEnv(t, nil)
			e.api.reuseBatch = true
			var mu sync.Mutex
			kept := map[*pb.CheckResponse][]int64{} // response → limits it held when it was answered
			e.api.batchIntercept = func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
				out, err := h(ctx, req)
				if r, ok := out.(*pb.CheckResponse); ok && keep {
					// A copy that the stream does not know: the one it
					// made stays the interceptor's.
					c := &pb.CheckResponse{Decisions: r.GetDecisions(), RingVersion: r.GetRingVersion()}
					var limits []int64
					for _, d := range c.GetDecisions() {
						limits = append(limits, d.GetLimit())
					}
					mu.Lock()
					kept[c] = limits
					mu.Unlock()
					return c, err
				}
				return out, err
			}
			c := e.startGRPC(t)
			st := openStream(t, c)
			const msgs = 400
			go func() {
				for id := range uint64(msgs) {
					var checks []*pb.Check
					for j := range id%9 + 1 {
						checks = append(checks, inlineCheck(fmt.Sprintf("m%d-c%d", id, j), int64(100+id*10+j)))
					}
					if err := st.Send(checkMsg(id, checks...)); err != nil {
						return
					}
				}
			}()
			got := recvAll(t, st, msgs)
			for id := range uint64(msgs) {
				ds := got[id].GetCheck().GetDecisions()
				if got[id].GetCode() != 0 || uint64(len(ds)) != id%9+1 {
					t.Fatalf("message %d: code %d, %d decisions; want %d", id, got[id].GetCode(), len(ds), id%9+1)
				}
				for j, d := range ds {
					limit := int64(100 + id*10 + uint64(j))
					if !d.GetAllowed() || d.GetLimit() != limit || d.GetRemaining() != limit-1 {
						t.Fatalf("message %d, check %d: %v; want allowed, limit %d, %d remaining", id, j, d, limit, limit-1)
					}
				}
			}
			closeStream(t, st)
			mu.Lock()
			defer mu.Unlock()
			if keep && len(kept) != msgs {
				t.Fatalf("the interceptor kept %d responses, want %d", len(kept), msgs)
			}
			for r, limits := range kept {
				for j, d := range r.GetDecisions() {
					if d.GetLimit() != limits[j] {
						t.Fatalf("a kept response changed after it was sent: limit %d, was %d", d.GetLimit(), limits[j])
					}
				}
			}
		})
	}
}
