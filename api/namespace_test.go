package api

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/policy"
	pb "github.com/ringlimit/ringlimit/proto/ringlimitv1"
)

// flood is the limit of the refill attack: a million per millisecond.
const flood = `{"limit":1000000,"per":"1ms"}`

// admitted sends body n times and counts the 200s; every other answer
// must be a 429.
func admitted(t *testing.T, s *httpServer, body string, n int) int {
	t.Helper()
	ok := 0
	for range n {
		switch r := s.check(t, body); r.status {
		case http.StatusOK:
			ok++
		case http.StatusTooManyRequests:
		default:
			t.Fatalf("%s: %d %s", body, r.status, r.body)
		}
	}
	return ok
}

// TestInlineCannotRefillPolicy: an inline check whose key spells a policy
// layer's key (with or without its namespace tag) and a limit of a
// million per millisecond lands in a bucket of its own: the tier it aims
// at stays exhausted.
func TestInlineCannotRefillPolicy(t *testing.T) {
	e, s, _ := newPolicyEnv(t)
	user := `{"user":"u1"}`
	if n := admitted(t, s, user, 4); n != 3 {
		t.Fatalf("tier free (3/min): %d of 4 admitted, want 3", n)
	}
	for _, key := range []string{"api|tier:free|user:u1", "p|api|tier:free|user:u1", "p|api|global|all", "api|global|user:u1"} {
		if r := s.check(t, chk(key, "", flood)); r.status != http.StatusOK {
			t.Fatalf("inline %q: %d %s", key, r.status, r.body)
		}
	}
	e.clock.Advance(50 * time.Millisecond)
	if n := admitted(t, s, user, 3); n != 0 {
		t.Fatalf("after the inline checks: %d of 3 admitted, want 0", n)
	}
	if _, used, _ := e.store.Used("p|api|tier:free|user:u1", e.clock.Now()); used != 3 {
		t.Fatalf("the tier's bucket has used %d, want 3", used)
	}
}

// TestAlternatingLimitsNeverRefill: a check that names another limit for
// an inline key has a bucket of its own; going back finds the first one
// as it was left.
func TestAlternatingLimitsNeverRefill(t *testing.T) {
	e := newTestEnv(t, nil)
	s := e.startHTTP(t)
	for _, alg := range []string{"token_bucket", "leaky_bucket", "fixed_window", "sliding_window_log", "sliding_window_counter"} {
		key := "victim:" + alg
		victim := chk(key, "", `{"algorithm":"`+alg+`","limit":3,"per":"1h"}`)
		if n := admitted(t, s, victim, 4); n != 3 {
			t.Fatalf("%s 3/h: %d of 4 admitted, want 3", alg, n)
		}
		for range 3 {
			if n := admitted(t, s, chk(key, "", `{"algorithm":"`+alg+`","limit":100000,"per":"1ms"}`), 1); n != 1 {
				t.Fatalf("%s: the flood limit refused", alg)
			}
			e.clock.Advance(50 * time.Millisecond)
			if n := admitted(t, s, victim, 1); n != 0 {
				t.Fatalf("%s: the 3/h key admitted again after a check under another limit", alg)
			}
		}
	}
}

// TestInlineKeysNamespaced: what the store holds for an inline check, and
// what GET /v1/owner answers for its key.
func TestInlineKeysNamespaced(t *testing.T) {
	e := newTestEnv(t, nil)
	s := e.startHTTP(t)
	if r := s.check(t, chk("user:42", "2", `{"limit":10,"per":"1s","burst":50}`)); r.status != http.StatusOK {
		t.Fatalf("%d %s", r.status, r.body)
	}
	if _, used, ok := e.store.Used("i|tb:10:1s:50|user:42", e.clock.Now()); !ok || used != 2 {
		t.Fatalf("i|tb:10:1s:50|user:42: used %d, %v; want 2", used, ok)
	}
	if _, _, ok := e.store.Used("user:42", e.clock.Now()); ok {
		t.Fatal("the bare key is stored")
	}
	// The longest key a request may name still fits with its namespace.
	long := strings.Repeat("k", bucket.MaxKeyLen)
	if r := s.check(t, chk(long, "", `{"algorithm":"sliding_window_counter","limit":2147483647,"per":"8783h59m59.999999999s"}`)); r.status != http.StatusOK {
		t.Fatalf("a key of %d bytes: %d %s", len(long), r.status, r.body)
	}
	if r := s.check(t, chk(long+"k", "", `{"limit":1,"per":"1s"}`)); r.status != http.StatusBadRequest {
		t.Fatalf("a key of %d bytes: %d %s", len(long)+1, r.status, r.body)
	}
}

