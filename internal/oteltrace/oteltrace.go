// Package oteltrace builds the node's OpenTelemetry tracer provider from
// the standard OTEL_* environment (cmd/node's concern: the node takes a
// trace.TracerProvider in its Config).
package oteltrace

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// OpenTelemetry traces, configured by the standard OTEL_* environment and
// off by default. Tracing is on when OTEL_TRACES_EXPORTER is set to
// anything but "none", or, with it unset, when OTEL_EXPORTER_OTLP_ENDPOINT
// or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set (the exporter is then
// "otlp"). OTEL_SDK_DISABLED=true and OTEL_TRACES_EXPORTER=none keep it
// off whatever else is set. Off, no tracer provider exists: the API, the
// router and the peer transport make no span and send no trace context.
//
// OTEL_TRACES_EXPORTER is a comma-separated list of:
//   - otlp: OTLP over OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, else
//     OTEL_EXPORTER_OTLP_PROTOCOL: "http/protobuf" (the default) or "grpc".
//     The exporter reads the rest of OTEL_EXPORTER_OTLP_[TRACES_]* itself
//     (ENDPOINT, HEADERS, TIMEOUT, COMPRESSION, INSECURE, CERTIFICATE,
//     CLIENT_CERTIFICATE, CLIENT_KEY).
//   - console: one JSON document per span on standard output.
//
// The SDK reads OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG (default
// parentbased_always_on), OTEL_BSP_* (the batch span processor) and
// OTEL_SPAN_*_LIMIT from the process environment. The resource is
// service.name=ringlimit (OTEL_SERVICE_NAME overrides it),
// service.version, service.instance.id and ringlimit.node (the node's
// name), and whatever OTEL_RESOURCE_ATTRIBUTES adds.

// Tracing is the node's tracer provider, or none.
type Tracing struct {
	TP        *sdktrace.TracerProvider // nil: tracing off
	Exporters []string                 // the exporters chosen, for the log
}

// tracingExporters returns the exporters the environment asks for (with
// the OTLP protocol: "otlp/grpc", "otlp/http/protobuf"), none when tracing
// is off.
func tracingExporters(getenv func(string) string) ([]string, error) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return nil, nil
	}
	list := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER"))
	if list == "" {
		if getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
			return nil, nil
		}
		list = "otlp"
	}
	var out []string
	for name := range strings.SplitSeq(list, ",") {
		switch name = strings.TrimSpace(name); name {
		case "none":
			return nil, nil
		case "console":
			out = append(out, name)
		case "otlp":
			switch p := cmp.Or(getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"), getenv("OTEL_EXPORTER_OTLP_PROTOCOL"), "http/protobuf"); p {
			case "grpc", "http/protobuf":
				out = append(out, "otlp/"+p)
			default:
				return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL: %q is not supported (grpc or http/protobuf)", p)
			}
		default:
			return nil, fmt.Errorf("OTEL_TRACES_EXPORTER: %q is not supported (otlp, console or none)", name)
		}
	}
	return out, nil
}

// New builds the tracer provider the environment asks for, tracing the
// node named node that runs the given version; console spans go to stdout. Nothing is dialled
// here: the OTLP exporters connect when they first export.
func New(ctx context.Context, getenv func(string) string, node, version string, stdout io.Writer) (*Tracing, error) {
	names, err := tracingExporters(getenv)
	if err != nil || len(names) == 0 {
		return &Tracing{}, err
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "ringlimit"), attribute.String("service.version", version),
			attribute.String("service.instance.id", node), attribute.String("ringlimit.node", node)),
		resource.WithFromEnv()) // OTEL_RESOURCE_ATTRIBUTES, then OTEL_SERVICE_NAME, override the above
	if err != nil && res == nil {
		return nil, fmt.Errorf("tracing resource: %w", err)
	}
	if name := getenv("OTEL_SERVICE_NAME"); name != "" {
		res, _ = resource.Merge(res, resource.NewSchemaless(attribute.String("service.name", name)))
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	var exps []sdktrace.SpanExporter
	for _, name := range names {
		var exp sdktrace.SpanExporter
		switch name {
		case "console":
			exp, err = stdouttrace.New(stdouttrace.WithWriter(stdout))
		case "otlp/grpc":
			exp, err = otlptracegrpc.New(ctx)
		case "otlp/http/protobuf":
			exp, err = otlptracehttp.New(ctx)
		}
		if err != nil {
			for _, e := range exps {
				e.Shutdown(ctx)
			}
			return nil, fmt.Errorf("tracing exporter %s: %w", name, err)
		}
		exps = append(exps, exp)
		opts = append(opts, sdktrace.WithBatcher(exp))
	}
	return &Tracing{TP: sdktrace.NewTracerProvider(opts...), Exporters: names}, nil
}

// Shutdown flushes the spans not yet exported and stops the exporters.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil || t.TP == nil {
		return nil
	}
	if err := t.TP.Shutdown(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("tracing: %w", err)
	}
	return nil
}
