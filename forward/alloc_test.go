//go:build !race

package forward

import (
	"context"
	"fmt"
	"runtime"
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

// A replication round reuses the last one's outbox, and the store the
// batches it hands out: once a round of 64 keys has grown them, what a
// round allocates beyond its checks is the keys' names (one each) and a
// few fixed allocations, not copies of the keys' states.
func TestReplicationRoundAllocs(t *testing.T) {
	r, _, _, _ := replicatingRouter(t, -1)
	lim := hourly(1 << 30)
	ctx := context.Background()
	keys := ownedKeys(r, "k", 64) // names of 2 or 3 bytes: 8-byte allocations
	checks := func() {
		for _, k := range keys {
			check1(t, r, k, lim, 1)
		}
	}
	round := func() {
		checks()
		r.repl.flush(ctx)
	}
	bytesPer := func(f func()) int64 {
		f()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range 50 {
			f()
		}
		runtime.ReadMemStats(&after)
		return int64(after.TotalAlloc-before.TotalAlloc) / 50
	}
	b := bytesPer(round) - bytesPer(checks)
	t.Logf("bytes allocated per replication round of 64 keys, beyond its checks: %d", b)
	if want := int64(64*8 + 1024); b > want {
		t.Fatalf("a replication round of 64 keys allocated %d bytes beyond its checks; want at most %d (the keys' names and 1 KiB)", b, want)
	}
}
