package api

import (
	"encoding/json"
	"net/http"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/policy"
	pb "github.com/ringlimit/ringlimit/proto/ringlimitv1"
	"github.com/ringlimit/ringlimit/rls"
)

// Every surface that takes a limit from a user parses it with bucket.LimitSpec:
// the same bad limit is refused with the same message through an inline
// check over HTTP and gRPC, a policy file, an override and an RLS file,
// each with its own location in front (the field's path or line, and the
// field under the name that input gives it).
func TestLimitSpecErrorsAgree(t *testing.T) {
	const (
		onHTTP = 1 << iota
		onGRPC
		onPolicy
		onOverride
		onRLS
	)
	cases := []struct {
		name string
		// The limit as JSON (HTTP, the policy file as YAML flow, the
		// override) and as the other inputs spell it.
		json  string
		grpc  *pb.Limit
		rls   string // the rate_limit mapping
		field string // the field under bucket.LimitSpec's name
		msg   string
		on    int
	}{
		{name: "unknown algorithm", json: `{"algorithm":"gcra","limit":5,"per":"1s"}`,
			rls:   `{unit: second, requests_per_unit: 5, algorithm: gcra}`,
			field: "algorithm", msg: `unknown algorithm "gcra" (want one of token_bucket, leaky_bucket, fixed_window, sliding_window_log, sliding_window_counter, concurrency)`,
			on: onHTTP | onPolicy | onOverride | onRLS},
		{name: "zero limit", json: `{"limit":0,"per":"1s"}`, grpc: &pb.Limit{Limit: 0, PerMs: 1000},
			field: "limit", msg: "must be at least 1, got 0",
			on: onHTTP | onGRPC | onPolicy | onOverride},
		{name: "log too long", json: `{"algorithm":"sliding_window_log","limit":200000,"per":"1s"}`,
			grpc:  &pb.Limit{Algorithm: pb.Algorithm_SLIDING_WINDOW_LOG, Limit: 200000, PerMs: 1000},
			rls:   `{unit: second, requests_per_unit: 200000, algorithm: sliding_window_log}`,
			field: "limit", msg: "must be at most 100000 with sliding_window_log, got 200000",
			on: onHTTP | onGRPC | onPolicy | onOverride | onRLS},
		{name: "bucket count too large", json: `{"algorithm":"token_bucket","limit":3000000000,"per":"1s"}`,
			grpc:  &pb.Limit{Algorithm: pb.Algorithm_TOKEN_BUCKET, Limit: 3000000000, PerMs: 1000},
			rls:   `{unit: second, requests_per_unit: 3000000000, algorithm: token_bucket}`,
			field: "limit", msg: "must be at most 2147483647 with token_bucket, got 3000000000",
			on: onHTTP | onGRPC | onPolicy | onOverride | onRLS},
		{name: "negative per", json: `{"limit":5,"per":"-1s"}`, grpc: &pb.Limit{Limit: 5, PerMs: -1000},
			field: "per", msg: "must be between 1ms and 8784h0m0s, got -1s",
			on: onHTTP | onGRPC | onPolicy | onOverride},
		{name: "per above 366 days", json: `{"limit":5,"per":"8784h0m0.001s"}`, grpc: &pb.Limit{Limit: 5, PerMs: 366*24*3600*1000 + 1},
			field: "per", msg: "must be between 1ms and 8784h0m0s, got 8784h0m0.001s",
			on: onHTTP | onGRPC | onPolicy | onOverride},
		{name: "per without a unit", json: `{"limit":5,"per":"10"}`,
			field: "per", msg: `"10" is not a duration (try 10s)`,
			on: onHTTP | onPolicy | onOverride},
		{name: "negative burst", json: `{"limit":5,"per":"1s","burst":-1}`, grpc: &pb.Limit{Limit: 5, PerMs: 1000, Burst: -1},
			field: "burst", msg: "must be at least 1, got -1",
			on: onHTTP | onGRPC | onPolicy | onOverride},
		{name: "lease of a window", json: `{"algorithm":"sliding_window_log","limit":5,"per":"1s","lease":true}`,
			grpc:  &pb.Limit{Algorithm: pb.Algorithm_SLIDING_WINDOW_LOG, Limit: 5, PerMs: 1000, Lease: true},
			field: "lease", msg: "only the token bucket can lease, not sliding_window_log",
			on: onHTTP | onGRPC | onPolicy},
		{name: "unknown failure mode", json: `{"limit":5,"per":"1s","failure_mode":"fail_maybe"}`,
			field: "failure_mode", msg: `want local, fail_open or fail_closed, got "fail_maybe"`,
			on: onHTTP | onPolicy},
		{name: "sync replication of a lease", json: `{"limit":5,"per":"1s","lease":true,"replication":"sync"}`,
			field: "replication", msg: "sync cannot be leased (an entry node admits from a lease before the owner's replica has it)",
			on: onHTTP | onPolicy},
	}
	_, s, _ := newPolicyEnv(t)
	e := newTestEnv(t, nil)
	g := e.startGRPC(t)
	rlsField := map[string]string{"algorithm": "algorithm", "limit": "requests_per_unit", "per": "unit"}
	for _, c := range cases {
		tail := c.field + ": " + c.msg
		if c.on&onHTTP != 0 {
			got := s.check(t, chk("k", "", c.json))
			var body ErrorResponse
			if err := json.Unmarshal(got.body, &body); err != nil || got.status != http.StatusBadRequest || body.Message != "limit."+tail {
				t.Errorf("%s: HTTP: %d %s, want 400 with message %q", c.name, got.status, got.body, "limit."+tail)
			}
		}
		if c.on&onGRPC != 0 {
			field := c.field
			if field == "per" {
				field = "per_ms"
			}
			want := "checks[0].limit." + field + ": " + c.msg
			_, err := grpcCheck(t, g, batch(&pb.Check{Key: "k", Limit: c.grpc}))
			if st, _ := status.FromError(err); st.Code() != codes.InvalidArgument || st.Message() != want {
				t.Errorf("%s: gRPC: %v, want InvalidArgument %q", c.name, err, want)
			}
		}
		if c.on&onPolicy != 0 {
			file := "policies:\n  api:\n    tiers:\n      free: " + c.json + "\n"
			want := "policy: t.yaml: policies.api.tiers.free." + tail
			if _, err := policy.Parse([]byte(file), "t.yaml"); err == nil || err.Error() != want {
				t.Errorf("%s: policy file: %v, want %q", c.name, err, want)
			}
		}
		if c.on&onOverride != 0 {
			got := s.do(t, http.MethodPost, "/v1/overrides", "application/json",
				[]byte(`{"reason":"r","user":"u","expires_in":"10m","limit":`+c.json+`}`))
			want := "policy: invalid request: limit." + tail
			var body ErrorResponse
			if err := json.Unmarshal(got.body, &body); err != nil || got.status != http.StatusBadRequest || body.Message != want {
				t.Errorf("%s: override: %d %s, want 400 with message %q", c.name, got.status, got.body, want)
			}
		}
		if c.on&onRLS != 0 {
			file := "domain: d\ndescriptors:\n  - key: a\n    rate_limit: " + c.rls + "\n"
			want := "rls: f.yaml:4: " + rlsField[c.field] + ": " + c.msg
			if _, err := rls.Parse([]rls.File{{Name: "f.yaml", Data: []byte(file)}}); err == nil || err.Error() != want {
				t.Errorf("%s: RLS file: %v, want %q", c.name, err, want)
			}
		}
	}
	// Every field of the spec is covered.
	seen := map[string]bool{}
	for _, c := range cases {
		seen[c.field] = true
	}
	if len(seen) != 7 {
		t.Errorf("cases cover the fields %v, want the 7 of bucket.LimitSpec", seen)
	}
}
