package forward

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/internal/testkit"
	peerv1 "github.com/ringlimit/ringlimit/proto/peerv1"
)

// TestPeerValuesCannotRefill sends an owner, over its peer service, the
// values a hostile or broken peer could: a handoff of used 2^63-1 must not
// wrap into a refill of an exhausted key, and negative used values in
// handoffs and replicas are left out and counted.
func TestPeerValuesCannotRefill(t *testing.T) {
	clk := testkit.NewClock(0)
	b := startNode(t, "B", clk, nil)
	a := startNode(t, "A", clk, nil)
	setMembers(membersOf(a, b), b)
	lim := hourly(10)
	x := keysOwnedBy(t, b.r, "B", "x", 1)[0]
	if res := check1(t, b.r, x, lim, 10); !res.Allowed || res.Remaining != 0 {
		t.Fatalf("exhausting %s: %+v", x, res)
	}
	client := peerClient(t, b.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	w := limitProto(lim)
	resp, err := client.Handoff(ctx, &peerv1.HandoffRequest{From: "A", Buckets: []*peerv1.BucketState{
		{Key: x, Limit: w, Used: math.MaxInt64},
		{Key: x, Limit: w, Used: -1},
		{Key: x, Limit: w, Used: math.MinInt64},
	}})
	if err != nil || resp.GetMerged() != 1 {
		t.Fatalf("handoff: %v, merged %d, want 1", err, resp.GetMerged())
	}
	if _, err := client.Replicate(ctx, &peerv1.ReplicateRequest{From: "A", Buckets: []*peerv1.BucketState{
		{Key: "r", Limit: w, Used: -5},
		{Key: "r2", Limit: w, Used: math.MaxInt64},
	}}); err != nil {
		t.Fatal(err)
	}
	if res := check1(t, b.r, x, lim, 1); res.Allowed {
		t.Fatalf("%s after a handoff of 2^63-1 and negatives: %+v, want refused", x, res)
	}
	if _, used, _ := b.store.Used(x, clk.Now()); used != 10 {
		t.Fatalf("%s used %d, want 10", x, used)
	}
	if got := testkit.Metric(t, b.reg, "ringlimit_peer_invalid_states_total"); got != 3 {
		t.Fatalf("ringlimit_peer_invalid_states_total = %v, want 3", got)
	}
	if _, used, ok := b.r.shared.state("A", "r2", clk.Now()); !ok || used != 10 {
		t.Fatalf("replica of 2^63-1: used %d held %v, want 10", used, ok)
	}
}

// TestStoreFullFailureMode fills an owner's store with spent keys: a new
// key is decided in its check's failure mode and counted, and the keys
// held keep working.
func TestStoreFullFailureMode(t *testing.T) {
	clk := testkit.NewClock(0)
	store, err := bucket.NewStore(bucket.StoreConfig{MaxKeys: 16, Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	a := startNode(t, "A", clk, func(c *nodeConfig) { c.Store = store })
	lim := hourly(10)
	for i := range 16 {
		if res := check1(t, a.r, "k"+strconv.Itoa(i), lim, 1); !res.Allowed || res.Degraded {
			t.Fatalf("k%d: %+v", i, res)
		}
	}
	for _, c := range []struct {
		mode    bucket.FailureMode
		allowed bool
	}{{bucket.FailOpen, true}, {bucket.FailClosed, false}, {bucket.Local, true}} {
		var out [1]Result
		if err := a.r.Check(context.Background(), []Check{{Key: "new-" + c.mode.String(), Limit: lim, Cost: 1, Mode: c.mode}}, out[:]); err != nil {
			t.Fatal(err)
		}
		if !out[0].Degraded || out[0].Allowed != c.allowed {
			t.Fatalf("new key, %v, store full: %+v, want degraded, allowed %v", c.mode, out[0], c.allowed)
		}
	}
	if got := testkit.Metric(t, a.reg, "ringlimit_store_full_total"); got != 3 {
		t.Fatalf("ringlimit_store_full_total = %v, want 3", got)
	}
	if res := check1(t, a.r, "k0", lim, 1); !res.Allowed || res.Degraded || res.Remaining != 8 {
		t.Fatalf("a key held: %+v, want remaining 8", res)
	}
}

// TestPromotionNeverEvictsSpent: B holds replicas of A's keys and a store
// full of its own spent keys when A dies. Promotion takes A's keys over
// within the store's allowance for peer state and drops none of B's spent
// keys; the replicas it has no room for stay replicas, counted, and their
// keys, exhausted, are not admitted by a failure mode that can refuse.
func TestPromotionNeverEvictsSpent(t *testing.T) {
	clk := testkit.NewClock(0)
	store, err := bucket.NewStore(bucket.StoreConfig{MaxKeys: 64, Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	b := startNode(t, "B", clk, func(c *nodeConfig) { c.Store = store })
	a := startNode(t, "A", clk, nil)
	c := startNode(t, "C", clk, nil)
	setMembers(membersOf(a, b, c), b)
	lim := hourly(10)
	// B's own keys, on the ring before and after A dies; A's keys that B
	// takes over.
	all, err := newRing([]string{"A", "B", "C"})
	if err != nil {
		t.Fatal(err)
	}
	after, err := newRing([]string{"B", "C"})
	if err != nil {
		t.Fatal(err)
	}
	var own, theirs []string
	for i := 0; len(own) < 64 || len(theirs) < 16; i++ {
		k := "k-" + strconv.Itoa(i)
		o1, _ := all.Owner(k)
		o2, _ := after.Owner(k)
		switch {
		case o1 == "B" && len(own) < 64:
			own = append(own, k)
		case o1 == "A" && o2 == "B" && len(theirs) < 16:
			theirs = append(theirs, k)
		}
	}
	for _, k := range own {
		if res := check1(t, b.r, k, lim, 4); !res.Allowed {
			t.Fatalf("%s: %+v", k, res)
		}
	}
	w := limitProto(lim)
	var states []*peerv1.BucketState
	for _, k := range theirs {
		states = append(states, &peerv1.BucketState{Key: k, Limit: w, Used: 10})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := peerClient(t, b.addr).Replicate(ctx, &peerv1.ReplicateRequest{From: "A", Buckets: states}); err != nil {
		t.Fatal(err)
	}
	down := membersOf(a, b, c)
	down[0].Down = true
	b.r.SetMembers(down)
	testkit.WaitFor(t, 5*time.Second, "promotion", func() error {
		if got := testkit.Metric(t, b.reg, "ringlimit_replicas_promoted_total"); got != 64/8 {
			return fmt.Errorf("promoted %v, want %d", got, 64/8)
		}
		return nil
	})
	if got := testkit.Metric(t, b.reg, "ringlimit_store_states_refused_total", "store", "own", "reason", "full"); got != 16-64/8 {
		t.Fatalf("refused %v, want %d", got, 16-64/8)
	}
	for _, k := range own {
		if _, used, ok := store.Used(k, clk.Now()); !ok || used != 4 {
			t.Fatalf("own key %s after promotion: used %d held %v, want 4", k, used, ok)
		}
	}
	for _, k := range theirs {
		for _, mode := range []bucket.FailureMode{bucket.FailClosed, bucket.Local} {
			var out [1]Result
			if err := b.r.Check(context.Background(), []Check{{Key: k, Limit: lim, Cost: 1, Mode: mode}}, out[:]); err != nil {
				t.Fatal(err)
			}
			if out[0].Allowed {
				t.Fatalf("%s, exhausted on A, after promotion (%v): %+v, want refused", k, mode, out[0])
			}
		}
	}
}
