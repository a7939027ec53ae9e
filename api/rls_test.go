package api

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ringlimit/ringlimit/rls"
)

const rlsUnitConfig = `domain: d
descriptors:
  - key: user_id
    rate_limit: {unit: minute, requests_per_unit: 3, name: per_user}
  - key: plan
    value: gold
    rate_limit:
      unit: minute
      requests_per_unit: 100
      replaces: [{name: per_user}]
  - key: blocked
    rate_limit: {unit: minute, requests_per_unit: 0}
`

// newRLSEnv is a one-node API serving the rate limit service with conf.
func newRLSEnv(t testing.TB, conf string, headers bool) (*testEnv, *rlsServer) {
	t.Helper()
	c, err := rls.Parse([]rls.File{{Name: "d.yaml", Data: []byte(conf)}})
	if err != nil {
		t.Fatal(err)
	}
	e := newTestEnv(t, nil)
	reg := prometheus.NewRegistry()
	m, err := newRLSMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	st, err := newRLSStats(reg, DefaultRLSStatKeys, DefaultRLSNearLimitRatio, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return e, &rlsServer{api: e.api, config: func() RLSMatcher { return c }, headers: headers, m: m, stats: st}
}

func rlsDesc(kv ...string) *rlcommon.RateLimitDescriptor {
	d := &rlcommon.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func should(t *testing.T, s *rlsServer, req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	t.Helper()
	r, err := s.ShouldRateLimit(context.Background(), req)
	if err != nil {
		t.Fatalf("%v: %v", req, err)
	}
	return r
}

// TestRLSWindowAndReset: the default fixed window holds requests_per_unit
// per unit, cut from the Unix epoch as envoyproxy/ratelimit cuts it, and
// duration_until_reset is the exact rest of the window.
func TestRLSWindowAndReset(t *testing.T) {
	e, s := newRLSEnv(t, rlsUnitConfig, true)
	e.clock.Advance(15 * time.Second) // 10:04:15
	req := &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*rlcommon.RateLimitDescriptor{rlsDesc("user_id", "a")}}
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		r := should(t, s, req)
		st := r.GetStatuses()[0]
		if r.GetOverallCode() != want || st.GetDurationUntilReset().AsDuration() != 45*time.Second || st.GetCurrentLimit().GetName() != "per_user" {
			t.Fatalf("call %d: %v, want %v with 45s until the reset", i+1, r, want)
		}
		if i == 3 {
			hs := r.GetResponseHeadersToAdd()
			if len(hs) != 3 || hs[0].GetValue() != "3" || hs[1].GetValue() != "0" || hs[2].GetKey() != "RateLimit-Reset" || hs[2].GetValue() != "45" {
				t.Fatalf("headers %v", hs)
			}
		}
	}
	e.clock.Advance(45 * time.Second) // 10:05:00, a new window
	if r := should(t, s, req); r.GetOverallCode() != rlsv3.RateLimitResponse_OK || r.GetStatuses()[0].GetLimitRemaining() != 2 {
		t.Fatalf("in the next window: %v", r)
	}
}

