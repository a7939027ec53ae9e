package api

import (
	"context"
	"strconv"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/ringlimit/ringlimit/decide"
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
	benchRLS(b, s, context.Background())
}

// BenchmarkRLSHandlerCheckTimeout is BenchmarkRLSHandler with a server
// deadline (--check-timeout): a caller whose deadline is later, or who has
// none, gets the server's own (a timer); one whose deadline is sooner, as
// Envoy's filter always sets one, keeps its own. The deadlines are hours
// long so that no call of a long run finds them past.
func BenchmarkRLSHandlerCheckTimeout(b *testing.B) {
	for _, c := range []struct {
		name          string
		callerTimeout time.Duration // 0: no deadline
		checkTimeout  time.Duration
	}{
		{"no caller deadline", 0, 2 * time.Hour},
		{"caller deadline later", 3 * time.Hour, 2 * time.Hour},
		{"caller deadline sooner", time.Hour, 2 * time.Hour},
	} {
		b.Run(c.name, func(b *testing.B) {
			e, s := newRLSEnv(b, rlsBenchConfig, false)
			d, err := decide.New(decide.Config{Checker: e.router, Observer: e.api.m, CheckTimeout: c.checkTimeout})
			if err != nil {
				b.Fatal(err)
			}
			e.api.d = d
			ctx := context.Background()
			if c.callerTimeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, c.callerTimeout)
				defer cancel()
			}
			benchRLS(b, s, ctx)
		})
	}
}

// benchRLS runs ShouldRateLimit on s with ctx, over benchKeys users.
func benchRLS(b *testing.B, s *rlsServer, ctx context.Context) {
	wire := make([][]byte, benchKeys)
	for i := range wire {
		req := &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*rlcommon.RateLimitDescriptor{rlsDesc("user_id", "bench:"+strconv.Itoa(i))}}
		var err error
		if wire[i], err = proto.Marshal(req); err != nil {
			b.Fatal(err)
		}
	}
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
