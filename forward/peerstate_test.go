package forward

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
	"github.com/ringlimit/ringlimit/peer"
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
	// A token bucket saturates at a full debt (twice its capacity): a
	// settled overrun travels with the key (bucket/settle.go).
	if _, used, _ := b.store.Used(x, clk.Now()); used != 20 {
		t.Fatalf("%s used %d, want 20", x, used)
	}
	if got := testkit.Metric(t, b.reg, "ringlimit_peer_invalid_states_total"); got != 3 {
		t.Fatalf("ringlimit_peer_invalid_states_total = %v, want 3", got)
	}
	if st, ok := b.r.shared.state("A", "r2", clk.Now()); !ok || st.Used != 20 {
		t.Fatalf("replica of 2^63-1: used %d held %v, want 20", st.Used, ok)
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

// fullStore is a store of 16 keys in one shard, for tests that fill it.
func fullStore(t *testing.T) *bucket.Store {
	t.Helper()
	store, err := bucket.NewStore(bucket.StoreConfig{MaxKeys: 16, Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	return store
}

// fillStore spends 1 of 10 on 16 keys n owns on its ring, filling its
// fullStore with keys that hold spend.
func fillStore(t *testing.T, n *node) {
	t.Helper()
	for _, k := range keysOwnedBy(t, n.r, n.name, "held-"+n.name, 16) {
		if res := check1(t, n.r, k, hourly(10), 1); !res.Allowed || res.Degraded || res.Owner != n.name {
			t.Fatalf("filling %s with %s: %+v", n.name, k, res)
		}
	}
}

// wantModeCounts checks n's count of checks decided in each failure mode.
func wantModeCounts(t *testing.T, n *node, open, closed, local float64) {
	t.Helper()
	for mode, want := range map[bucket.FailureMode]float64{bucket.FailOpen: open, bucket.FailClosed: closed, bucket.Local: local} {
		if got := testkit.Metric(t, n.reg, "ringlimit_degraded_checks_total", "mode", mode.String()); got != want {
			t.Errorf("%s: ringlimit_degraded_checks_total{mode=%q} = %v, want %v", n.name, mode, got, want)
		}
	}
}

// wantStoreFull checks n's ringlimit_store_full_total.
func wantStoreFull(t *testing.T, n *node, want float64) {
	t.Helper()
	if got := testkit.Metric(t, n.reg, "ringlimit_store_full_total"); got != want {
		t.Errorf("%s: ringlimit_store_full_total = %v, want %v", n.name, got, want)
	}
}

// TestForwardedStoreFullFailureMode fills an owner's store with spent keys
// and sends it new keys from another node over the peer protocol: the
// owner spends nothing, answers that it had no room (peer.Answer.Full) and
// counts the key once in ringlimit_store_full_total; the entry node
// decides each check in its own failure mode, as for an unreachable owner,
// and counts it once, degraded.
func TestForwardedStoreFullFailureMode(t *testing.T) {
	clk := testkit.NewClock(0)
	b := startNode(t, "B", clk, func(c *nodeConfig) { c.Store = fullStore(t) })
	a := startNode(t, "A", clk, nil)
	formCluster(clk, a, b)
	fillStore(t, b)
	lim := hourly(10)
	newKeys := keysOwnedBy(t, a.r, "B", "new", 3)
	steps := []struct {
		key       string
		mode      bucket.FailureMode
		allowed   bool
		remaining int64
	}{
		{newKeys[0], bucket.FailOpen, true, 0},
		{newKeys[0], bucket.FailOpen, true, 0},
		{newKeys[0], bucket.FailOpen, true, 0},
		{newKeys[1], bucket.FailClosed, false, 0},
		{newKeys[1], bucket.FailClosed, false, 0},
		// Local: 10 an hour over 2 members, 5 on A's local bucket.
		{newKeys[2], bucket.Local, true, 4},
		{newKeys[2], bucket.Local, true, 3},
		{newKeys[2], bucket.Local, true, 2},
		{newKeys[2], bucket.Local, true, 1},
		{newKeys[2], bucket.Local, true, 0},
		{newKeys[2], bucket.Local, false, 0},
	}
	for i, s := range steps {
		var out [1]Result
		if err := a.r.Check(context.Background(), []Check{{Key: s.key, Limit: lim, Cost: 1, Mode: s.mode}}, out[:]); err != nil {
			t.Fatal(err)
		}
		res := out[0]
		if res.Allowed != s.allowed || res.Remaining != s.remaining || !res.Degraded || res.Owner != "A" {
			t.Fatalf("step %d: Check(%s, %v) on A, B's store full = %+v, want allowed %v, remaining %d, degraded on A",
				i, s.key, s.mode, res, s.allowed, s.remaining)
		}
		if !res.Allowed && res.RetryAfter <= 0 {
			t.Fatalf("step %d: refused without a retry-after: %+v", i, res)
		}
	}
	wantModeCounts(t, a, 3, 2, 6)
	wantModeCounts(t, b, 0, 0, 0)
	wantStoreFull(t, b, float64(len(steps)))
	wantStoreFull(t, a, 0)
	if got := testkit.Metric(t, b.reg, "ringlimit_peer_checks_total"); got != float64(len(steps)) {
		t.Errorf("B received %v peer checks, want %d", got, len(steps))
	}
	for _, k := range newKeys {
		if b.store.Has(k) || a.store.Has(k) {
			t.Errorf("%s held by B %v, A %v: a key with no room was stored", k, b.store.Has(k), a.store.Has(k))
		}
	}
	// B's keys keep working through A.
	k := keysOwnedBy(t, b.r, "B", "held-B", 1)[0]
	if res := check1(t, a.r, k, lim, 1); !res.Allowed || res.Degraded || res.Owner != "B" || res.Remaining != 8 {
		t.Fatalf("a key B holds, through A: %+v, want decided by B with 8 left", res)
	}
}

// TestRedirectedStoreFullFailureMode: a check redirected to an owner whose
// store has no room for its new key is decided, after the last hop, in its
// failure mode on the entry node, once, like a direct one.
func TestRedirectedStoreFullFailureMode(t *testing.T) {
	clk := testkit.NewClock(0)
	a := startNode(t, "A", clk, nil)
	b := startNode(t, "B", clk, nil)
	c := startNode(t, "C", clk, func(c *nodeConfig) { c.Store = fullStore(t) })
	// C has joined; B and C know, A does not yet.
	a.r.SetMembers(membersOf(a, b))
	setMembers(membersOf(a, b, c), b, c)
	clk.Advance(testGrace)
	fillStore(t, c)
	var keys []string
	for i := 0; len(keys) < 3; i++ {
		k := fmt.Sprintf("moved-%d", i)
		oa, _ := a.r.Owner(k)
		ob, _ := b.r.Owner(k)
		if oa == "B" && ob == "C" {
			keys = append(keys, k)
		}
	}
	lim := hourly(10)
	checks := []Check{
		{Key: keys[0], Limit: lim, Cost: 1, Mode: bucket.FailOpen},
		{Key: keys[1], Limit: lim, Cost: 1, Mode: bucket.FailClosed},
		{Key: keys[2], Limit: lim, Cost: 1, Mode: bucket.Local},
	}
	out := make([]Result, len(checks))
	done := make(chan error, 1)
	go func() { done <- a.r.Check(context.Background(), checks, out) }()
	waitRedirected(t, b, 3)
	a.r.SetMembers(membersOf(a, b, c)) // A follows the redirects to C, as a last hop
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for i, want := range []struct {
		allowed   bool
		remaining int64
	}{{true, 0}, {false, 0}, {true, 2}} { // local: 10 an hour over 3 members
		if res := out[i]; res.Allowed != want.allowed || res.Remaining != want.remaining || !res.Degraded || res.Owner != "A" {
			t.Errorf("%v check of %s, redirected to C, C's store full: %+v, want allowed %v, remaining %d, degraded on A",
				checks[i].Mode, checks[i].Key, res, want.allowed, want.remaining)
		}
	}
	if got := testkit.Metric(t, a.reg, "ringlimit_redirects_followed_total"); got != 3 {
		t.Errorf("A followed %v redirects, want 3", got)
	}
	wantModeCounts(t, a, 1, 1, 1)
	for _, n := range []*node{b, c} {
		wantModeCounts(t, n, 0, 0, 0)
	}
	wantStoreFull(t, c, 3)
	wantStoreFull(t, b, 0)
	wantStoreFull(t, a, 0)
	for _, k := range keys {
		if b.store.Has(k) || c.store.Has(k) {
			t.Errorf("%s held by B %v, C %v: nothing should be spent", k, b.store.Has(k), c.store.Has(k))
		}
	}
}

// fixedPeers answers every check with a.
type fixedPeers struct {
	failingPeers
	a peer.Answer
}

func (p *fixedPeers) Check(_ context.Context, name string, _ []peer.Request, out []peer.Answer) (string, error) {
	for i := range out {
		out[i] = p.a
	}
	return name, nil
}

// An owner from before peer.Answer.Full refuses a new key it has no room
// for, and the entry node keeps that refusal whatever the check's failure
// mode (as before the flag); the same answer with Full set is decided in
// the failure mode.
func TestStoreFullAnswerFromOlderOwner(t *testing.T) {
	refusal := peer.Answer{RetryAfter: time.Second}
	for _, tc := range []struct {
		full    bool
		allowed bool
	}{{false, false}, {true, true}} {
		store, err := bucket.NewStore(bucket.StoreConfig{MaxKeys: 1024, Shards: 1})
		if err != nil {
			t.Fatal(err)
		}
		a := refusal
		a.Full = tc.full
		r, err := New(Config{Self: "A", Store: store, Peers: &fixedPeers{a: a}, NewRing: newRing, Clock: testkit.NewClock(0),
			PeerTimeout: time.Second, Replication: ReplicationConfig{Off: true}})
		if err != nil {
			t.Fatal(err)
		}
		r.SetMembers([]Member{{Name: "A", Addr: "a"}, {Name: "B", Addr: "b"}})
		key := keysOwnedBy(t, r, "B", "old", 1)[0]
		out := make([]Result, 1)
		if err := r.Check(context.Background(), []Check{{Key: key, Limit: hourly(10), Cost: 1, Mode: bucket.FailOpen}}, out); err != nil {
			t.Fatal(err)
		}
		if out[0].Allowed != tc.allowed || out[0].Degraded != tc.full {
			t.Errorf("fail_open check, owner answers %+v: %+v, want allowed %v, degraded %v", a, out[0], tc.allowed, tc.full)
		}
		if err := r.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}
