package forward

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/clock"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
	"github.com/ringlimit/ringlimit/peer"
	peerv1 "github.com/ringlimit/ringlimit/proto/peerv1"
	"github.com/ringlimit/ringlimit/ring"
)

func TestMain(m *testing.M) {
	testkit.Main(m)
}

// ---- harness ---------------------------------------------------------------

var _ Owners = (*ring.Ring)(nil)

// testGrace is the Grace of every test router unless a test says otherwise.
const testGrace = 300 * time.Millisecond

// newRing is every test node's NewRing, as cmd/node builds it.
func newRing(members []string) (Owners, error) { return ring.New(ring.DefaultConfig(), members) }

// nodeConfig is what startNode builds a node from: the router's Config and
// its pool's. Unless a test sets them, the pool's Timeout is the router's
// PeerTimeout and its Clock the router's Clock; a test whose point is a
// transport deadline in real time sets Peer.Clock to clock.System() while
// the router (its buckets and its own waits) keeps the fake clock.
type nodeConfig struct {
	Config
	Peer peer.Config
}

// node is one in-process cluster member: a Router, its peer pool and peer
// server, its store, its metrics and the gRPC server its peers reach it on.
type node struct {
	name  string
	addr  string
	r     *Router
	pool  *peer.Pool
	psrv  *peer.Server
	store *bucket.Store
	reg   *prometheus.Registry
	srv   *grpc.Server
	stop  func() // drains the peer service and stops the gRPC server (idempotent)
}

// startNode starts a node named name on its own loopback gRPC server.
// tweak, if not nil, edits the configuration before anything is built. The
// node is shut down in cmd/node's order when the test ends: peer service
// drained and stopped, router closed, pool closed.
func startNode(t testing.TB, name string, clk clock.Clock, tweak func(*nodeConfig), sopts ...grpc.ServerOption) *node {
	t.Helper()
	store, err := bucket.NewStore(bucket.StoreConfig{MaxKeys: 1 << 16, Shards: 16})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	pm, err := peer.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	cfg := nodeConfig{Config: Config{
		Self:        name,
		Store:       store,
		NewRing:     newRing,
		Clock:       clk,
		Grace:       testGrace,
		PeerTimeout: 5 * time.Second, // generous: -race under load must not degrade
		Logger:      log,
		Registerer:  reg,
	}}
	if tweak != nil {
		tweak(&cfg)
	}
	pc := cfg.Peer
	pc.Self, pc.Logger, pc.Metrics = name, log, pm
	if pc.Timeout == 0 {
		pc.Timeout = cfg.PeerTimeout
	}
	if pc.Clock == nil {
		pc.Clock = cfg.Clock
	}
	pool, err := peer.NewPool(pc)
	if err != nil {
		t.Fatalf("NewPool(%s): %v", name, err)
	}
	cfg.Peers = pool
	if cfg.Settler == nil {
		cfg.Settler = pool
	}
	if cfg.Leaser == nil {
		cfg.Leaser = pool
	}
	r, err := New(cfg.Config)
	if err != nil {
		pool.Close(context.Background())
		t.Fatalf("New(%s): %v", name, err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(sopts...)
	psrv, err := peer.NewServer(peer.ServerConfig{Self: name, Handler: r, Stats: r, Clock: clk, Metrics: pm, Settler: r, Leaser: r})
	if err != nil {
		t.Fatal(err)
	}
	psrv.Register(srv)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(lis)
	}()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			psrv.Drain()
			srv.Stop()
			<-served
		})
	}
	t.Cleanup(func() {
		stop()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := r.Close(ctx); err != nil {
			t.Errorf("Close(%s): %v", name, err)
		}
		if err := pool.Close(ctx); err != nil {
			t.Errorf("Pool.Close(%s): %v", name, err)
		}
	})
	return &node{name: name, addr: lis.Addr().String(), r: r, pool: pool, psrv: psrv, store: store, reg: reg, srv: srv, stop: stop}
}

// startNodes starts one node per name on a shared clock.
func startNodes(t testing.TB, clk clock.Clock, tweak func(*nodeConfig), names ...string) []*node {
	t.Helper()
	nodes := make([]*node, len(names))
	for i, name := range names {
		nodes[i] = startNode(t, name, clk, tweak)
	}
	return nodes
}

