package api

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringlimit/ringlimit/policy"
)

// headerPolicy: a route limit on /login, a dry-run one on /export, two
// tiers and a global ceiling.
const headerPolicy = `
version: hdr
policies:
  api:
    default_tier: free
    tiers:
      free: { limit: 3, per: 1m, burst: 3 }
      gold: { limit: 100, per: 1s }
    routes:
      - match: /login
        limit: { limit: 2, per: 10s, key: ip+route }
      - match: /export
        limit: { limit: 1, per: 1h }
        dry_run: true
    global: { limit: 1000, per: 1h }
`

// testAdminToken is the admin token of newPolicyEnv, named "ops"; the
// httpServer newPolicyEnv returns sends it.
const testAdminToken = "s3cret-token-of-ops"

// newPolicyEnv is newTestEnv with a policy.Manager on the env's fake clock
// and POST and DELETE /v1/overrides going straight to it, with one admin
// token (testAdminToken, named "ops").
func newPolicyEnv(t *testing.T) (*testEnv, *httpServer, *policy.Manager) {
	t.Helper()
	e, s, mgr, _ := newPolicyEnvAudited(t, nil)
	return e, s, mgr
}

// newPolicyEnvAudited is newPolicyEnv with the Manager's audit log in audit
// and the admin tokens returned, to rotate.
func newPolicyEnvAudited(t *testing.T, audit io.Writer) (*testEnv, *httpServer, *policy.Manager, *Tokens) {
	t.Helper()
	e := newTestEnv(t, nil)
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(headerPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	mgr, err := policy.NewManager(policy.ManagerConfig{Path: path, Clock: e.clock, Logger: slog.New(slog.DiscardHandler), AuditLog: audit})
	if err != nil {
		t.Fatal(err)
	}
	tokens := &Tokens{}
	tokens.Set([]Token{{Name: "ops", Token: testAdminToken}})
	reg := prometheus.NewRegistry()
	e.api, err = New(Config{Checker: e.router, Policy: mgr, Logger: slog.New(slog.DiscardHandler), AdminTokens: tokens, Registerer: reg, Gatherer: reg,
		AddOverride: func(_ context.Context, o policy.Override) (policy.Override, error) { return mgr.AddOverride(o) },
		RevokeOverride: func(_ context.Context, id, actor string) (policy.Override, error) {
			return mgr.RevokeOverride(id, actor)
		}})
	if err != nil {
		t.Fatal(err)
	}
	s := e.startHTTP(t)
	s.auth = "Bearer " + testAdminToken
	return e, s, mgr, tokens
}

// A policy answer's headers: every enforced layer in RateLimit-Policy (a
// dry-run layer is not enforced), the tightest or rejecting one in
// RateLimit, Retry-After on a rejection.
func TestHTTPPolicyHeaders(t *testing.T) {
	_, s, _ := newPolicyEnv(t)
	const login = `"route:/login";q=2;w=10, "tier:free";q=3;w=60, "global";q=1000;w=3600`
	steps := []struct {
		req                                 string
		status                              int
		limit, remaining, policy, rateLimit string
		retryAfter                          string
	}{
		// /login: route 1 left (reset 5s), free 2 (20s), global 999 (3.6s).
		{`{"user":"42","ip":"192.0.2.1","route":"/login"}`, 200, "2", "1", login, `"route:/login";r=1;t=20`, ""},
		{`{"user":"42","ip":"192.0.2.1","route":"/login"}`, 200, "2", "0", login, `"route:/login";r=0;t=40`, ""},
		// The route layer rejects: a token of 2/10s is 5s away. The reset is
		// the free tier's after it admitted (3 spent: 60s), before the
		// refund of what it and the global layer spent.
		{`{"user":"42","ip":"192.0.2.1","route":"/login"}`, 429, "2", "0", login, `"route:/login";r=0;t=60`, "5"},
		// /export's dry-run layer is left out of RateLimit-Policy.
		{`{"user":"7","route":"/export"}`, 200, "3", "2", `"tier:free";q=3;w=60, "global";q=1000;w=3600`, `"tier:free";r=2;t=20`, ""},
	}
	for i, st := range steps {
		got := s.check(t, st.req)
		h := got.header
		if got.status != st.status || h.Get("X-RateLimit-Limit") != st.limit || h.Get("X-RateLimit-Remaining") != st.remaining ||
			h.Get("RateLimit-Policy") != st.policy || h.Get("RateLimit") != st.rateLimit || h.Get("Retry-After") != st.retryAfter {
			t.Errorf("step %d: POST /v1/check %s = %d\n  X-RateLimit-Limit %q, X-RateLimit-Remaining %q\n  RateLimit-Policy %q\n  RateLimit %q, Retry-After %q\nwant %d %q %q\n  %q\n  %q %q\nbody %s",
				i, st.req, got.status, h.Get("X-RateLimit-Limit"), h.Get("X-RateLimit-Remaining"), h.Get("RateLimit-Policy"),
				h.Get("RateLimit"), h.Get("Retry-After"), st.status, st.limit, st.remaining, st.policy, st.rateLimit, st.retryAfter, got.body)
		}
	}
}

// An override's expiry is stamped with the clock the Manager compares it
// with: on a fake clock far from the wall clock it expires exactly
// expires_in after the fake now, and only once the fake clock gets there.
func TestHTTPOverrideExpiryOnPolicyClock(t *testing.T) {
	e, s, mgr := newPolicyEnv(t)
	got := s.do(t, http.MethodPost, "/v1/overrides", "application/json",
		[]byte(`{"actor":"ops","reason":"incident","user":"42","tier":"gold","expires_in":"10m"}`))
	if got.status != http.StatusOK {
		t.Fatalf("POST /v1/overrides: %d %s", got.status, got.body)
	}
	var o policy.Override
	if err := json.Unmarshal(got.body, &o); err != nil {
		t.Fatal(err)
	}
	if want := t0.Add(10 * time.Minute).Time(); !o.Expires.Equal(want) || !o.Created.Equal(t0.Time()) {
		t.Fatalf("override created %v, expires %v; want %v and %v (the policy clock's now + 10m)", o.Created, o.Expires, t0.Time(), want)
	}
	scope := func() string {
		t.Helper()
		r := s.check(t, `{"user":"42"}`)
		return decodeMap(t, r.body)["scope"].(string)
	}
	if got := scope(); got != "override:tier:gold" {
		t.Fatalf("with the override: scope %q, want override:tier:gold", got)
	}
	e.clock.Advance(10*time.Minute - time.Nanosecond)
	if got := scope(); got != "override:tier:gold" {
		t.Fatalf("1ns before expiry: scope %q, want override:tier:gold", got)
	}
	e.clock.Advance(time.Nanosecond)
	if got := scope(); got != "tier:free" {
		t.Fatalf("at expiry: scope %q, want tier:free", got)
	}
	if n := len(mgr.Overrides()); n != 0 {
		t.Fatalf("%d overrides after expiry, want 0", n)
	}
}
