package api

import (
	"testing"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// A descriptor whose own hits_addend is 0 peeks at one unit: OK with what
// remains while at least one does, OVER_LIMIT once none does, and spends
// nothing either way (3 a minute: 3, 2 after one hit, 0 after three); a
// request-level hits_addend of 0 still means 1.
func TestRLSHitsZeroPeeks(t *testing.T) {
	_, s := newRLSEnv(t, rlsUnitConfig, false)
	zero := rlsDesc("user_id", "p")
	zero.HitsAddend = wrapperspb.UInt64(0)
	peekReq := &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*rlcommon.RateLimitDescriptor{zero}}
	hit := &rlsv3.RateLimitRequest{Domain: "d", HitsAddend: 0, Descriptors: []*rlcommon.RateLimitDescriptor{rlsDesc("user_id", "p")}}
	expect := func(step string, r *rlsv3.RateLimitResponse, code rlsv3.RateLimitResponse_Code, remaining uint32) {
		t.Helper()
		if r.GetOverallCode() != code || r.GetStatuses()[0].GetLimitRemaining() != remaining {
			t.Fatalf("%s: %v, want %v with %d remaining", step, r, code, remaining)
		}
	}
	for range 3 {
		expect("peek of a fresh key", should(t, s, peekReq), rlsv3.RateLimitResponse_OK, 3)
	}
	expect("one hit (request hits_addend 0 means 1)", should(t, s, hit), rlsv3.RateLimitResponse_OK, 2)
	for range 3 {
		expect("peek after one hit", should(t, s, peekReq), rlsv3.RateLimitResponse_OK, 2)
	}
	expect("second hit", should(t, s, hit), rlsv3.RateLimitResponse_OK, 1)
	expect("third hit", should(t, s, hit), rlsv3.RateLimitResponse_OK, 0)
	for range 3 {
		expect("peek after exhaustion", should(t, s, peekReq), rlsv3.RateLimitResponse_OVER_LIMIT, 0)
	}
	expect("a hit after the peeks", should(t, s, hit), rlsv3.RateLimitResponse_OVER_LIMIT, 0)
	// requests_per_unit 0: over, with or without hits.
	blocked := rlsDesc("blocked", "x")
	blocked.HitsAddend = wrapperspb.UInt64(0)
	expect("peek of a blocked key", should(t, s, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*rlcommon.RateLimitDescriptor{blocked}}),
		rlsv3.RateLimitResponse_OVER_LIMIT, 0)
}