// realTransport runs a node's peer transport on real time (deadlines that
// fire by themselves), its router on the test's clock.
func realTransport(c *nodeConfig) { c.Peer.Clock = clock.System() }

func membersOf(nodes ...*node) []Member {
	ms := make([]Member, len(nodes))
	for i, n := range nodes {
		ms[i] = Member{Name: n.name, Addr: n.addr}
	}
	return ms
}

// setMembers gives every node in on the member list ms.
func setMembers(ms []Member, on ...*node) {
	for _, n := range on {
		n.r.SetMembers(ms)
	}
}

// formCluster gives every node the member list of all of them and moves the
// clock past the grace period, so that the cluster is in its steady state.
func formCluster(clk *testkit.Clock, nodes ...*node) {
	setMembers(membersOf(nodes...), nodes...)
	clk.Advance(testGrace)
}

// keysOwnedBy returns n keys "prefix-i" that r's ring gives to owner.
func keysOwnedBy(t testing.TB, r *Router, owner, prefix string, n int) []string {
	t.Helper()
	var keys []string
	for i := 0; len(keys) < n; i++ {
		if i > 100000 {
			t.Fatalf("fewer than %d keys owned by %s", n, owner)
		}
		k := fmt.Sprintf("%s-%d", prefix, i)
		if o, _ := r.Owner(k); o == owner {
			keys = append(keys, k)
		}
	}
	return keys
}

func hourly(n int64) bucket.Limit { return bucket.MustLimit(bucket.TokenBucket, n, time.Hour, 0) }

// limitProto is l as the peer API's generated messages carry it.
func limitProto(l bucket.Limit) *peerv1.Limit {
	return &peerv1.Limit{Algorithm: uint32(l.Algorithm()), Limit: l.Count(), PerNs: int64(l.Per()), Burst: l.Burst()}
}

// check1 runs one check through r and returns its result.
func check1(t testing.TB, r *Router, key string, l bucket.Limit, cost int64) Result {
	t.Helper()
	var out [1]Result
	if err := r.Check(context.Background(), []Check{{Key: key, Limit: l, Cost: cost}}, out[:]); err != nil {
		t.Fatalf("Check(%s on %s): %v", key, r.Self(), err)
	}
	return out[0]
}

// advanceUntil moves clk by step at every poll until cond holds, for at
// most d of real time: for what waits on a timer of the fake clock that a
// goroutine of the router arms at a moment the test does not see.
func advanceUntil(t testing.TB, clk *testkit.Clock, step, d time.Duration, what string, cond func() bool) {
	t.Helper()
	testkit.Eventually(t, d, what, func() bool {
		if cond() {
			return true
		}
		clk.Advance(step)
		return false
	})
}

// ---- 1. routing --------------------------------------------------------------

func TestRoutingOwnerIsRingOwner(t *testing.T) {
	clock := testkit.NewClock(0)
	nodes := startNodes(t, clock, nil, "A", "B", "C")
	formCluster(clock, nodes...)

	byName := map[string]*node{}
	for _, n := range nodes {
		byName[n.name] = n
	}
	owned := map[string]int{}
	lim := hourly(1000)
	for i := range 300 {
		key := fmt.Sprintf("route-%d", i)
		want, ver := nodes[0].r.Owner(key)
		for _, n := range nodes[1:] {
			if o, v := n.r.Owner(key); o != want || v != ver {
				t.Fatalf("%s: Owner on %s = %s@%x, on A = %s@%x", key, n.name, o, v, want, ver)
			}
		}
		owned[want]++
		for j, entry := range nodes {
			res := check1(t, entry.r, key, lim, 1)
			if res.Owner != want || res.Degraded || !res.Allowed || res.Remaining != int64(1000-1-j) || res.Limit != 1000 {
				t.Fatalf("%s via %s: %+v, want Owner %s, allowed, remaining %d", key, entry.name, res, want, 1000-1-j)
			}
		}
		// Only the owner holds the key.
		for _, n := range nodes {
			if has := n.store.Has(key); has != (n.name == want) {
				t.Fatalf("%s: store of %s has it = %v, owner %s", key, n.name, has, want)
			}
		}
		if _, used, _ := byName[want].store.Used(key, clock.Now()); used != 3 {
			t.Fatalf("%s: owner %s has used %d, want 3", key, want, used)
		}
	}
	t.Logf("owners of 300 keys: %v", owned)
	for _, n := range nodes {
		if owned[n.name] == 0 {
			t.Fatalf("%s owns none of 300 keys: %v", n.name, owned)
		}
	}
}

