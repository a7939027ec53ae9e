package forward

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
	"github.com/ringlimit/ringlimit/peer"
)

// replicaPeers is a successor that keeps the highest spend each key was
// replicated with, and answers the other calls with nothing. With fail
// set, it refuses every Replicate.
type replicaPeers struct {
	failingPeers
	fail    atomic.Bool
	failTo  string        // when not empty, Replicate to this member fails
	gate    chan struct{} // when not nil, Replicate waits for it to close
	entered chan struct{} // when not nil, Replicate sends on it first
	mu      sync.Mutex
	used    map[string]int64
	rounds  int
	last    []string // the keys of the last call that took states, in order
}

func (p *replicaPeers) Replicate(ctx context.Context, to string, states []peer.State) (int, error) {
	if p.fail.Load() || to == p.failTo {
		return 0, errors.New("successor unreachable")
	}
	p.mu.Lock()
	gate, entered := p.gate, p.entered
	p.mu.Unlock()
	if entered != nil {
		select {
		case entered <- struct{}{}:
		default:
		}
	}
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rounds++
	p.last = p.last[:0]
	for _, s := range states {
		p.used[s.Key] = max(p.used[s.Key], s.Used)
		p.last = append(p.last, s.Key)
	}
	return len(states), nil
}

// hold makes every Replicate call from now on send on a fresh entered
// first and then wait until the gate it returns is closed.
func (p *replicaPeers) hold() (gate, entered chan struct{}) {
	gate, entered = make(chan struct{}), make(chan struct{}, 1)
	p.mu.Lock()
	p.gate, p.entered = gate, entered
	p.mu.Unlock()
	return gate, entered
}

// calls is how many Replicate calls took states.
func (p *replicaPeers) calls() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rounds
}

// lastKeys are the keys the last call that took states carried, sorted.
func (p *replicaPeers) lastKeys() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Sorted(slices.Values(p.last))
}

// acked is the spend of key its successor acknowledged.
func (p *replicaPeers) acked(key string) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.used[key]
}

// replicatingRouter is router A of members A and B, B being peers, on a
// fake clock that never moves: no round runs because Interval passed,
// only the rounds a held answer asks for. It returns a key A owns.
func replicatingRouter(t *testing.T, maxLoss int64) (*Router, *replicaPeers, *prometheus.Registry, string) {
	t.Helper()
	store, err := bucket.NewStore(bucket.StoreConfig{MaxKeys: 1024, Shards: 1, Track: true})
	if err != nil {
		t.Fatal(err)
	}
	peers := &replicaPeers{used: map[string]int64{}}
	reg := prometheus.NewRegistry()
	r, err := New(Config{Self: "A", Store: store, Peers: peers, NewRing: newRing, Clock: testkit.NewClock(0),
		Registerer: reg, Replication: ReplicationConfig{Interval: 20 * time.Millisecond, MaxLoss: maxLoss}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(context.Background()) })
	n0 := r.repl.started.Load()
	r.SetMembers([]Member{{Name: "A", Addr: "a"}, {Name: "B", Addr: "b"}})
	// The ring change sends every key A owns (none yet) in a round of its
	// own; wait for it to end, or on a busy machine it could run after the
	// test's first check and send that key's spend, in no round of the
	// test's making.
	testkit.WaitFor(t, 10*time.Second, "the ring change's round", func() error {
		r.repl.roundMu.Lock()
		done := r.repl.done
		r.repl.roundMu.Unlock()
		if started := r.repl.started.Load(); len(r.repl.resync) > 0 || started == n0 || done != started {
			return fmt.Errorf("rounds begun %d (before the change %d), ended %d", started, n0, done)
		}
		return nil
	})
	for i := 0; ; i++ {
		if k := fmt.Sprintf("crash-%d", i); ownerIn(r.view.Load().ring, "A", k) == "A" {
			return r, peers, reg, k
		}
	}
}

// ownedKeys returns n keys r owns, named prefix-N, sorted.
func ownedKeys(r *Router, prefix string, n int) []string {
	var keys []string
	for i := 0; len(keys) < n; i++ {
		if k := fmt.Sprint(prefix, i); ownerIn(r.view.Load().ring, r.Self(), k) == r.Self() {
			keys = append(keys, k)
		}
	}
	return slices.Sorted(slices.Values(keys))
}

