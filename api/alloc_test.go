//go:build !race

// The race detector makes sync.Pool drop items at random, so allocation
// counts are only exact without it.

package api

import (
	"context"
	"testing"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

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

// The rate limit service's answer to a request of one descriptor is one
// allocation (response, status, current limit and time to reset together);
// what else the handler allocates is the descriptor's bucket key (the
// rule's match). The scope of its decision counter is the pooled plan's,
// and the counters' series are found without allocating.
// (Decoding and encoding, grpc-go's codec's part, are not counted here.)
func TestRLSHandlerAllocations(t *testing.T) {
	_, s := newRLSEnv(t, rlsBenchConfig, false)
	ctx := context.Background()
	req := &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*rlcommon.RateLimitDescriptor{rlsDesc("user_id", "alloc")}}
	call := func() {
		resp, err := s.ShouldRateLimit(ctx, req)
		if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() != 1_000_000_000 ||
			resp.GetStatuses()[0].GetDurationUntilReset().AsDuration() <= 0 {
			t.Fatalf("%v, %v", resp, err)
		}
	}
	call() // the key exists, the pooled plan has grown
	if a := testing.AllocsPerRun(500, call); a != 2 {
		t.Fatalf("allocations per ShouldRateLimit of one descriptor: %v, want 2 (the answer, the bucket key)", a)
	}
}