func TestBatchResultsInInputOrder(t *testing.T) {
	clock := testkit.NewClock(0)
	nodes := startNodes(t, clock, nil, "A", "B", "C")
	formCluster(clock, nodes...)
	a := nodes[0].r

	// Interleave 10 keys of each owner; each check has its own limit and
	// cost so that its result identifies it.
	var per [3][]string
	for i, n := range nodes {
		per[i] = keysOwnedBy(t, a, n.name, "order-"+n.name, 10)
	}
	var checks []Check
	var owners []string
	for i := range 10 {
		for o := range 3 {
			j := len(checks)
			checks = append(checks, Check{Key: per[o][i], Limit: hourly(int64(100 + j)), Cost: int64(1 + j%5)})
			owners = append(owners, nodes[o].name)
		}
	}
	for _, entry := range nodes {
		out := make([]Result, len(checks))
		if err := entry.r.Check(context.Background(), checks, out); err != nil {
			t.Fatal(err)
		}
		for j, res := range out {
			c := checks[j]
			// Every entry spends on the same keys: the k-th entry sees the
			// k-th spend.
			k := int64(strings.Index("ABC", entry.name))
			want := c.Limit.Count() - (k+1)*c.Cost
			if res.Owner != owners[j] || !res.Allowed || res.Degraded || res.Limit != c.Limit.Count() || res.Remaining != want {
				t.Fatalf("via %s: out[%d] = %+v, want owner %s limit %d remaining %d", entry.name, j, res, owners[j], c.Limit.Count(), want)
			}
		}
	}
}

func TestSameKeyAppliedInBatchOrder(t *testing.T) {
	clock := testkit.NewClock(0)
	nodes := startNodes(t, clock, nil, "A", "B", "C")
	formCluster(clock, nodes...)
	lim := hourly(2)
	for _, entry := range nodes {
		for _, owner := range nodes {
			key := keysOwnedBy(t, entry.r, owner.name, "seq-"+entry.name, 1)[0]
			checks := []Check{{Key: key, Limit: lim, Cost: 1}, {Key: key, Limit: lim, Cost: 1}, {Key: key, Limit: lim, Cost: 1}}
			out := make([]Result, 3)
			if err := entry.r.Check(context.Background(), checks, out); err != nil {
				t.Fatal(err)
			}
			want := []bucket.Decision{
				{Allowed: true, Limit: 2, Remaining: 1, ResetAfter: 30 * time.Minute},
				{Allowed: true, Limit: 2, Remaining: 0, ResetAfter: time.Hour},
				{Allowed: false, Limit: 2, Remaining: 0, RetryAfter: 30 * time.Minute, ResetAfter: time.Hour},
			}
			for i := range out {
				if out[i].Decision != want[i] || out[i].Owner != owner.name {
					t.Errorf("via %s, owner %s: out[%d] = %+v, want %+v", entry.name, owner.name, i, out[i], want[i])
				}
			}
		}
	}
}

// A decision that travels over the wire is the decision the owner's store
// made: every field survives, for every algorithm.
func TestForwardedDecisionMatchesLocal(t *testing.T) {
	clock := testkit.NewClock(0)
	nodes := startNodes(t, clock, nil, "A", "B")
	formCluster(clock, nodes...)
	a := nodes[0].r
	limits := map[string]bucket.Limit{
		"token":   bucket.MustLimit(bucket.TokenBucket, 7, 10*time.Second, 3),
		"leaky":   bucket.MustLimit(bucket.LeakyBucket, 3, time.Second, 4),
		"fixed":   bucket.MustLimit(bucket.FixedWindow, 3, time.Minute, 0),
		"log":     bucket.MustLimit(bucket.SlidingWindowLog, 3, time.Minute, 0),
		"counter": bucket.MustLimit(bucket.SlidingWindowCounter, 3, time.Minute, 0),
	}
	for name, l := range limits {
		local := keysOwnedBy(t, a, "A", "parity-"+name, 1)[0]
		remote := keysOwnedBy(t, a, "B", "parity-"+name, 1)[0]
		for i := range 6 {
			cost := int64(1 + i%2)
			lr := check1(t, a, local, l, cost)
			rr := check1(t, a, remote, l, cost)
			if lr.Owner != "A" || rr.Owner != "B" || lr.Decision != rr.Decision {
				t.Fatalf("%s step %d: local %+v, forwarded %+v", name, i, lr, rr)
			}
			clock.Advance(123456789) // ~0.12 s: fractions of tokens and windows
		}
	}
}