// A round's outbox is reused by the next: each round carries the keys that
// changed since the one before, and none of an earlier round's.
func TestRoundsCarryTheirOwnKeys(t *testing.T) {
	r, peers, _, _ := replicatingRouter(t, -1)
	lim := hourly(1000)
	for round, n := range []int{64, 3, 0, 100, 1} {
		keys := ownedKeys(r, fmt.Sprint("round-", round, "-"), n)
		for _, k := range keys {
			check1(t, r, k, lim, 2)
		}
		calls := peers.calls()
		r.repl.flush(context.Background())
		if n == 0 {
			if got := peers.calls(); got != calls {
				t.Fatalf("round %d changed no key but made %d Replicate calls", round, got-calls)
			}
			continue
		}
		if got := peers.lastKeys(); !slices.Equal(got, keys) {
			t.Fatalf("round %d carried %d keys %q; want the %d it changed", round, len(got), got, n)
		}
		for _, k := range keys {
			if used := peers.acked(k); used != 2 {
				t.Fatalf("round %d: %s acknowledged at %d, want 2", round, k, used)
			}
		}
	}
}

// After every answer, the tokens a key admitted and its successor has not
// acknowledged are at most MaxLoss, however fast the checks come: the
// clock does not move, so only the bound in tokens makes rounds run.
func TestMaxLossBoundsUnreplicatedTokens(t *testing.T) {
	for _, maxLoss := range []int64{10, 11, 2, 1} {
		t.Run(fmt.Sprint("MaxLoss=", maxLoss), func(t *testing.T) {
			r, peers, _, key := replicatingRouter(t, maxLoss)
			lim := hourly(1000)
			for i := 1; i <= 50; i++ {
				res := check1(t, r, key, lim, 1)
				if !res.Allowed {
					t.Fatalf("check %d refused", i)
				}
				if lost := int64(i) - peers.acked(key); lost > maxLoss {
					t.Fatalf("after check %d: %d admitted, %d acknowledged: %d would be lost, want ≤ %d", i, i, peers.acked(key), lost, maxLoss)
				}
			}
		})
	}
	// Without a bound in tokens nothing is sent before Interval, which
	// never comes on this clock.
	r, peers, reg, key := replicatingRouter(t, -1)
	for range 50 {
		check1(t, r, key, hourly(1000), 1)
	}
	if n, w := peers.acked(key), testkit.Metric(t, reg, "ringlimit_replication_waits_total"); n != 0 || w != 0 {
		t.Errorf("MaxLoss -1: %d acknowledged, %v waits; want 0 and 0", n, w)
	}
}

// Past half of MaxLoss a check starts a round and is answered without
// waiting for it; only a check past MaxLoss waits, for a round begun after
// its spend. The successor here holds every round until the test lets it
// go.
func TestMaxLossStartsRoundsEarlyAndWaitsLate(t *testing.T) {
	r, peers, reg, key := replicatingRouter(t, 10)
	gate, entered := peers.hold()
	released := sync.OnceFunc(func() { close(gate) })
	t.Cleanup(released)
	lim := hourly(1000)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out := make([]Result, 1)
	spend := func(i int) {
		t.Helper()
		if err := r.Check(ctx, []Check{{Key: key, Limit: lim, Cost: 1}}, out); err != nil || !out[0].Allowed {
			t.Fatalf("check %d: %+v %v", i, out[0], err)
		}
	}
	for i := 1; i <= 6; i++ { // the 6th leaves 6 > 10/2 unacknowledged: a round starts
		spend(i)
	}
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("no round started after 6 tokens")
	}
	for i := 7; i <= 10; i++ { // 6 in flight + up to 4: answered while the round is held
		spend(i)
	}
	if w := testkit.Metric(t, reg, "ringlimit_replication_waits_total"); w != 0 {
		t.Fatalf("%v answers waited within the bound, want 0", w)
	}
	done := make(chan int64)
	go func() {
		out := make([]Result, 1)
		r.Check(ctx, []Check{{Key: key, Limit: lim, Cost: 1}}, out)
		done <- peers.acked(key) // the 11th: 11 unacknowledged, it waits
	}()
	testkit.WaitFor(t, 5*time.Second, "the 11th check waiting", func() error {
		if testkit.Metric(t, reg, "ringlimit_replication_waits_total") != 1 {
			return errors.New("not yet")
		}
		return nil
	})
	released()
	if acked := <-done; acked != 11 {
		t.Errorf("the 11th check answered with %d acknowledged, want 11 (a round begun after it)", acked)
	}
	if u := testkit.Metric(t, reg, "ringlimit_replication_unconfirmed_total"); u != 0 {
		t.Errorf("%v answers unconfirmed, want 0", u)
	}
}

