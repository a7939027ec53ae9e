package peer_test

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
	"github.com/ringlimit/ringlimit/peer"
)

// Checks sent in one batch with different trace contexts each get their
// own span on the receiver, child of the context each was sent with; an
// untraced check of the same batch gets none.
func TestTracedChecksGetOwnerSpans(t *testing.T) {
	clock := testkit.NewClock(0)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	a := startNode(t, "A", clock, func(c *peer.Config) { c.PropagateTrace = true })
	b, lis := newNode(t, "B", clock, nil)
	b.scfg.TracerProvider = tp
	b.serve(t, lis)
	formCluster(a, b)

	lim := hourlyLimit(1)
	tracer := tp.Tracer("test")
	ctx, parent := tracer.Start(context.Background(), "parent")
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	reqs := []peer.Request{{Key: "k1", Limit: lim, Cost: 1}, {Key: "k1", Limit: lim, Cost: 1}}
	out := make([]peer.Answer, len(reqs))
	if _, err := a.pool.Check(ctx, "B", reqs, out); err != nil {
		t.Fatal(err)
	}
	parent.End()
	if _, _, err := check(a, "B", "k2", lim, 10*time.Second); err != nil { // untraced
		t.Fatal(err)
	}
	var got []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == peer.PeerCheckSpan {
			got = append(got, s)
		}
	}
	if len(got) != 2 {
		t.Fatalf("%d owner spans, want 2 (the traced checks)", len(got))
	}
	for i, s := range got {
		if s.Parent().SpanID() != parent.SpanContext().SpanID() || s.SpanContext().TraceID() != parent.SpanContext().TraceID() || !s.Parent().IsRemote() {
			t.Errorf("span %d: parent %v, want remote %v", i, s.Parent(), parent.SpanContext())
		}
		if s.SpanKind() != trace.SpanKindServer {
			t.Errorf("span %d: kind %v", i, s.SpanKind())
		}
		attrs := map[string]string{}
		for _, kv := range s.Attributes() {
			attrs[string(kv.Key)] = kv.Value.Emit()
		}
		want := map[string]string{"ringlimit.cost": "1", "ringlimit.algorithm": "token_bucket", "ringlimit.allowed": []string{"true", "false"}[i],
			"ringlimit.peer.from": "A", "ringlimit.peer.batch_checks": "2"}
		for k, v := range want {
			if attrs[k] != v {
				t.Errorf("span %d: %s = %q, want %q (all: %v)", i, k, attrs[k], v, attrs)
			}
		}
		for k, v := range attrs {
			if v == "k1" {
				t.Errorf("span %d: attribute %s holds the key", i, k)
			}
		}
	}
}