// ---- 2. exactness under concurrency -----------------------------------------------

func TestExactUnderConcurrency(t *testing.T) {
	const goroutines, perG = 64, 50
	t.Run("one key", func(t *testing.T) {
		clock := testkit.NewClock(0)
		nodes := startNodes(t, clock, nil, "A", "B", "C")
		formCluster(clock, nodes...)
		lim := hourly(100)
		var allowed, rejected atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		for g := range goroutines {
			wg.Go(func() {
				<-start
				for i := range perG {
					r := nodes[(g+i)%3].r
					var out [1]Result
					if err := r.Check(context.Background(), []Check{{Key: "hot", Limit: lim, Cost: 1}}, out[:]); err != nil {
						t.Error(err)
						return
					}
					if out[0].Degraded {
						t.Errorf("degraded: %+v", out[0])
					}
					if out[0].Allowed {
						allowed.Add(1)
					} else {
						rejected.Add(1)
					}
				}
			})
		}
		close(start)
		wg.Wait()
		if allowed.Load() != 100 || rejected.Load() != goroutines*perG-100 {
			t.Fatalf("allowed %d rejected %d, want 100 and %d", allowed.Load(), rejected.Load(), goroutines*perG-100)
		}
	})
	t.Run("50 keys", func(t *testing.T) {
		clock := testkit.NewClock(0)
		nodes := startNodes(t, clock, nil, "A", "B", "C")
		formCluster(clock, nodes...)
		const nkeys, batch = 50, 10
		lim := hourly(100)
		keys := make([]string, nkeys)
		for i := range keys {
			keys[i] = fmt.Sprintf("many-%d", i)
		}
		var allowed [nkeys]atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		for g := range goroutines {
			wg.Go(func() {
				<-start
				checks := make([]Check, batch)
				idx := make([]int, batch)
				out := make([]Result, batch)
				for i := range perG {
					for j := range batch {
						idx[j] = (g + i*batch + j) % nkeys
						checks[j] = Check{Key: keys[idx[j]], Limit: lim, Cost: 1}
					}
					if err := nodes[(g+i)%3].r.Check(context.Background(), checks, out); err != nil {
						t.Error(err)
						return
					}
					for j := range out {
						if out[j].Degraded {
							t.Errorf("degraded: %+v", out[j])
						}
						if out[j].Allowed {
							allowed[idx[j]].Add(1)
						}
					}
				}
			})
		}
		close(start)
		wg.Wait()
		// Every key saw goroutines*perG*batch/nkeys = 640 checks.
		for i := range allowed {
			if n := allowed[i].Load(); n != 100 {
				t.Errorf("%s: %d allowed, want 100", keys[i], n)
			}
		}
	})
}

// ---- 4. hop limit -----------------------------------------------------------------

