package oteltrace

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
)

func envOf(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

// Which environments turn tracing on, and with which exporters.
func TestTracingExporters(t *testing.T) {
	for _, tc := range []struct {
		env  []string
		want []string // nil: off
		err  string
	}{
		{env: nil},
		{env: []string{"OTEL_TRACES_SAMPLER", "always_on", "OTEL_SERVICE_NAME", "x"}}, // nothing says export
		{env: []string{"OTEL_TRACES_EXPORTER", "none"}},
		{env: []string{"OTEL_TRACES_EXPORTER", "none", "OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"}},
		{env: []string{"OTEL_SDK_DISABLED", "true", "OTEL_TRACES_EXPORTER", "otlp"}},
		{env: []string{"OTEL_TRACES_EXPORTER", "otlp"}, want: []string{"otlp/http/protobuf"}},
		{env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"}, want: []string{"otlp/http/protobuf"}},
		{env: []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://collector:4318/v1/traces"}, want: []string{"otlp/http/protobuf"}},
		{env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317", "OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"}, want: []string{"otlp/grpc"}},
		{env: []string{"OTEL_TRACES_EXPORTER", "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc"}, want: []string{"otlp/grpc"}},
		{env: []string{"OTEL_TRACES_EXPORTER", "console"}, want: []string{"console"}},
		{env: []string{"OTEL_TRACES_EXPORTER", "otlp, console", "OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"}, want: []string{"otlp/grpc", "console"}},
		{env: []string{"OTEL_TRACES_EXPORTER", "zipkin"}, err: `"zipkin" is not supported`},
		{env: []string{"OTEL_TRACES_EXPORTER", "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"}, err: `"http/json" is not supported`},
	} {
		got, err := tracingExporters(envOf(tc.env...))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: %v, %v; want error %q", tc.env, got, err, tc.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%q: exporters %q, %v; want %q", tc.env, got, err, tc.want)
		}
	}
}

// New builds each exporter without dialling, and the console one
// writes spans with the resource: service.name ringlimit unless
// OTEL_SERVICE_NAME says otherwise, and the node's name.
func TestNewTracing(t *testing.T) {
	ctx := context.Background()
	off, err := New(ctx, envOf(), "node-1", "v0.0.0", nil)
	if err != nil || off.TP != nil || off.Shutdown(ctx) != nil {
		t.Fatalf("no environment: %+v, %v; want tracing off", off, err)
	}
	for _, proto := range []string{"grpc", "http/protobuf"} {
		// A closed port (the exporters read the process environment):
		// nothing dials it when the exporter is built, nor when it is shut
		// down with nothing to send.
		t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
		tr, err := New(ctx, envOf("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_PROTOCOL", proto), "node-1", "v0.0.0", nil)
		if err != nil || tr.TP == nil {
			t.Fatalf("otlp %s: %+v, %v", proto, tr, err)
		}
		if err := tr.Shutdown(ctx); err != nil {
			t.Fatalf("otlp %s: shutdown: %v", proto, err)
		}
	}
	for _, tc := range []struct{ env, service string }{{"", "ringlimit"}, {"limiter-eu", "limiter-eu"}} {
		var out bytes.Buffer
		tr, err := New(ctx, envOf("OTEL_TRACES_EXPORTER", "console", "OTEL_SERVICE_NAME", tc.env), "node-7", "v0.0.0", &out)
		if err != nil || tr.TP == nil {
			t.Fatalf("console: %+v, %v", tr, err)
		}
		_, span := tr.TP.Tracer("test").Start(ctx, "hello")
		span.End()
		if err := tr.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Name     string
			Resource []struct {
				Key   string
				Value struct{ Value any }
			}
		}
		if err := json.Unmarshal(out.Bytes(), &doc); err != nil || doc.Name != "hello" {
			t.Fatalf("console wrote %q: %v", out.String(), err)
		}
		res := map[string]any{}
		for _, kv := range doc.Resource {
			res[kv.Key] = kv.Value.Value
		}
		if res["service.name"] != tc.service || res["ringlimit.node"] != "node-7" || res["service.instance.id"] != "node-7" || res["service.version"] == nil {
			t.Errorf("OTEL_SERVICE_NAME=%q: resource %v", tc.env, res)
		}
	}
}

// The OTLP exporter reads its endpoint from the process environment (as
// the SDK reads the sampler): spans go, as OTLP/HTTP protobuf, to a
// loopback receiver when the node shuts tracing down.
func TestOTLPHTTPExport(t *testing.T) {
	var posts atomic.Int64
	var path, ctype atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		posts.Add(1)
		path.Store(r.URL.Path)
		ctype.Store(r.Header.Get("Content-Type"))
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer srv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Setenv("OTEL_TRACES_SAMPLER", "always_on")
	ctx := context.Background()
	tr, err := New(ctx, os.Getenv, "node-1", "v0.0.0", nil)
	if err != nil || tr.TP == nil {
		t.Fatalf("%+v, %v", tr, err)
	}
	_, span := tr.TP.Tracer("test").Start(ctx, "hello")
	span.End()
	if err := tr.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if posts.Load() != 1 || path.Load() != "/v1/traces" || ctype.Load() != "application/x-protobuf" {
		t.Fatalf("%d posts, last to %v as %v; want 1 to /v1/traces as application/x-protobuf", posts.Load(), path.Load(), ctype.Load())
	}
}
