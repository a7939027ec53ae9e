//go:build !race

package peer

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
	peerv1 "github.com/ringlimit/ringlimit/proto/peerv1"
)

// replicaCounter takes every replicated state, keeping only their count.
type replicaCounter struct {
	nopHandler
	taken int
}

func (h *replicaCounter) Replicate(_ string, states []State) (int, error) {
	h.taken += len(states)
	return len(states), nil
}

// A Replicate call read by hand allocates no more under a unary
// interceptor than without one: the request comes from the pool either
// way, as a node's peer server runs the metrics' interceptor on every call.
// (Not under the race detector, whose pools drop entries at random.)
func TestReplicateHandlerPooledUnderInterceptor(t *testing.T) {
	h := &replicaCounter{}
	s, err := NewServer(ServerConfig{Self: "B", Handler: h, Clock: testkit.NewClock(0)})
	if err != nil {
		t.Fatal(err)
	}
	l := bucket.MustLimit(bucket.FixedWindow, 1_000_000_000, time.Second, 0)
	states := make([]State, 64)
	for i := range states {
		states[i] = State{Key: fmt.Sprint("replicated-", i), Limit: l, Used: int64(i + 1), Window: 1}
	}
	in := mem.BufferSlice{mem.SliceBuffer(EncodeStates(nil, "A", states))}
	dec := func(m any) error { return peerCodec{}.Unmarshal(in, m) }
	intercepted := 0
	icpt := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
		if info.FullMethod != peerv1.Peer_Replicate_FullMethodName || info.Server != s {
			t.Fatalf("the interceptor was told %q on %v", info.FullMethod, info.Server)
		}
		intercepted++
		return next(ctx, req)
	}
	call := func(interceptor grpc.UnaryServerInterceptor) func() {
		return func() {
			resp, err := replicateHandler(s, context.Background(), dec, interceptor)
			if err != nil || resp.(*replicateAck).accepted != 64 {
				t.Fatalf("Replicate: %v, %v; want 64 states accepted", resp, err)
			}
		}
	}
	plain, withInterceptor := call(nil), call(icpt)
	plain() // the pooled request's buffers have grown to the call
	withInterceptor()
	a0, a1 := testing.AllocsPerRun(100, plain), testing.AllocsPerRun(100, withInterceptor)
	t.Logf("allocations per Replicate call of 64 states: %v without an interceptor, %v with one", a0, a1)
	if a1 != a0 || a0 > 2 {
		t.Fatalf("allocations per Replicate call of 64 states: %v with an interceptor, %v without; want the same, at most 2 (the sender's name, the answer)", a1, a0)
	}
	// AllocsPerRun runs each once more than asked, to warm up.
	if intercepted != 102 || h.taken != 64*(1+1+101+101) {
		t.Fatalf("the interceptor ran %d times and %d states were taken; want 102 and %d", intercepted, h.taken, 64*204)
	}
}
