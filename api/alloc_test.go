//go:build !race

// The race detector makes sync.Pool drop items at random, so allocation
// counts are only exact without it.

package api

import (
	"context"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/internal/deadline"
	pb "github.com/ringlimit/ringlimit/proto/ringlimitv1"
)

// The gRPC handler allocates per request (the response it returns), and
// per inline check only its key in the inline namespace (bucket.InlineKey).
// (Decoding the request, which grpc-go's protobuf codec does before the
// handler runs, is not counted here.)
func TestGRPCHandlerAllocations(t *testing.T) {
	e := newTestEnv(t, nil)
	g := &grpcServer{api: e.api}
	ctx := context.Background()
	run := func(req *pb.CheckRequest) func() {
		return func() {
			resp, err := g.Check(ctx, req)
			if err != nil || len(resp.GetDecisions()) != len(req.GetChecks()) || !resp.GetDecisions()[0].GetAllowed() {
				t.Fatalf("%v, %v", resp, err)
			}
		}
	}
	one, sixteen := run(benchRequests(1, 1)[0]), run(benchRequests(1, 16)[0])
	sixteen() // the keys exist, the pooled plan has grown
	a1, a16 := testing.AllocsPerRun(500, one), testing.AllocsPerRun(500, sixteen)
	if a1 != 3+1 || a16 != 3+16 {
		t.Fatalf("allocations per request: %v with 1 check, %v with 16; want 4 and 19 (the response, its decisions and their pointers; each check's namespaced key)", a1, a16)
	}
}

// TestBoundedDeadline: a request's checks run under the server's deadline
// (CheckTimeout) unless the caller's ends sooner, which then stands as is
// and costs no allocation.
func TestBoundedDeadline(t *testing.T) {
	a := &API{deadlines: deadline.New(2 * time.Second)}
	start := time.Now()
	ctx := a.bounded(context.Background())
	d, ok := ctx.Deadline()
	// A 64th of the timeout is the tick its deadline is rounded up to.
	if left := d.Sub(start); !ok || left < 2*time.Second || left > 2*time.Second+2*time.Second/64 {
		t.Errorf("no caller deadline: deadline in %v (%v), want from 2s to 2s and a 64th", left, ok)
	}
	later, cancelLater := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelLater()
	ctx = a.bounded(later)
	d, _ = ctx.Deadline()
	if left := time.Until(d); ctx == later || left > 2*time.Second+2*time.Second/64 {
		t.Errorf("caller deadline in 10s: deadline in %v, want within 2s and a 64th", left)
	}
	sooner, cancelSooner := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancelSooner()
	if ctx := a.bounded(sooner); ctx != sooner {
		t.Error("caller deadline in 50ms: wrapped, want the caller's context as is")
	}
	if allocs := testing.AllocsPerRun(100, func() { a.bounded(sooner) }); allocs != 0 {
		t.Errorf("caller deadline sooner: %v allocations, want 0", allocs)
	}
	// No deadline of the caller's: one allocation, the context itself;
	// the timer is the tick's.
	if allocs := testing.AllocsPerRun(100, func() { a.bounded(later) }); allocs > 1 {
		t.Errorf("caller deadline later: %v allocations, want at most 1", allocs)
	}
	off := &API{}
	if ctx := off.bounded(later); ctx != later {
		t.Error("CheckTimeout 0: wrapped, want the caller's context as is")
	}
}
