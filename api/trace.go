package api

import (
	"net/http"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc/filters"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"google.golang.org/grpc/stats"
)

// Tracing (Config.TracerProvider). The HTTP API is wrapped in otelhttp's
// handler: one server span per request, named "{method} {route}" by the
// route pattern that matched ("POST /v1/check", "GET /v1/overrides/{id}"),
// or "{method}" alone when none did, never by the raw path; /healthz,
// /readyz and /metrics make none. The public gRPC server takes otelgrpc's
// stats handler (GRPCStatsHandler): a span per call named by its method,
// health checks left out. Both read and write only the W3C traceparent
// and tracestate headers, and record no metrics. No attribute they add
// holds a rate-limit key: keys travel in request bodies and messages,
// which neither records.

// tracedPath reports whether a request to path gets a span: not the operating
// endpoints, polled often and never part of a check.
func tracedPath(path string) bool {
	switch path {
	case "/healthz", "/readyz", "/metrics":
		return false
	}
	return true
}

// traced wraps h in a server span per request when tracing is on.
func (a *API) traced(h http.Handler) http.Handler {
	if a.tp == nil {
		return h
	}
	return otelhttp.NewHandler(h, "ringlimit.http",
		otelhttp.WithTracerProvider(a.tp),
		otelhttp.WithPropagators(propagation.TraceContext{}),
		otelhttp.WithMeterProvider(metricnoop.NewMeterProvider()),
		otelhttp.WithFilter(func(r *http.Request) bool { return tracedPath(r.URL.Path) }))
}

// GRPCStatsHandler returns the stats handler that traces the public gRPC
// server's calls (grpc.StatsHandler), or nil when tracing is off.
func (a *API) GRPCStatsHandler() stats.Handler {
	if a.tp == nil {
		return nil
	}
	return otelgrpc.NewServerHandler(
		otelgrpc.WithTracerProvider(a.tp),
		otelgrpc.WithPropagators(propagation.TraceContext{}),
		otelgrpc.WithMeterProvider(metricnoop.NewMeterProvider()),
		otelgrpc.WithFilter(filters.Not(filters.HealthCheck())))
}