func TestHopLimitOne(t *testing.T) {
	clock := testkit.NewClock(0)
	nodes := startNodes(t, clock, nil, "A", "B", "C")
	a, b, c := nodes[0], nodes[1], nodes[2]
	// A thinks the cluster is {A, B}; B and C think it is {B, C}.
	a.r.SetMembers(membersOf(a, b))
	setMembers(membersOf(b, c), b, c)
	clock.Advance(testGrace)

	var key string
	for i := 0; key == ""; i++ {
		k := fmt.Sprintf("hop-%d", i)
		oa, _ := a.r.Owner(k)
		ob, _ := b.r.Owner(k)
		if oa == "B" && ob == "C" {
			key = k
		}
	}
	// B holds no copy of the key: it redirects to C, which A does not
	// know; A's ring does not change within half the peer deadline, so A
	// answers in the key's failure mode: 10 per hour over 2 members.
	done := make(chan Result, 1)
	go func() { done <- check1(t, a.r, key, hourly(10), 1) }()
	waitRedirected(t, b, 1)
	res := awaitOnClock(t, clock, time.Second, done) // A's wait is on the test's clock
	if res.Owner != "A" || !res.Allowed || res.Remaining != 4 || !res.Degraded {
		t.Fatalf("check on A for %s (A: owner B, B: owner C) = %+v, want degraded on A with 4 of 5 left", key, res)
	}
	if got := testkit.Metric(t, c.reg, "ringlimit_peer_checks_total"); got != 0 {
		t.Fatalf("C received %v peer checks: B forwarded again", got)
	}
	if got := testkit.Metric(t, b.reg, "ringlimit_forward_rpcs_total"); got != 0 {
		t.Fatalf("B sent %v check RPCs", got)
	}
	if got := testkit.Metric(t, b.reg, "ringlimit_redirects_total"); got != 1 {
		t.Fatalf("B redirected %v checks, want 1", got)
	}
	if b.store.Has(key) {
		t.Fatal("B spent on a key it redirected")
	}
	// goleak (TestMain) checks that nothing Close should stop is left running.
}

// waitRedirected waits until n has redirected want checks.
func waitRedirected(t *testing.T, n *node, want float64) {
	t.Helper()
	testkit.WaitFor(t, 5*time.Second, n.name+" redirecting", func() error {
		if got := testkit.Metric(t, n.reg, "ringlimit_redirects_total"); got != want {
			return fmt.Errorf("%v redirects, want %v", got, want)
		}
		return nil
	})
}

// A check whose owner's ring names another owner is redirected there and
// decided by it as the last hop: two hops, never more. A sender that does
// not know the member named yet waits for its own ring to change.
func TestRedirectFollowedOnce(t *testing.T) {
	clock := testkit.NewClock(0)
	nodes := startNodes(t, clock, nil, "A", "B", "C")
	a, b, c := nodes[0], nodes[1], nodes[2]
	// C has joined; B and C know, A does not yet.
	a.r.SetMembers(membersOf(a, b))
	setMembers(membersOf(a, b, c), b, c)
	clock.Advance(testGrace)
	var key string
	for i := 0; key == ""; i++ {
		k := fmt.Sprintf("redirect-%d", i)
		oa, _ := a.r.Owner(k)
		ob, _ := b.r.Owner(k)
		if oa == "B" && ob == "C" {
			key = k
		}
	}
	// The first check waits on A until A's ring has C.
	done := make(chan Result, 1)
	go func() { done <- check1(t, a.r, key, hourly(10), 1) }()
	waitRedirected(t, b, 1)
	a.r.SetMembers(membersOf(a, b, c))
	if res := <-done; res.Owner != "C" || !res.Allowed || res.Remaining != 9 || res.Degraded {
		t.Fatalf("first check on A: %+v, want decided by C with 9 left", res)
	}
	// A's ring now agrees with B's: no more redirects.
	if res := check1(t, a.r, key, hourly(10), 1); res.Owner != "C" || res.Remaining != 8 {
		t.Fatalf("second check on A: %+v, want decided by C with 8 left", res)
	}
	if got := testkit.Metric(t, a.reg, "ringlimit_redirects_followed_total"); got != 1 {
		t.Fatalf("A followed %v redirects, want 1", got)
	}
	if b.store.Has(key) {
		t.Fatal("B spent on a key it redirected")
	}
}

