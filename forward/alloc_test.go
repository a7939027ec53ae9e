//go:build !race

package forward

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
	"github.com/ringlimit/ringlimit/peer"
)

// allowingPeers allows every check, allocating nothing.
type allowingPeers struct{ failingPeers }

func (p *allowingPeers) Check(_ context.Context, name string, _ []peer.Request, out []peer.Answer) (string, error) {
	for i := range out {
		out[i] = peer.Answer{Allowed: true, Remaining: 1}
	}
	return name, nil
}

// Tracing off costs a forwarded check nothing: a check whose context holds
// a sampled span allocates what one without does. And the router's part of
// a forwarded check allocates its owner group alone.
func TestForwardAllocsTracingOff(t *testing.T) {
	store, err := bucket.NewStore(bucket.StoreConfig{MaxKeys: 1024, Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(Config{Self: "A", Store: store, Peers: &allowingPeers{}, NewRing: newRing, Clock: testkit.NewClock(0),
		PeerTimeout: time.Second, Replication: ReplicationConfig{Off: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	r.SetMembers([]Member{{Name: "A", Addr: "a"}, {Name: "B", Addr: "b"}})
	key := ""
	for i := 0; key == ""; i++ {
		if k := fmt.Sprintf("alloc-%d", i); ownerIn(r.view.Load().ring, "A", k) == "B" {
			key = k
		}
	}
	checks := []Check{{Key: key, Limit: bucket.MustLimit(bucket.TokenBucket, 10, time.Hour, 10), Cost: 1}}
	out := make([]Result, 1)
	traced := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled}))
	run := func(ctx context.Context) func() {
		return func() {
			if err := r.Check(ctx, checks, out); err != nil || !out[0].Allowed {
				t.Fatalf("%+v, %v", out[0], err)
			}
		}
	}
	plain, withSpan := testing.AllocsPerRun(200, run(context.Background())), testing.AllocsPerRun(200, run(traced))
	t.Logf("allocations per forwarded check, tracing off: %v without a span in the context, %v with one", plain, withSpan)
	if withSpan != plain {
		t.Fatalf("allocations per forwarded check: %v with a span in the context, %v without", withSpan, plain)
	}
	// The requests and answers sent to the owner come from a pool (ask's
	// scratch): what is left is the check's owner group and its index.
	if plain > 2 {
		t.Fatalf("allocations per forwarded check: %v, want at most 2 (the owner group and its index)", plain)
	}
}
