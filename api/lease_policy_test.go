package api

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/policy"
	pb "github.com/ringlimit/ringlimit/proto/ringlimitv1"
)

// exportPolicy: /export holds at most 1 request in flight per caller for
// 10s, under a tier of 100 a minute.
const exportPolicy = `
version: export
policies:
  default:
    default_tier: free
    tiers:
      free: { limit: 100, per: 1m }
    routes:
      - match: /export
        limit: { algorithm: concurrency, limit: 1, key: identity+route, lease_ttl: 10s, max_lease_ttl: 20s }
`

// newExportEnv is one node running exportPolicy, with leases.
func newExportEnv(t *testing.T) (*testEnv, *httpServer) {
	t.Helper()
	e := newTestEnv(t, nil)
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(exportPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	mgr, err := policy.NewManager(policy.ManagerConfig{Path: path, Clock: e.clock, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	e.api, err = New(Config{Checker: e.router, Leaser: e.router, Policy: mgr, Logger: slog.New(slog.DiscardHandler),
		AddOverride: func(_ context.Context, o policy.Override) (policy.Override, error) { return mgr.AddOverride(o) },
		RevokeOverride: func(_ context.Context, id, actor string) (policy.Override, error) {
			return mgr.RevokeOverride(id, actor)
		}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(validated(t, e.api.Handler(nil)))
	t.Cleanup(srv.Close)
	return e, &httpServer{url: srv.URL, client: srv.Client()}
}

// TestAuthzHoldsConcurrencyForTTL: /v1/authz through a concurrency layer
// of 1 takes its slot (200, the lease in the body, in_flight 1); nothing
// releases it, so the next request is refused 429 with Retry-After 10
// (lease_ttl) until 10s pass; then one is admitted again. POST
// /v1/acquire of the same caller and route meets the same slot; an
// acquire asking 1m is capped at max_lease_ttl (20s). gRPC Check of the
// request answers the lease too. POST /v1/report answers reported 0 (no
// adaptive layer).
func TestAuthzHoldsConcurrencyForTTL(t *testing.T) {
	e, s := newExportEnv(t)
	h := e.api.Handler(nil)
	call := authzCall{headers: []string{"X-Original-URI", "/export", "X-API-Key", "k1"}}
	var out leaseOut
	w := call.do(h)
	if json.Unmarshal(w.Body.Bytes(), &out); w.Code != 200 || out.Lease == "" || out.InFlight != 1 || out.ExpiresInMs != 10000 {
		t.Fatalf("authz 1: %d %s", w.Code, w.Body)
	}
	w = call.do(h)
	if w.Code != 429 || w.Header().Get("Retry-After") != "10" {
		t.Fatalf("authz 2 with the slot held: %d %v %s", w.Code, w.Header(), w.Body)
	}
	var acq leaseOut
	if r := s.post(t, "/v1/acquire", `{"api_key":"k1","route":"/export"}`, &acq); r.status != 429 || acq.Scope != "route:/export" {
		t.Fatalf("acquire with the slot held: %d %s", r.status, r.body)
	}
	e.clock.Advance(10 * time.Second)
	if r := s.post(t, "/v1/acquire", `{"api_key":"k1","route":"/export","ttl":"1m"}`, &acq); r.status != 200 || acq.ExpiresInMs != 20000 {
		t.Fatalf("acquire after the TTL: %d %s", r.status, r.body)
	}
	if w = call.do(h); w.Code != 429 {
		t.Fatalf("authz with the acquire's slot held: %d %s", w.Code, w.Body)
	}
	c := e.startGRPC(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	resp, err := c.Check(ctx, &pb.CheckRequest{Checks: []*pb.Check{{Request: &pb.PolicyRequest{ApiKey: "k2", Route: "/export"}}}})
	if d := resp.GetDecisions(); err != nil || len(d) != 1 || d[0].GetLease() == "" || d[0].GetInFlight() != 1 || d[0].GetExpiresInMs() != 10000 {
		t.Fatalf("gRPC check through the layer: %v, %v", resp, err)
	}
	var rep ReportResponse
	if r := s.post(t, "/v1/report", `{"api_key":"k1","route":"/export","outcome":"error","latency_ms":300}`, &rep); r.status != 200 || rep.Reported != 0 {
		t.Fatalf("report: %d %s", r.status, r.body)
	}
}