// A check whose owner redirects it to a member the sender's ring has just
// dropped (the owner has not yet seen it leave) is asked of that owner
// again until its ring agrees, and decided there; never answered from a
// fresh failure-mode share, which would know nothing of the key's spend.
// When the owner's ring never catches up, the owner decides it as the last
// hop after half the peer deadline.
func TestRedirectToMemberThatLeftAsksOwnerAgain(t *testing.T) {
	clock := testkit.NewClock(0)
	nodes := startNodes(t, clock, realTransport, "A", "B", "C")
	a, b, c := nodes[0], nodes[1], nodes[2]
	formCluster(clock, a, b, c)
	// Keys C owns on {A, B, C} and B owns on {A, B}.
	var keys []string
	probe, err := newRing([]string{"A", "B"})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; len(keys) < 2; i++ {
		k := fmt.Sprintf("left-%d", i)
		if o, _ := a.r.Owner(k); o != "C" {
			continue
		}
		if o, _ := probe.Owner(k); o == "B" {
			keys = append(keys, k)
		}
	}
	for _, k := range keys {
		if res := check1(t, a.r, k, hourly(10), 4); res.Owner != "C" || res.Remaining != 6 {
			t.Fatalf("spending 4 of %s: %+v, want decided by C with 6 left", k, res)
		}
	}
	// A has seen C leave; B has not, and holds no copy of the keys.
	a.r.SetMembers(membersOf(a, b))

	// B catches up while A asks again.
	done := make(chan Result, 1)
	go func() { done <- check1(t, a.r, keys[0], hourly(10), 1) }()
	waitRedirected(t, b, 1)
	b.r.SetMembers(membersOf(a, b))
	res := awaitOnClock(t, clock, 5*time.Millisecond, done)
	if res.Owner != "B" || !res.Allowed || res.Remaining != 5 || res.Degraded {
		t.Fatalf("check on A after B caught up: %+v, want decided by B with 5 left", res)
	}

	// B's ring never catches up: it decides as the last hop.
	b.r.SetMembers(membersOf(a, b, c))
	before := testkit.Metric(t, b.reg, "ringlimit_redirects_total")
	go func() { done <- check1(t, a.r, keys[1], hourly(10), 1) }()
	waitRedirected(t, b, before+1)
	res = awaitOnClock(t, clock, 5*time.Millisecond, done)
	if res.Owner != "B" || !res.Allowed || res.Remaining != 5 || res.Degraded {
		t.Fatalf("check on A while B's ring still has C: %+v, want decided by B with 5 left", res)
	}
	if got := testkit.Metric(t, a.reg, "ringlimit_degraded_checks_total"); got != 0 {
		t.Fatalf("A answered %v checks in their failure mode", got)
	}
}

// awaitOnClock advances clock by step every 5 ms of real time until a
// result arrives on done.
func awaitOnClock(t *testing.T, clock *testkit.Clock, step time.Duration, done <-chan Result) Result {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		clock.Advance(step)
		select {
		case res := <-done:
			return res
		case <-time.After(5 * time.Millisecond):
		}
	}
	t.Fatal("no result within 10s")
	return Result{}
}

func TestValidateChecksNamesIndex(t *testing.T) {
	good := Check{Key: "k", Limit: hourly(10), Cost: 1}
	cases := []struct {
		name string
		bad  Check
		want string
	}{
		{"empty key", Check{Key: "", Limit: hourly(10), Cost: 1}, "checks[2].key"},
		{"long key", Check{Key: strings.Repeat("x", 100000), Limit: hourly(10), Cost: 1}, "checks[2].key"},
		{"zero limit", Check{Key: "k", Cost: 1}, "checks[2].limit"},
		{"zero cost", Check{Key: "k", Limit: hourly(10), Cost: 0}, "checks[2].cost"},
		{"cost above capacity", Check{Key: "k", Limit: hourly(10), Cost: 11}, "checks[2].cost"},
		{"unknown mode", Check{Key: "k", Limit: hourly(10), Cost: 1, Mode: bucket.FailureMode(7)}, "checks[2].failure_mode"},
	}
	for _, tc := range cases {
		err := ValidateChecks([]Check{good, good, tc.bad, good})
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: ValidateChecks = %v, want ErrInvalid naming %s", tc.name, err, tc.want)
		}
	}
	if err := ValidateChecks([]Check{good, good}); err != nil {
		t.Fatalf("good checks: %v", err)
	}
	// The first bad check is named.
	err := ValidateChecks([]Check{good, {Key: ""}, {Key: ""}})
	if err == nil || !strings.Contains(err.Error(), "checks[1]") {
		t.Fatalf("two bad checks: %v, want checks[1] named", err)
	}
}