// Each descriptor of a request has its own status, current limit and time
// to reset, whether the request carries one descriptor, a few or more
// than the handler keeps on its stack (4); a descriptor no rule matches
// has neither limit nor reset.
func TestRLSStatusesByCount(t *testing.T) {
	_, s := newRLSEnv(t, rlsUnitConfig, false)
	for _, n := range []int{1, 3, 4, 5, 9} {
		req := &rlsv3.RateLimitRequest{Domain: "d"}
		for i := range n {
			req.Descriptors = append(req.Descriptors, rlsDesc("user_id", fmt.Sprint(n, "-", i)))
		}
		req.Descriptors = append(req.Descriptors, rlsDesc("unknown", "x"))
		for call := 1; call <= 4; call++ {
			r := should(t, s, req)
			sts := r.GetStatuses()
			if len(sts) != n+1 || (call <= 3) != (r.GetOverallCode() == rlsv3.RateLimitResponse_OK) {
				t.Fatalf("%d descriptors, call %d: %v", n, call, r)
			}
			for i, st := range sts[:n] {
				want := rlsv3.RateLimitResponse_OK
				if call > 3 {
					want = rlsv3.RateLimitResponse_OVER_LIMIT
				}
				if st.GetCode() != want || st.GetLimitRemaining() != uint32(max(3-call, 0)) || st.GetCurrentLimit().GetRequestsPerUnit() != 3 ||
					st.GetCurrentLimit().GetName() != "per_user" || st.GetCurrentLimit().GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE ||
					st.GetDurationUntilReset().AsDuration() <= 0 || st.GetDurationUntilReset().AsDuration() > time.Minute {
					t.Fatalf("%d descriptors, call %d, status %d: %v", n, call, i, st)
				}
			}
			if last := sts[n]; last.GetCode() != rlsv3.RateLimitResponse_OK || last.GetCurrentLimit() != nil || last.GetDurationUntilReset() != nil {
				t.Fatalf("%d descriptors, call %d, the unmatched one: %v", n, call, last)
			}
		}
	}
}

// TestRLSSemantics: replaces, a limit of 0, hits above the limit, hits 0,
// the request's own limit override, no headers unless asked.
func TestRLSSemantics(t *testing.T) {
	e, s := newRLSEnv(t, rlsUnitConfig, false)
	// A gold plan replaces the per-user limit in the same request.
	both := &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*rlcommon.RateLimitDescriptor{rlsDesc("user_id", "g"), rlsDesc("plan", "gold")}}
	for i := range 5 {
		r := should(t, s, both)
		if r.GetOverallCode() != rlsv3.RateLimitResponse_OK || r.GetStatuses()[0].GetCurrentLimit() != nil ||
			r.GetStatuses()[1].GetLimitRemaining() != uint32(99-i) || len(r.GetResponseHeadersToAdd()) != 0 {
			t.Fatalf("call %d with the gold plan: %v", i+1, r)
		}
	}
	// requests_per_unit 0 refuses everything.
	if r := should(t, s, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*rlcommon.RateLimitDescriptor{rlsDesc("blocked", "x")}}); r.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("blocked: %v", r)
	}
	// More hits than the limit holds: refused, and nothing spent.
	big := &rlsv3.RateLimitRequest{Domain: "d", HitsAddend: 4, Descriptors: []*rlcommon.RateLimitDescriptor{rlsDesc("user_id", "h")}}
	if r := should(t, s, big); r.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("4 hits of 3: %v", r)
	}
	// A descriptor's hits_addend 0 checks without counting.
	zero := rlsDesc("user_id", "h")
	zero.HitsAddend = wrapperspb.UInt64(0)
	if r := should(t, s, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*rlcommon.RateLimitDescriptor{zero}}); r.GetOverallCode() != rlsv3.RateLimitResponse_OK || r.GetStatuses()[0].GetLimitRemaining() != 3 {
		t.Fatalf("0 hits: %v", r)
	}
	if r := should(t, s, &rlsv3.RateLimitRequest{Domain: "d", HitsAddend: 3, Descriptors: []*rlcommon.RateLimitDescriptor{rlsDesc("user_id", "h")}}); r.GetOverallCode() != rlsv3.RateLimitResponse_OK || r.GetStatuses()[0].GetLimitRemaining() != 0 {
		t.Fatalf("3 hits after the refused 4: %v", r)
	}
	// The request's own limit: 2 a second on a key no rule names.
	own := rlsDesc("tenant", "t")
	own.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: typev3.RateLimitUnit_SECOND}
	req := &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*rlcommon.RateLimitDescriptor{own}}
	var codes []rlsv3.RateLimitResponse_Code
	for range 3 {
		codes = append(codes, should(t, s, req).GetOverallCode())
	}
	e.clock.Advance(time.Second)
	codes = append(codes, should(t, s, req).GetOverallCode())
	want := []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT, rlsv3.RateLimitResponse_OK}
	for i := range want {
		if codes[i] != want[i] {
			t.Fatalf("the request's limit of 2 a second: %v, want %v", codes, want)
		}
	}
}
