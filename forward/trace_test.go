package forward

import (
	"context"
	"fmt"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
	"github.com/ringlimit/ringlimit/peer"
)

// answeringPeers allows every check and records the span context each
// Check was called with.
type answeringPeers struct {
	failingPeers
	seen []trace.SpanContext
}

func (p *answeringPeers) Check(ctx context.Context, name string, reqs []peer.Request, out []peer.Answer) (string, error) {
	p.seen = append(p.seen, trace.SpanContextFromContext(ctx))
	for i := range out {
		out[i] = peer.Answer{Allowed: true, Remaining: 1}
	}
	return name, nil
}

// With a TracerProvider, the wait for the owner is a span
// "ringlimit.forward", child of the request's span, and the peers are
// asked with its context (which the transport carries to the owner).
// Without a parent span, or without a TracerProvider, no span is made and
// the peers see the context as it was.
func TestForwardSpan(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	for _, traced := range []bool{true, false} {
		t.Run(fmt.Sprint("traced=", traced), func(t *testing.T) {
			rec.Reset()
			store, err := bucket.NewStore(bucket.StoreConfig{MaxKeys: 1024, Shards: 1})
			if err != nil {
				t.Fatal(err)
			}
			peers := &answeringPeers{}
			cfg := Config{Self: "A", Store: store, Peers: peers, NewRing: newRing, Clock: testkit.NewClock(0),
				PeerTimeout: time.Second, Replication: ReplicationConfig{Off: true}}
			if traced {
				cfg.TracerProvider = tp
			}
			r, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close(context.Background())
			r.SetMembers([]Member{{Name: "A", Addr: "a"}, {Name: "B", Addr: "b"}})
			var remote, local string
			for i := 0; remote == "" || local == ""; i++ {
				k := fmt.Sprintf("trace-%d", i)
				if ownerIn(r.view.Load().ring, "A", k) == "B" {
					remote = k
				} else {
					local = k
				}
			}
			lim := bucket.MustLimit(bucket.TokenBucket, 10, time.Hour, 10)
			ctx, parent := tp.Tracer("test").Start(context.Background(), "request")
			out := make([]Result, 2)
			if err := r.Check(ctx, []Check{{Key: remote, Limit: lim, Cost: 1}, {Key: local, Limit: lim, Cost: 1}}, out); err != nil {
				t.Fatal(err)
			}
			parent.End()
			if err := r.Check(context.Background(), []Check{{Key: remote, Limit: lim, Cost: 1}}, out); err != nil { // no parent span
				t.Fatal(err)
			}
			var fwd []sdktrace.ReadOnlySpan
			for _, s := range rec.Ended() {
				if s.Name() == ForwardSpan {
					fwd = append(fwd, s)
				}
			}
			if !traced {
				if len(fwd) != 0 || len(peers.seen) != 2 || !peers.seen[0].Equal(parent.SpanContext()) || peers.seen[1].IsValid() {
					t.Fatalf("tracing off: %d forward spans, peers saw %v", len(fwd), peers.seen)
				}
				return
			}
			if len(fwd) != 1 {
				t.Fatalf("%d forward spans, want 1 (the remote check with a parent)", len(fwd))
			}
			s := fwd[0]
			if s.Parent().SpanID() != parent.SpanContext().SpanID() || s.SpanKind() != trace.SpanKindClient {
				t.Fatalf("forward span: parent %v kind %v, want %v", s.Parent(), s.SpanKind(), parent.SpanContext())
			}
			if peers.seen[0].SpanID() != s.SpanContext().SpanID() || peers.seen[1].IsValid() {
				t.Fatalf("peers asked with %v, want the forward span %v, then none", peers.seen, s.SpanContext())
			}
			attrs := map[string]string{}
			for _, kv := range s.Attributes() {
				attrs[string(kv.Key)] = kv.Value.Emit()
			}
			for k, v := range map[string]string{"ringlimit.peer": "B", "ringlimit.checks": "1", "ringlimit.final": "false", "ringlimit.decider": "B"} {
				if attrs[k] != v {
					t.Errorf("%s = %q, want %q (all: %v)", k, attrs[k], v, attrs)
				}
			}
		})
	}
}
