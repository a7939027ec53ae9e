package api

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/ringlimit/ringlimit/policy"
)

// BenchmarkAuthzHandler is the server's share of one GET /v1/authz: the
// handler alone, without a network (headers read, the policy resolved,
// its layers checked on the local store, the answer written), as
// BenchmarkHTTPHandler is for POST /v1/check.
func BenchmarkAuthzHandler(b *testing.B) {
	e := newTestEnv(b, nil)
	path := filepath.Join(b.TempDir(), "policy.yaml")
	const pol = `
version: bench
policies:
  api:
    default_tier: free
    tiers:
      free: { limit: 1000000000, per: 1s }
`
	if err := os.WriteFile(path, []byte(pol), 0o644); err != nil {
		b.Fatal(err)
	}
	mgr, err := policy.NewManager(policy.ManagerConfig{Path: path, Clock: e.clock, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	if e.api, err = New(Config{Checker: e.router, Policy: mgr, Logger: slog.New(slog.DiscardHandler),
		AddOverride: func(_ context.Context, o policy.Override) (policy.Override, error) { return mgr.AddOverride(o) },
		RevokeOverride: func(_ context.Context, id, actor string) (policy.Override, error) {
			return mgr.RevokeOverride(id, actor)
		},
	}); err != nil {
		b.Fatal(err)
	}
	h := e.api.Handler(nil)
	keys := make([]string, benchKeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("bench-%d", i)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		req := httptest.NewRequest(http.MethodGet, "/v1/authz", nil)
		req.Header.Set(HeaderAPIKey, keys[i%benchKeys])
		req.Header.Set(HeaderOriginalURI, "/items")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatalf("authz %d: status %d %s", i, rec.Code, rec.Body)
		}
	}
}
