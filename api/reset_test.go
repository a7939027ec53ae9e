package api

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
	"github.com/ringlimit/ringlimit/policy"
	pb "github.com/ringlimit/ringlimit/proto/ringlimitv1"
)

// syncBuffer is an audit log a test reads while handlers write it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// resetEnv is one node with the header policy, the admin token "ops"
// (testAdminToken), resets on its router and the audit log in audit.
type resetEnv struct {
	*testEnv
	s     *httpServer
	reg   *prometheus.Registry
	audit *syncBuffer
}

func newResetEnv(t *testing.T) *resetEnv {
	t.Helper()
	e := newTestEnv(t, nil)
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(headerPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	audit := &syncBuffer{}
	mgr, err := policy.NewManager(policy.ManagerConfig{Path: path, Clock: e.clock, Logger: slog.New(slog.DiscardHandler), AuditLog: audit})
	if err != nil {
		t.Fatal(err)
	}
	tokens := &Tokens{}
	tokens.Set([]Token{{Name: "ops", Token: testAdminToken}})
	reg := prometheus.NewRegistry()
	e.api, err = New(Config{Checker: e.router, Stats: e.store, Policy: mgr, Logger: slog.New(slog.DiscardHandler), AdminTokens: tokens,
		Registerer: reg, Gatherer: reg, Reset: e.router.Reset, Audit: mgr.Audit,
		AddOverride: func(_ context.Context, o policy.Override) (policy.Override, error) { return mgr.AddOverride(o) },
		RevokeOverride: func(_ context.Context, id, actor string) (policy.Override, error) {
			return mgr.RevokeOverride(id, actor)
		}})
	if err != nil {
		t.Fatal(err)
	}
	s := e.startHTTP(t)
	s.auth = "Bearer " + testAdminToken
	return &resetEnv{testEnv: e, s: s, reg: reg, audit: audit}
}

const tenKey = `"key":"user:1","limit":{"limit":10,"per":"1h"}`

// spend sends n checks of tenKey and returns the last answer.
func (e *resetEnv) spend(t *testing.T, n int) CheckResponse {
	t.Helper()
	var resp CheckResponse
	for range n {
		r := e.s.do(t, "POST", "/v1/check", "application/json", []byte(`{`+tenKey+`}`))
		resp = CheckResponse{}
		json.Unmarshal(r.body, &resp)
	}
	return resp
}

// A peek answers as the check would, status, body and headers, and spends
// nothing: 10 spends of 10, then 5 peeks (429, remaining 0, the check's
// headers), then a check still refused; a peek of a key never seen
// answers 200 with remaining 9 and creates no key. Peeks are counted in
// ringlimit_peeks_total, not in ringlimit_checks_total.
func TestHTTPPeek(t *testing.T) {
	e := newResetEnv(t)
	if r := e.spend(t, 10); !r.Allowed || r.Remaining != 0 {
		t.Fatalf("10th spend: %+v", r)
	}
	check := e.s.do(t, "POST", "/v1/check", "application/json", []byte(`{`+tenKey+`}`)) // refused: spends nothing
	if check.status != 429 {
		t.Fatalf("11th check: %d", check.status)
	}
	keys := e.store.Len()
	for i := range 5 {
		r := e.s.do(t, "POST", "/v1/check", "application/json", []byte(`{`+tenKey+`,"peek":true}`))
		if r.status != 429 || !bytes.Equal(r.body, check.body) {
			t.Fatalf("peek %d: %d %s; want the check's 429 %s", i, r.status, r.body, check.body)
		}
		for _, h := range []string{"Retry-After", "RateLimit", "RateLimit-Policy", "X-RateLimit-Remaining"} {
			if got, want := r.header.Get(h), check.header.Get(h); got != want {
				t.Fatalf("peek %d: %s %q, the check's %q", i, h, got, want)
			}
		}
	}
	l := bucket.MustLimit(bucket.TokenBucket, 10, time.Hour, 0)
	if _, used, _ := e.store.Used(bucket.InlineKey("user:1", &l), e.clock.Now()); used != 10 {
		t.Fatalf("used %d after the peeks, want 10", used)
	}
	r := e.s.do(t, "POST", "/v1/check", "application/json", []byte(`{"key":"fresh","limit":{"limit":10,"per":"1h"},"peek":true}`))
	var resp CheckResponse
	json.Unmarshal(r.body, &resp)
	if r.status != 200 || !resp.Allowed || resp.Remaining != 9 || e.store.Len() != keys {
		t.Fatalf("peek of a fresh key: %d %s, store %d keys (want 200, remaining 9, %d keys)", r.status, r.body, e.store.Len(), keys)
	}
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"ringlimit_peeks_total", []string{"result", "rejected"}, 5},
		{"ringlimit_peeks_total", []string{"result", "allowed"}, 1},
		{"ringlimit_checks_total", []string{"algorithm", "token_bucket", "result", "allowed"}, 10},
		{"ringlimit_checks_total", []string{"algorithm", "token_bucket", "result", "rejected"}, 1},
	} {
		if got := testkit.Metric(t, e.reg, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
}

// POST /v1/reset: no token 401, a wrong one 403, a bad body 400 naming
// the field: nothing reset, nothing audited. With the token: 200, the
// previous remaining, an audit line; the key is full again.
func TestHTTPReset(t *testing.T) {
	e := newResetEnv(t)
	e.spend(t, 7)
	body := []byte(`{` + tenKey + `}`)
	e.s.auth = ""
	if r := e.s.do(t, "POST", "/v1/reset", "application/json", body); r.status != 401 {
		t.Fatalf("no token: %d %s", r.status, r.body)
	}
	e.s.auth = "Bearer not-the-token-of-anyone"
	if r := e.s.do(t, "POST", "/v1/reset", "application/json", body); r.status != 403 {
		t.Fatalf("wrong token: %d %s", r.status, r.body)
	}
	e.s.auth = "Bearer " + testAdminToken
	for _, c := range []struct{ body, field string }{
		{`{"key":"user:1"}`, "limit: required"},
		{`{"key":"user:1","limit":{"limit":0,"per":"1h"}}`, "limit.limit"},
		{`{"key":"","limit":{"limit":10,"per":"1h"}}`, "key"},
		{`{"key":"user:1","limit":{"limit":10,"per":"1h"},"nope":1}`, "nope"},
		{`{"key":"user:1","limit":{"limit":10,"per":"1h"},"api_key":"k"}`, "limit: give either"},
		{`{"peek":"x"}`, "peek"},
	} {
		r := e.s.do(t, "POST", "/v1/reset", "application/json", []byte(c.body))
		if r.status != 400 || !strings.Contains(string(r.body), c.field) {
			t.Errorf("%s: %d %s; want 400 naming %s", c.body, r.status, r.body, c.field)
		}
	}
	if r := e.spend(t, 1); r.Remaining != 2 {
		t.Fatalf("after the refused resets: remaining %d, want 2 (nothing reset)", r.Remaining)
	}
	if a := e.audit.String(); strings.Contains(a, `"reset"`) {
		t.Fatalf("audited before any reset: %s", a)
	}
	r := e.s.do(t, "POST", "/v1/reset", "application/json", body)
	var resp ResetResponse
	if err := json.Unmarshal(r.body, &resp); err != nil || r.status != 200 {
		t.Fatalf("reset: %d %s", r.status, r.body)
	}
	if !resp.Reset || resp.PreviousRemaining != 2 || resp.Owner != "node-1" || len(resp.Layers) != 0 || len(resp.Unconfirmed) != 0 {
		t.Fatalf("reset: %+v; want reset, previous 2, owner node-1", resp)
	}
	line := e.audit.String()
	if !strings.Contains(line, `"actor":"ops"`) || !strings.Contains(line, `"action":"reset"`) || !strings.Contains(line, `user:1`) {
		t.Fatalf("audit log %q: want actor ops, action reset, the key", line)
	}
	if r := e.spend(t, 1); !r.Allowed || r.Remaining != 9 {
		t.Fatalf("check after the reset: %+v; want remaining 9", r)
	}
	// A policy request: every layer reset, the smallest previous first.
	for range 2 {
		e.s.do(t, "POST", "/v1/check", "application/json", []byte(`{"user":"42","ip":"192.0.2.1","route":"/login"}`))
	}
	r = e.s.do(t, "POST", "/v1/reset", "application/json", []byte(`{"user":"42","ip":"192.0.2.1","route":"/login"}`))
	resp = ResetResponse{}
	json.Unmarshal(r.body, &resp)
	want := []ResetLayer{{"route:/login", 0, "node-1"}, {"tier:free", 1, "node-1"}, {"global", 998, "node-1"}}
	if r.status != 200 || resp.PreviousRemaining != 0 || len(resp.Layers) != 3 || resp.Layers[0] != want[0] || resp.Layers[1] != want[1] || resp.Layers[2] != want[2] {
		t.Fatalf("policy reset: %d %s; want layers %+v", r.status, r.body, want)
	}
	for _, c := range []struct {
		result string
		want   float64
	}{{"reset", 2}, {"invalid", 6}, {"unauthorized", 2}} {
		if got := testkit.Metric(t, e.reg, "ringlimit_resets_total", "result", c.result); got != c.want {
			t.Errorf("ringlimit_resets_total{result=%q} = %v, want %v", c.result, got, c.want)
		}
	}
	if got := e.api.Activity().Resets; got != 2 {
		t.Errorf("Activity().Resets = %d, want 2 (the status page's count)", got)
	}
}

// The gRPC Reset: the admin token in the authorization metadata; no
// token, a wrong one or a bad request is not audited, a reset is one
// audit line (actor, action reset, the key), as over HTTP.
func TestGRPCReset(t *testing.T) {
	e := newResetEnv(t)
	c := e.startGRPC(t)
	e.spend(t, 4)
	req := &pb.ResetRequest{Check: &pb.Check{Key: "user:1", Limit: &pb.Limit{Limit: 10, PerMs: 3600_000}}}
	for _, tc := range []struct {
		auth string
		code codes.Code
	}{{"", codes.Unauthenticated}, {"Bearer wrong-token-wrong-token", codes.PermissionDenied}} {
		ctx := context.Background()
		if tc.auth != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", tc.auth)
		}
		if _, err := c.Reset(ctx, req); status.Code(err) != tc.code {
			t.Fatalf("auth %q: %v, want %v", tc.auth, err, tc.code)
		}
	}
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+testAdminToken)
	if _, err := c.Reset(ctx, &pb.ResetRequest{Check: &pb.Check{Key: "user:1"}}); status.Code(err) != codes.InvalidArgument ||
		!strings.Contains(err.Error(), "check.limit") {
		t.Fatalf("no limit: %v; want INVALID_ARGUMENT naming check.limit", err)
	}
	if a := e.audit.String(); strings.Contains(a, `"action":"reset"`) {
		t.Fatalf("audited before any reset: %s", a)
	}
	resp, err := c.Reset(ctx, req)
	if err != nil || !resp.GetReset_() || resp.GetPreviousRemaining() != 6 || resp.GetOwner() != "node-1" {
		t.Fatalf("reset: %v, %v; want previous 6", resp, err)
	}
	var resets []string
	for _, l := range strings.Split(e.audit.String(), "\n") {
		if strings.Contains(l, `"action":"reset"`) {
			resets = append(resets, l)
		}
	}
	if len(resets) != 1 || !strings.Contains(resets[0], `"actor":"ops"`) || !strings.Contains(resets[0], `user:1`) {
		t.Fatalf("audit lines of resets %q: want one, actor ops, the key", resets)
	}
	if r := e.spend(t, 1); r.Remaining != 9 {
		t.Fatalf("after the reset: remaining %d, want 9", r.Remaining)
	}
	// A peek through gRPC spends nothing.
	for range 3 {
		out, err := c.Check(context.Background(), &pb.CheckRequest{Checks: []*pb.Check{{Key: "user:1", Limit: &pb.Limit{Limit: 10, PerMs: 3600_000}, Peek: true}}})
		if err != nil || !out.GetDecisions()[0].GetAllowed() || out.GetDecisions()[0].GetRemaining() != 8 {
			t.Fatalf("gRPC peek: %v, %v; want allowed, remaining 8", out, err)
		}
	}
}

// FuzzResetBody: any body gets 200 or 400; a 400 resets nothing (the
// spent key keeps its spend) and audits nothing.
func FuzzResetBody(f *testing.F) {
	for _, b := range []string{
		`{` + tenKey + `}`, `{"key":"user:1"}`, `{}`, `null`, `{"user":"42"}`, `{"api_key":"k","route":"/login","peek":true}`,
		`{"key":"x","limit":{"limit":-1,"per":"1h"}}`, `{"key":"x","limit":{"limit":1,"per":"1h","algorithm":"nope"}}`, `{"cost":0}`, `[`,
	} {
		f.Add([]byte(b))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		e := newResetEnv(t)
		e.spend(t, 3)
		r := e.s.do(t, "POST", "/v1/reset", "application/json", b)
		switch r.status {
		case 200:
		case 400:
			if got := e.spend(t, 1); got.Remaining != 6 {
				t.Fatalf("%q: 400 %s, then remaining %d; want 6 (nothing reset)", b, r.body, got.Remaining)
			}
			if strings.Contains(e.audit.String(), `"reset"`) {
				t.Fatalf("%q: 400 but audited", b)
			}
		default:
			t.Fatalf("%q: %d %s", b, r.status, r.body)
		}
	})
}
