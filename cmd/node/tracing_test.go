package main

import (
	"context"
	"fmt"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ringlimit/ringlimit/forward"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/peer"
	pb "github.com/ringlimit/ringlimit/proto/ringlimitv1"
)

// One trace spans the entry node and the owner: a check sent over HTTP
// (then gRPC) to node-1 for a key node-2 owns makes, on node-1, the API's
// server span and the forward span as its child, and on node-2 the
// peer-check span whose parent is that forward span, in the same trace.
// node-3 traces nothing: what it forwards carries no trace context (its
// owner makes no span), and it decides what traced nodes forward to it.
func TestTraceAcrossForwardedHop(t *testing.T) {
	h := newHarness(t)
	recs := map[string]*tracetest.SpanRecorder{}
	start := func(name string, traced bool, join ...string) *node.Node {
		var tweak func(*config)
		if traced {
			rec := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
			t.Cleanup(func() { tp.Shutdown(context.Background()) })
			recs[name] = rec
			tweak = func(c *config) { c.Tracer = tp }
		}
		n, _ := h.startWith(name, joinArgs(join), tweak)
		return n
	}
	n1 := start("node-1", true)
	n2 := start("node-2", true, n1.Cluster().LocalAddr())
	n3 := start("node-3", false, n1.Cluster().LocalAddr())
	h.waitRing([]*node.Node{n1, n2, n3}, []string{"node-1", "node-2", "node-3"}, 10*time.Second)
	keyOwnedBy := func(owner string) string {
		for i := 0; ; i++ {
			k := fmt.Sprintf("trace:%d", i)
			if o, _ := n1.Router().Owner(k); o == owner {
				return k
			}
		}
	}
	key2, key3 := keyOwnedBy("node-2"), keyOwnedBy("node-3")
	lim := inlineLimit{count: 100, per: "1h"}

	// spans waits until rec holds n ended spans and returns them.
	spans := func(name string, n int) []sdktrace.ReadOnlySpan {
		t.Helper()
		var got []sdktrace.ReadOnlySpan
		testkit.Poll(5*time.Second, func() bool { got = recs[name].Ended(); return len(got) >= n })
		if len(got) != n {
			var names []string
			for _, s := range got {
				names = append(names, s.Name())
			}
			t.Fatalf("%s: %d spans %q, want %d", name, len(got), names, n)
		}
		recs[name].Reset()
		return got
	}
	byName := func(ss []sdktrace.ReadOnlySpan) map[string]sdktrace.ReadOnlySpan {
		m := map[string]sdktrace.ReadOnlySpan{}
		for _, s := range ss {
			if _, dup := m[s.Name()]; dup {
				t.Fatalf("two spans %s", s.Name())
			}
			m[s.Name()] = s
		}
		return m
	}
	// assertTrace checks one forwarded check's spans: api, the API's
	// span, on node-1; its child, the forward span; node-2's peer-check
	// span, child of the forward span.
	assertTrace := func(api string) {
		t.Helper()
		entry, owner := byName(spans("node-1", 2)), byName(spans("node-2", 1))
		srv, fwd, chk := entry[api], entry[forward.ForwardSpan], owner[peer.PeerCheckSpan]
		if srv == nil || fwd == nil || chk == nil {
			t.Fatalf("spans on node-1 %v, on node-2 %v; want %s and %s, then %s", entry, owner, api, forward.ForwardSpan, peer.PeerCheckSpan)
		}
		tid := srv.SpanContext().TraceID()
		if srv.SpanKind() != trace.SpanKindServer || srv.Parent().IsValid() {
			t.Errorf("%s: kind %v, parent %v; want a server root span", api, srv.SpanKind(), srv.Parent())
		}
		if fwd.SpanContext().TraceID() != tid || fwd.Parent().SpanID() != srv.SpanContext().SpanID() || fwd.SpanKind() != trace.SpanKindClient {
			t.Errorf("forward span: trace %v parent %v kind %v; want child of %s %v", fwd.SpanContext().TraceID(), fwd.Parent().SpanID(), fwd.SpanKind(), api, srv.SpanContext())
		}
		if chk.SpanContext().TraceID() != tid || chk.Parent().SpanID() != fwd.SpanContext().SpanID() || !chk.Parent().IsRemote() {
			t.Errorf("peer-check span: trace %v parent %v; want remote child of forward span %v", chk.SpanContext().TraceID(), chk.Parent(), fwd.SpanContext())
		}
		for _, s := range []sdktrace.ReadOnlySpan{srv, fwd, chk} {
			for _, kv := range s.Attributes() {
				if strings.Contains(kv.Value.Emit(), key2) {
					t.Errorf("%s: attribute %s holds the key", s.Name(), kv.Key)
				}
			}
		}
		attrs := map[string]string{}
		for _, kv := range chk.Attributes() {
			attrs[string(kv.Key)] = kv.Value.Emit()
		}
		if attrs["ringlimit.allowed"] != "true" || attrs["ringlimit.cost"] != "1" || attrs["ringlimit.algorithm"] != "token_bucket" || attrs["ringlimit.peer.from"] != "node-1" {
			t.Errorf("peer-check span attributes %v", attrs)
		}
	}

	a, err := doCheck(h.client, httpAddr(n1), key2, lim, 5*time.Second)
	if err != nil || a.status != 200 || a.body.Owner != "node-2" {
		t.Fatalf("HTTP check: %+v, %v", a, err)
	}
	assertTrace("POST /v1/check")

	conn, err := grpc.NewClient(n1.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := pb.NewRateLimiterClient(conn).Check(ctx, &pb.CheckRequest{Checks: []*pb.Check{{Key: key2, Cost: new(int64(1)),
		Limit: &pb.Limit{Limit: 100, PerMs: int64(time.Hour / time.Millisecond)}}}})
	if err != nil || !resp.GetDecisions()[0].GetAllowed() {
		t.Fatalf("gRPC check: %v, %v", resp, err)
	}
	assertTrace("ringlimit.v1.RateLimiter/Check")

	// Untraced entry node: no trace context reaches the traced owner.
	if a, err := doCheck(h.client, httpAddr(n3), key2, lim, 5*time.Second); err != nil || a.status != 200 || a.body.Owner != "node-2" {
		t.Fatalf("check through node-3: %+v, %v", a, err)
	}
	// Untraced owner: the traced entry node's spans only.
	if a, err := doCheck(h.client, httpAddr(n1), key3, lim, 5*time.Second); err != nil || a.status != 200 || a.body.Owner != "node-3" {
		t.Fatalf("check of node-3's key: %+v, %v", a, err)
	}
	spans("node-1", 2)
	time.Sleep(50 * time.Millisecond) // a span node-2 wrongly made would have ended by now
	if got := recs["node-2"].Ended(); len(got) != 0 {
		t.Fatalf("node-2 made %d spans for checks from an untraced node", len(got))
	}
}