// The bound holds for checks of several tokens and for concurrent callers:
// at every answer, what was answered admitted minus what the successor
// acknowledged is at most MaxLoss.
func TestMaxLossUnderConcurrentChecks(t *testing.T) {
	const maxLoss, workers, each = 10, 8, 40
	r, peers, _, key := replicatingRouter(t, maxLoss)
	lim := hourly(1 << 20)
	var answered atomic.Int64
	var worst atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			out := make([]Result, 1)
			for i := range each {
				cost := int64(1 + (w+i)%3)
				if err := r.Check(context.Background(), []Check{{Key: key, Limit: lim, Cost: cost}}, out); err != nil || !out[0].Allowed {
					t.Errorf("worker %d check %d: %+v %v", w, i, out[0], err)
					return
				}
				lost := answered.Add(cost) - peers.acked(key)
				for {
					old := worst.Load()
					if lost <= old || worst.CompareAndSwap(old, lost) {
						break
					}
				}
			}
		})
	}
	wg.Wait()
	if w := worst.Load(); w > maxLoss {
		t.Errorf("at some answer %d tokens were admitted and not acknowledged, want ≤ %d", w, maxLoss)
	}
	t.Logf("%d tokens admitted by %d callers, %d rounds; worst admitted-not-acknowledged at an answer: %d",
		answered.Load(), workers, peers.calls(), worst.Load())
}

// A Sync check is answered only once its spend is acknowledged, even with
// the bound in tokens off; a successor that does not acknowledge delays
// no answer, and each such answer is counted.
func TestSyncCheckWaitsForItsReplica(t *testing.T) {
	r, peers, reg, key := replicatingRouter(t, -1)
	lim := hourly(100)
	out := make([]Result, 1)
	for i := int64(1); i <= 20; i++ {
		if err := r.Check(context.Background(), []Check{{Key: key, Limit: lim, Cost: 1, Sync: true}}, out); err != nil || !out[0].Allowed {
			t.Fatalf("check %d: %+v %v", i, out[0], err)
		}
		if got := peers.acked(key); got != i {
			t.Fatalf("after sync check %d: successor acknowledged %d, want %d", i, got, i)
		}
	}
	// A refused check spends nothing and waits for nothing.
	for range 80 {
		r.Check(context.Background(), []Check{{Key: key, Limit: lim, Cost: 1, Sync: true}}, out)
	}
	waits := testkit.Metric(t, reg, "ringlimit_replication_waits_total")
	if err := r.Check(context.Background(), []Check{{Key: key, Limit: lim, Cost: 1, Sync: true}}, out); err != nil || out[0].Allowed {
		t.Fatalf("check 101 of 100: %+v %v, want refused", out[0], err)
	}
	if got := testkit.Metric(t, reg, "ringlimit_replication_waits_total"); got != waits {
		t.Errorf("a refused sync check waited: waits %v, then %v", waits, got)
	}

	other := key + "-x"
	for ownerIn(r.view.Load().ring, "A", other) != "A" {
		other += "x"
	}
	peers.fail.Store(true)
	for i := range 3 {
		if err := r.Check(context.Background(), []Check{{Key: other, Limit: lim, Cost: 1, Sync: true}}, out); err != nil || !out[0].Allowed {
			t.Fatalf("check %d with the successor down: %+v %v, want admitted", i, out[0], err)
		}
	}
	if got := testkit.Metric(t, reg, "ringlimit_replication_unconfirmed_total"); got != 3 {
		t.Errorf("ringlimit_replication_unconfirmed_total = %v, want 3", got)
	}
}

// A sync check whose owner is another node carries Sync to it: the owner
// holds the answer, not the entry node.
func TestSyncForwardedToOwner(t *testing.T) {
	clk := testkit.NewClock(0)
	nodes := startNodes(t, clk, nil, "A", "B", "C")
	formCluster(clk, nodes...)
	a := nodes[0]
	key := keysOwnedBy(t, a.r, "B", "sync", 1)[0]
	lim := hourly(100)
	out := make([]Result, 1)
	for i := range 5 {
		if err := a.r.Check(context.Background(), []Check{{Key: key, Limit: lim, Cost: 1, Sync: true}}, out); err != nil || !out[0].Allowed || out[0].Owner != "B" {
			t.Fatalf("check %d: %+v %v, want admitted by B", i, out[0], err)
		}
	}
	if got := testkit.Metric(t, nodes[1].reg, "ringlimit_replication_waits_total"); got != 5 {
		t.Errorf("B held %v answers for their replica, want 5", got)
	}
}

