package api

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// With a TracerProvider the HTTP API makes one server span per request,
// named by the route pattern (never the raw path, which holds ids), child
// of an incoming W3C traceparent; the operating endpoints make none.
// Without one it reads no trace header and makes no span.
func TestHTTPSpans(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	e := newTestEnv(t, nil)
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, on := range []bool{true, false} {
		rec.Reset()
		cfg := Config{Checker: e.router}
		if on {
			cfg.TracerProvider = tp
		}
		a, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		h := a.Handler(nil)
		var seen []trace.SpanContext
		probe := a.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			seen = append(seen, trace.SpanContextFromContext(r.Context()))
		}))
		for _, rq := range []struct{ method, path, body string }{
			{"POST", "/v1/check", `{"key":"user:42","limit":{"limit":10,"per":"1s"}}`},
			{"GET", "/healthz", ""}, {"GET", "/readyz", ""}, {"GET", "/metrics", ""},
			{"DELETE", "/v1/overrides/abc123", ""}, // no policy: 404 from the mux, no pattern
			{"BREW", "/v1/check", ""},
		} {
			req := httptest.NewRequest(rq.method, rq.path, strings.NewReader(rq.body))
			req.Header.Set("traceparent", parent)
			h.ServeHTTP(httptest.NewRecorder(), req)
		}
		req := httptest.NewRequest("GET", "/user/secret-path", nil)
		req.Header.Set("traceparent", parent)
		probe.ServeHTTP(httptest.NewRecorder(), req)
		var names []string
		for _, s := range rec.Ended() {
			names = append(names, s.Name())
			if s.SpanContext().TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || s.Parent().SpanID().String() != "00f067aa0ba902b7" {
				t.Errorf("span %s: trace %v parent %v, want the traceparent's", s.Name(), s.SpanContext().TraceID(), s.Parent().SpanID())
			}
			if s.SpanKind() != trace.SpanKindServer {
				t.Errorf("span %s: kind %v", s.Name(), s.SpanKind())
			}
		}
		want := []string{"POST /v1/check", "DELETE", "HTTP", "GET /"}
		if !on {
			want = nil
			if len(seen) != 1 || seen[0].IsValid() {
				t.Errorf("tracing off: the handler saw span context %v", seen)
			}
		}
		if !slices.Equal(names, want) {
			t.Errorf("tracing %v: spans %q, want %q", on, names, want)
		}
	}
	if a, _ := New(Config{Checker: e.router}); a.GRPCStatsHandler() != nil {
		t.Error("a gRPC stats handler with tracing off")
	}
}
