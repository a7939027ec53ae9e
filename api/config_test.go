package api

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// A nil Registerer registers nothing: no registry of the API's own is
// made, so no /metrics is served. The metrics go where the caller says,
// and /metrics serves the Gatherer it gives.
func TestNilRegistererRegistersNothing(t *testing.T) {
	e := newTestEnv(t, nil)
	get := func(a *API) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		a.Handler(nil).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		return rec
	}
	a, err := New(Config{Checker: e.router, Stats: e.store})
	if err != nil {
		t.Fatal(err)
	}
	if rec := get(a); rec.Code != http.StatusNotFound {
		t.Errorf("GET /metrics with no Registerer or Gatherer: %d, want 404 (nothing registered, nothing served)", rec.Code)
	}
	reg := prometheus.NewRegistry()
	if _, err := New(Config{Checker: e.router, Stats: e.store, Registerer: reg}); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, mf := range mfs {
		names = append(names, mf.GetName())
	}
	if got := strings.Join(names, " "); !strings.Contains(got, "ringlimit_keys") || !strings.Contains(got, "ringlimit_evictions_total") {
		t.Errorf("the Registerer given holds %q, want the API's metrics (ringlimit_keys, ringlimit_evictions_total, ...)", got)
	}
}