// TestInlineLimitsDisabled: --inline-limits=false refuses inline limits
// on HTTP (400 INLINE_LIMITS_DISABLED) and gRPC (INVALID_ARGUMENT), spends
// nothing, and keeps serving policy requests.
func TestInlineLimitsDisabled(t *testing.T) {
	e, s, mgr := newPolicyEnv(t)
	var err error
	e.api, err = New(Config{Checker: e.router, Policy: mgr, Logger: slog.New(slog.DiscardHandler), DisableInlineLimits: true,
		AddOverride:    func(context.Context, policy.Override) (policy.Override, error) { return policy.Override{}, nil },
		RevokeOverride: func(context.Context, string, string) (policy.Override, error) { return policy.Override{}, nil }})
	if err != nil {
		t.Fatal(err)
	}
	s = e.startHTTP(t)
	r := s.check(t, chk("user:1", "", `{"limit":5,"per":"1s"}`))
	var body ErrorResponse
	if err := json.Unmarshal(r.body, &body); err != nil || r.status != http.StatusBadRequest || body.Code != CodeInlineLimitsDisabled || !strings.Contains(body.Message, "--inline-limits=false") {
		t.Fatalf("inline check: %d %s, want 400 %s", r.status, r.body, CodeInlineLimitsDisabled)
	}
	if r := s.check(t, `{"user":"u1"}`); r.status != http.StatusOK {
		t.Fatalf("policy request: %d %s", r.status, r.body)
	}
	c := e.startGRPC(t)
	_, err = grpcCheck(t, c, batch(pbCheck("user:1", nil, pb.Algorithm_TOKEN_BUCKET, 5, 1000, 0)))
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), CodeInlineLimitsDisabled) {
		t.Fatalf("gRPC inline check: %v, want InvalidArgument %s", err, CodeInlineLimitsDisabled)
	}
	resp, err := grpcCheck(t, c, &pb.CheckRequest{Checks: []*pb.Check{{Request: &pb.PolicyRequest{User: "u2"}}}})
	if err != nil || !resp.GetDecisions()[0].GetAllowed() {
		t.Fatalf("gRPC policy request: %v, %v", resp, err)
	}
	if _, _, ok := e.store.Used(bucket.InlineKey("user:1", ptr(bucket.MustLimit(bucket.TokenBucket, 5, time.Second, 0))), e.clock.Now()); ok {
		t.Fatal("a refused inline check created its key")
	}
}

func ptr[T any](v T) *T { return &v }

// TestRLSOverrideCannotRefill: a descriptor carrying its own limit counts
// in a bucket of its own: the configured rule it shares entries with stays
// over its limit, however often the override is sent.
func TestRLSOverrideCannotRefill(t *testing.T) {
	e, s := newRLSEnv(t, rlsUnitConfig, false)
	req := &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*rlcommon.RateLimitDescriptor{rlsDesc("user_id", "a")}}
	over := 0
	for range 4 {
		if should(t, s, req).GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
			over++
		}
	}
	if over != 1 {
		t.Fatalf("3/min: %d of 4 over the limit, want 1", over)
	}
	o := rlsDesc("user_id", "a")
	o.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1000, Unit: typev3.RateLimitUnit_SECOND}
	for range 3 {
		if r := should(t, s, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*rlcommon.RateLimitDescriptor{o}}); r.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			t.Fatalf("the override: %v", r)
		}
		e.clock.Advance(1100 * time.Millisecond)
		if r := should(t, s, req); r.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("the configured descriptor after an override: %v, want OVER_LIMIT", r)
		}
	}
}

// TestRLSOverrideEnforcedAsAnswered: an override of 4,294,967,295 per
// unit is counted as that: the answer's limit and remaining agree with
// the bucket.
func TestRLSOverrideEnforcedAsAnswered(t *testing.T) {
	e, s := newRLSEnv(t, rlsUnitConfig, false)
	o := rlsDesc("big", "x")
	o.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1<<32 - 1, Unit: typev3.RateLimitUnit_HOUR}
	req := &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*rlcommon.RateLimitDescriptor{o}, HitsAddend: 1<<31 + 5}
	r := should(t, s, req)
	st := r.GetStatuses()[0]
	if r.GetOverallCode() != rlsv3.RateLimitResponse_OK || st.GetCurrentLimit().GetRequestsPerUnit() != 1<<32-1 || st.GetLimitRemaining() != 1<<32-1-(1<<31+5) {
		t.Fatalf("hits 2^31+5 of 2^32-1: %v", r)
	}
	req.HitsAddend = 1<<31 - 6
	if r := should(t, s, req); r.GetOverallCode() != rlsv3.RateLimitResponse_OK || r.GetStatuses()[0].GetLimitRemaining() != 0 {
		t.Fatalf("the rest of the window: %v", r)
	}
	req.HitsAddend = 1
	if r := should(t, s, req); r.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("one more: %v, want OVER_LIMIT", r)
	}
	key := bucket.NamespaceRLSOverride + "fw:4294967295:1h0m0s:4294967295|d|big=x"
	if _, used, _ := e.store.Used(key, e.clock.Now()); used != 1<<32-1 {
		t.Fatalf("%s: used %d", key, used)
	}
}