func TestCheckWithOneBadCheckAppliesNone(t *testing.T) {
	clock := testkit.NewClock(0)
	nodes := startNodes(t, clock, nil, "A", "B", "C")
	formCluster(clock, nodes...)
	a := nodes[0]
	var checks []Check
	for _, n := range nodes {
		for _, k := range keysOwnedBy(t, a.r, n.name, "bad", 3) {
			checks = append(checks, Check{Key: k, Limit: hourly(10), Cost: 1})
		}
	}
	checks = append(checks, Check{Key: "fine", Limit: hourly(10), Cost: 11}) // above capacity
	out := make([]Result, len(checks))
	for i := range out {
		out[i].Owner = "untouched"
	}
	for _, entry := range nodes {
		err := entry.r.Check(context.Background(), checks, out)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), fmt.Sprintf("checks[%d].cost", len(checks)-1)) {
			t.Fatalf("via %s: %v, want ErrInvalid naming the last check", entry.name, err)
		}
	}
	for _, n := range nodes {
		if n.store.Len() != 0 || n.r.local.Len() != 0 {
			t.Fatalf("%s holds %d keys (%d degraded) after a rejected batch", n.name, n.store.Len(), n.r.local.Len())
		}
		if got := testkit.Metric(t, n.reg, "ringlimit_forward_rpcs_total"); got != 0 {
			t.Fatalf("%s sent %v RPCs for a rejected batch", n.name, got)
		}
	}
	for i := range out {
		if out[i].Owner != "untouched" {
			t.Fatalf("out[%d] written: %+v", i, out[i])
		}
	}
	if err := a.r.Check(context.Background(), checks[:2], out[:1]); err == nil || errors.Is(err, ErrInvalid) {
		t.Fatalf("short out: %v, want a non-ErrInvalid error", err)
	}
}

// ---- 11. Close ----------------------------------------------------------------------

func TestCloseIdempotent(t *testing.T) {
	clock := testkit.NewClock(0)
	nodes := startNodes(t, clock, nil, "A", "B")
	formCluster(clock, nodes...)
	a := nodes[0]
	key := keysOwnedBy(t, a.r, "B", "close", 1)[0]
	if res := check1(t, a.r, key, hourly(10), 1); res.Owner != "B" {
		t.Fatalf("%+v", res)
	}
	ctx := context.Background()
	for i := range 3 {
		if err := a.r.Close(ctx); err != nil {
			t.Fatalf("Close #%d: %v", i+1, err)
		}
	}
	// Membership changes and leaves after Close are no-ops.
	a.r.SetMembers(membersOf(nodes...))
	if err := a.r.Leave(ctx); err != nil {
		t.Fatalf("Leave after Close: %v", err)
	}
	// goleak (TestMain) checks that nothing Close should stop is left running.
}

// A Check after Close must not wait for an answer that will never come.
// The Router does not close its Peers: a node closes the pool after it, and
// a check after both fails over at once. (The transport's side, a check on
// a connection closed under it, is peer's TestCheckOnClosedConnDoesNotHang.)
func TestCheckAfterCloseDoesNotHang(t *testing.T) {
	clock := testkit.NewClock(0)
	// Without replication: nobody stands in for B.
	nodes := startNodes(t, clock, func(c *nodeConfig) { c.Replication.Off = true }, "A", "B")
	formCluster(clock, nodes...)
	a := nodes[0]
	key := keysOwnedBy(t, a.r, "B", "closed", 1)[0]
	if err := a.r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	a.pool.Close(context.Background())
	for i := range 20 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		var out [1]Result
		start := time.Now()
		err := a.r.Check(ctx, []Check{{Key: key, Limit: hourly(10), Cost: 1, Mode: bucket.FailClosed}}, out[:])
		cancel()
		if err != nil || time.Since(start) > time.Second || !out[0].Degraded || out[0].Allowed {
			t.Fatalf("check %d after Close: %+v, err %v after %v, want a prompt degraded rejection", i, out[0], err, time.Since(start))
		}
	}
}

// peerClient dials addr's Peer service directly, as another node would.
func peerClient(t testing.TB, addr string) peerv1.PeerClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return peerv1.NewPeerClient(conn)
}