// Alone on its ring, a node has no successor to wait for: a sync check is
// answered at once, and counted as unconfirmed; no round runs.
func TestSyncAloneIsUnconfirmed(t *testing.T) {
	r, peers, reg, key := replicatingRouter(t, 10)
	r.SetMembers([]Member{{Name: "A", Addr: "a"}})
	out := make([]Result, 1)
	for i := range 20 {
		if err := r.Check(context.Background(), []Check{{Key: key, Limit: hourly(100), Cost: 1, Sync: i%2 == 0}}, out); err != nil || !out[0].Allowed {
			t.Fatalf("check %d: %+v %v", i, out[0], err)
		}
	}
	if w, u := testkit.Metric(t, reg, "ringlimit_replication_waits_total"), testkit.Metric(t, reg, "ringlimit_replication_unconfirmed_total"); w != 0 || u != 10 || peers.acked(key) != 0 {
		t.Errorf("alone: %v waits, %v unconfirmed, %d replicated; want 0, 10 (the sync checks), 0", w, u, peers.acked(key))
	}
}

// A successor that does not acknowledge holds up only its own keys: the
// copies it refused give their tokens back and are sent again, and the
// round is acknowledged for the keys of the successors that took theirs.
func TestFailingSuccessorHoldsOnlyItsKeys(t *testing.T) {
	store, err := bucket.NewStore(bucket.StoreConfig{MaxKeys: 1024, Shards: 1, Track: true})
	if err != nil {
		t.Fatal(err)
	}
	peers := &replicaPeers{used: map[string]int64{}, failTo: "C"}
	reg := prometheus.NewRegistry()
	r, err := New(Config{Self: "A", Store: store, Peers: peers, NewRing: newRing, Clock: testkit.NewClock(0),
		Registerer: reg, Replication: ReplicationConfig{Interval: 20 * time.Millisecond, MaxLoss: 10}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(context.Background()) })
	r.SetMembers([]Member{{Name: "A", Addr: "a"}, {Name: "B", Addr: "b"}, {Name: "C", Addr: "c"}})
	bySucc := map[string]string{}
	ring := r.view.Load().ring
	for i := 0; bySucc["B"] == "" || bySucc["C"] == ""; i++ {
		k := fmt.Sprintf("succ-%d", i)
		if ownerIn(ring, "A", k) == "A" {
			bySucc[ring.AppendSuccessors(nil, k, 1)[0]] = k
		}
	}
	lim := hourly(1000)
	for i := 1; i <= 30; i++ { // C's key: never acknowledged
		check1(t, r, bySucc["C"], lim, 1)
	}
	before := testkit.Metric(t, reg, "ringlimit_replication_waits_total")
	for i := 1; i <= 50; i++ {
		check1(t, r, bySucc["B"], lim, 1)
		if lost := int64(i) - peers.acked(bySucc["B"]); lost > 10 {
			t.Fatalf("B's key after check %d: %d not acknowledged, want ≤ 10", i, lost)
		}
	}
	// Each check past 10 unacknowledged waits; with the round acknowledged
	// for B's key it gets there once every 6 checks at most.
	if w := testkit.Metric(t, reg, "ringlimit_replication_waits_total") - before; w > 9 {
		t.Errorf("50 checks of B's key waited %v times, want at most 9 (C's refusals must not hold B's keys)", w)
	}
	if got := peers.acked(bySucc["C"]); got != 0 {
		t.Errorf("C acknowledged %d, want 0", got)
	}
	// C's key is still counted: its next check waits, and is unconfirmed.
	unconfirmed := testkit.Metric(t, reg, "ringlimit_replication_unconfirmed_total")
	check1(t, r, bySucc["C"], lim, 1)
	if u := testkit.Metric(t, reg, "ringlimit_replication_unconfirmed_total"); u != unconfirmed+1 {
		t.Errorf("C's key: unconfirmed %v then %v, want one more", unconfirmed, u)
	}
}

// Within a second of a held answer, the peer service decides each batch on
// its own goroutine (MayWait), so that a batch held for its replica does
// not hold up the batches behind it on the stream.
func TestHeldAnswerMakesBatchesMayWait(t *testing.T) {
	r, _, _, key := replicatingRouter(t, 10)
	clk := r.cfg.Clock.(*testkit.Clock)
	clk.Advance(r.cfg.Grace + time.Second) // past the ring change's grace
	if r.MayWait("B") {
		t.Fatal("MayWait before any held answer, past the grace period")
	}
	out := make([]Result, 1)
	if err := r.Check(context.Background(), []Check{{Key: key, Limit: hourly(10), Cost: 1, Sync: true}}, out); err != nil || !out[0].Allowed {
		t.Fatalf("%+v %v", out[0], err)
	}
	if !r.MayWait("B") {
		t.Error("no MayWait right after a held answer")
	}
	clk.Advance(time.Second)
	if r.MayWait("B") {
		t.Error("MayWait a second after the last held answer")
	}
}
