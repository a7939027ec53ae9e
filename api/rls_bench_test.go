package api

import (
	"context"
	"strconv"
	"testing"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
)

// rlsBenchConfig is scripts/bench-rls.yaml's rule: nothing is refused.
const rlsBenchConfig = `domain: bench
descriptors:
  - key: user_id
    rate_limit: {unit: second, requests_per_unit: 1000000000}
`

// BenchmarkRLSHandler is the server's share of one ShouldRateLimit call
// without the network, as bench --proto rls sends it (one descriptor of one
// entry): the request decoded from its bytes, the handler (match, check on
// the local store, answer) and the answer encoded, as the gRPC codec does.
func BenchmarkRLSHandler(b *testing.B) {
	_, s := newRLSEnv(b, rlsBenchConfig, false)
	wire := make([][]byte, benchKeys)
	for i := range wire {
		req := &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*rlcommon.RateLimitDescriptor{rlsDesc("user_id", "bench:"+strconv.Itoa(i))}}
		var err error
		if wire[i], err = proto.Marshal(req); err != nil {
			b.Fatal(err)
		}
	}
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		req := new(rlsv3.RateLimitRequest)
		if err := proto.Unmarshal(wire[i%benchKeys], req); err != nil {
			b.Fatal(err)
		}
		resp, err := s.ShouldRateLimit(ctx, req)
		if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			b.Fatalf("call %d: %v, %v", i, resp, err)
		}
		if _, err := proto.Marshal(resp); err != nil {
			b.Fatal(err)
		}
	}
}
