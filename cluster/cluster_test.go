package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/ringlimit/ringlimit/clock"
	"github.com/ringlimit/ringlimit/internal/testonly/faultnet"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
)

func TestMain(m *testing.M) {
	// memberlist's Shutdown does not wait for a probe in flight: its
	// goroutine ends when the probe's ack timer fires, up to one probe
	// interval later (testkit.Ignored).
	testkit.Main(m)
}

// ---------------------------------------------------------------------------
// helpers

// testLog is a slog.Handler that counts records by message and forwards
// records at or above level to t.Log while the test runs (memberlist may log
// from timers after a node is closed; those are dropped, not sent to a
// finished test). RINGLIMIT_TEST_DEBUG=1 forwards everything.
type testLog struct {
	mu     sync.Mutex
	t      testing.TB
	name   string // node name prefixed to forwarded lines
	level  slog.Level
	done   bool
	counts map[string]int
}

func newTestLog(t testing.TB, name string) *testLog {
	l := &testLog{t: t, name: name, level: slog.LevelWarn, counts: map[string]int{}}
	if os.Getenv("RINGLIMIT_TEST_DEBUG") != "" {
		l.level = slog.LevelDebug
	}
	t.Cleanup(func() { // registered first, so it runs after the nodes close
		l.mu.Lock()
		l.done = true
		l.mu.Unlock()
	})
	return l
}

func (l *testLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *testLog) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *testLog) WithGroup(string) slog.Handler            { return l }
func (l *testLog) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.counts[r.Message]++
	if !l.done && r.Level >= l.level {
		var b strings.Builder
		r.Attrs(func(a slog.Attr) bool {
			fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
			return true
		})
		l.t.Logf("[%s] %s %s%s", l.name, r.Level, r.Message, b.String())
	}
	return nil
}

func (l *testLog) count(msg string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.counts[msg]
}

// recorder is a Listener that keeps every list it was given.
type recorder struct {
	mu       sync.Mutex
	calls    [][]Member
	inFlight atomic.Int32
	maxIn    atomic.Int32
	delay    time.Duration
}

func (r *recorder) MembersChanged(members []Member) {
	n := r.inFlight.Add(1)
	defer r.inFlight.Add(-1)
	for {
		m := r.maxIn.Load()
		if n <= m || r.maxIn.CompareAndSwap(m, n) {
			break
		}
	}
	time.Sleep(r.delay) // simulates a slow listener when delay > 0
	r.mu.Lock()
	r.calls = append(r.calls, members)
	r.mu.Unlock()
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.calls)
}

func (r *recorder) first() []Member {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.calls) == 0 {
		return nil
	}
	return r.calls[0]
}

func (r *recorder) last() []Member {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.calls) == 0 {
		return nil
	}
	return r.calls[len(r.calls)-1]
}

// saw reports whether some call listed member name in state s.
func (r *recorder) saw(name string, s State) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, call := range r.calls {
		for _, m := range call {
			if m.Name == name && m.State == s {
				return true
			}
		}
	}
	return false
}

type testNode struct {
	*Cluster
	name string
	grpc string
	rec  *recorder
	log  *testLog
}

type nodeOpt func(*Config)

func withBind(addr string) nodeOpt { return func(c *Config) { c.BindAddr = addr } }
func withSeeds(seeds ...string) nodeOpt {
	return func(c *Config) { c.Seeds = seeds }
}
func withListener(l Listener) nodeOpt { return func(c *Config) { c.Listener = l } }

// withPatience gives a member LAN failure detection (1s probes, 500ms
// probe timeout) in place of DefaultLocalConfig's 200ms and 100ms, for the
// tests that assert nobody is ever suspected: on a machine whose cores are
// busy, a member that gets no CPU for 100ms misses a local probe and is
// suspected although it is alive, which those tests would blame on what
// they test.
func withPatience(c *Config) {
	c.ProbeInterval, c.ProbeTimeout = time.Second, 500*time.Millisecond
}

// startNode starts a member with DefaultLocalConfig on 127.0.0.1:0 and closes
// it when the test ends.
func startNode(t *testing.T, name string, opts ...nodeOpt) *testNode {
	t.Helper()
	n := &testNode{name: name, grpc: name + ".grpc.test:9091", rec: &recorder{}, log: newTestLog(t, name)}
	cfg := DefaultLocalConfig()
	cfg.Name = name
	cfg.Clock = clock.System()
	cfg.PeerAddr = n.grpc
	cfg.Listener = n.rec
	cfg.Logger = slog.New(n.log)
	for _, o := range opts {
		o(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatalf("New(%s): %v", name, err)
	}
	n.Cluster = c
	t.Cleanup(func() {
		// Close returns once its leave is confirmed: at once on an idle
		// machine, later when nine members share a busy one.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := c.Close(ctx); err != nil {
			t.Errorf("Close(%s): %v", name, err)
		}
	})
	return n
}

// startCluster starts len(names) members, all but the first seeded with the
// first, and waits until every one sees all of them alive.
func startCluster(t *testing.T, names ...string) []*testNode {
	t.Helper()
	nodes := []*testNode{startNode(t, names[0])}
	for _, name := range names[1:] {
		nodes = append(nodes, startNode(t, name, withSeeds(nodes[0].LocalAddr())))
	}
	testkit.WaitFor(t, 10*time.Second, "cluster converges", func() error {
		return expectAlive(nodes, nodes...)
	})
	return nodes
}

// crash stops n's join loop and memberlist without a leave: to its peers
// this is what a kill -9 looks like. Close still works afterwards.
func (n *testNode) crash() {
	n.stopJoin()
	<-n.joinDone
	n.life.Lock()
	n.left = true // nothing to announce any more
	n.life.Unlock()
	_ = n.ml.Shutdown()
}

// expectAlive checks that every observer's Alive() is exactly want, with
// their metadata, and that the alive and suspect members of the list each
// observer's Listener was last told are the same.
func expectAlive(observers []*testNode, want ...*testNode) error {
	wantList := make([]Member, 0, len(want))
	for _, w := range want {
		wantList = append(wantList, Member{Name: w.name, PeerAddr: w.grpc, GossipAddr: w.LocalAddr(), State: StateAlive})
	}
	slices.SortFunc(wantList, func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
	for _, o := range observers {
		if got := o.Alive(); !slices.Equal(got, wantList) {
			return fmt.Errorf("%s: Alive() = %v, want %v", o.name, got, wantList)
		}
		if got := onRing(o.rec.last()); !slices.Equal(got, wantList) {
			return fmt.Errorf("%s: listener last told %v, want %v", o.name, got, wantList)
		}
	}
	return nil
}

// expectDeparted checks that every observer lists name in Members() and in
// the listener's latest list with state want, and not in Alive().
func expectDeparted(observers []*testNode, name string, want State) error {
	for _, o := range observers {
		if slices.ContainsFunc(o.Alive(), func(m Member) bool { return m.Name == name }) {
			return fmt.Errorf("%s: %s still in Alive()", o.name, name)
		}
		if !slices.ContainsFunc(o.rec.last(), func(m Member) bool { return m.Name == name && m.State == want }) {
			return fmt.Errorf("%s: %s not %s in listener's list %v", o.name, name, want, o.rec.last())
		}
		i := slices.IndexFunc(o.Members(), func(m Member) bool { return m.Name == name })
		if i < 0 {
			return fmt.Errorf("%s: %s missing from Members()", o.name, name)
		}
		if got := o.Members()[i].State; got != want {
			return fmt.Errorf("%s: %s state %q, want %q", o.name, name, got, want)
		}
	}
	return nil
}

// onRing returns the alive and suspect members of ms.
func onRing(ms []Member) []Member {
	var out []Member
	for _, m := range ms {
		if m.State.onRing() {
			out = append(out, m)
		}
	}
	return out
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// deadAddr returns a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// ---------------------------------------------------------------------------
// membership

func TestThreeNodesConverge(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, "a", "b", "c")
	names := func(ms []Member) []string {
		var out []string
		for _, m := range ms {
			out = append(out, m.Name)
		}
		return out
	}
	for _, n := range nodes {
		// Compared by name: on a loaded machine a member may turn suspect
		// between the two calls, and suspect members are on the ring too.
		if got, want := names(n.Members()), names(n.Alive()); !slices.Equal(got, want) {
			t.Errorf("%s: Members() = %v, want the alive list %v", n.name, got, want)
		}
		if n.rec.maxIn.Load() > 1 {
			t.Errorf("%s: listener ran concurrently", n.name)
		}
		if !strings.HasPrefix(n.LocalAddr(), "127.0.0.1:") || strings.HasSuffix(n.LocalAddr(), ":0") {
			t.Errorf("%s: LocalAddr() = %q, want 127.0.0.1 with the picked port", n.name, n.LocalAddr())
		}
	}
	// The first notification is the member alone, right after New.
	a := nodes[0]
	a.rec.mu.Lock()
	first := a.rec.calls[0]
	a.rec.mu.Unlock()
	if len(first) != 1 || first[0].Name != "a" {
		t.Errorf("a: first notification %v, want a alone", first)
	}
}

// A member that joins is told the whole cluster at once: the first list
// its Listener gets beyond itself holds every member its seed knew, never
// part of them (a ring over part of the members would give keys to
// owners that hold none of their state).
func TestJoinDeliversWholeCluster(t *testing.T) {
	t.Parallel()
	// Every member alive at once, nine of them: with local probes a busy
	// machine keeps one or another suspected (seen: b and j1 suspect 10 s
	// after j3 joined, with two busy loops on a slow machine).
	nodes := startClusterWith(t, []nodeOpt{withPatience}, "a", "b", "c")
	for i := range 6 {
		name := fmt.Sprintf("j%d", i)
		n := startNode(t, name, withPatience, withSeeds(nodes[0].LocalAddr()))
		nodes = append(nodes, n)
		testkit.WaitFor(t, 30*time.Second, name+" joins", func() error { return expectAlive(nodes, nodes...) })
		n.rec.mu.Lock()
		calls := slices.Clone(n.rec.calls)
		n.rec.mu.Unlock()
		for _, call := range calls {
			if len(call) == 1 {
				continue
			}
			if len(call) != len(nodes) {
				t.Errorf("%s was first told %d members %v, want all %d", name, len(call), call, len(nodes))
			}
			break
		}
	}
}

// A member that leaves while its last peer leaves too does not wait its
// whole budget for a broadcast nobody is left to receive: memberlist sends
// the leaving flag only to members alive or suspect, and once the last of
// them has left nothing would ever confirm it (seen: Close waiting 30 s when
// a test's three members closed one after the other on a busy machine).
func TestLeaveAsTheLastPeerLeaves(t *testing.T) {
	t.Parallel()
	// a never gossips: while b is alive, its leaving flag waits for a round
	// that does not come, as on a machine too busy to run a's gossip.
	quiet := func(c *Config) { c.GossipInterval = time.Hour }
	a := startNode(t, "a", quiet)
	b := startNode(t, "b", withSeeds(a.LocalAddr()))
	testkit.WaitFor(t, 10*time.Second, "a and b see each other", func() error { return expectAlive([]*testNode{a, b}, a, b) })

	done := make(chan error, 1)
	go func() { done <- a.Leave(ctxTimeout(t, time.Minute)) }()
	testkit.WaitFor(t, 10*time.Second, "a announcing its leave", func() error {
		if !a.leaving.Load() {
			return errors.New("a is not leaving yet")
		}
		return nil
	})
	if err := b.Close(ctxTimeout(t, 10*time.Second)); err != nil {
		t.Fatalf("Close(b): %v", err)
	}
	if err := <-done; err != nil {
		t.Errorf("a.Leave as b left: %v, want nil: no member is left to tell", err)
	}
}

func TestGracefulLeave(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, "a", "b", "c")
	a, b, c := nodes[0], nodes[1], nodes[2]

	if err := b.Leave(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatalf("Leave: %v", err)
	}
	if err := b.Leave(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatalf("second Leave: %v", err)
	}
	testkit.WaitFor(t, 5*time.Second, "survivors see b left", func() error {
		if err := expectAlive([]*testNode{a, c}, a, c); err != nil {
			return err
		}
		return expectDeparted([]*testNode{a, c}, "b", StateLeft)
	})
	if slices.ContainsFunc(b.Alive(), func(m Member) bool { return m.Name == "b" }) {
		t.Errorf("b: still lists itself in Alive() after Leave: %v", b.Alive())
	}
	if err := b.Close(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatalf("Close after Leave: %v", err)
	}
	// The survivors keep their verdict after b is gone.
	if err := expectDeparted([]*testNode{a, c}, "b", StateLeft); err != nil {
		t.Error(err)
	}
}

func TestCloseLeavesAndIsIdempotent(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, "a", "b")
	a, b := nodes[0], nodes[1]

	start := time.Now()
	if err := b.Close(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatalf("Close: %v", err)
	}
	t.Logf("Close took %v", time.Since(start))
	if err := b.Close(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := b.Leave(ctxTimeout(t, time.Second)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Leave after Close = %v, want ErrClosed", err)
	}
	// Close announced the departure: a sees b left (not dead).
	testkit.WaitFor(t, 5*time.Second, "a sees b left", func() error {
		return expectDeparted([]*testNode{a}, "b", StateLeft)
	})
	// b's own view keeps the last state it knew, itself as left.
	if err := expectDeparted([]*testNode{b}, "b", StateLeft); err != nil {
		t.Error(err)
	}
}

// TestLeaveWithEndedContext: Leave given a context that has
// already ended (cancelled, or past its deadline) announce the leave and
// return at once, without waiting for the broadcast, and say it was not
// confirmed. The leaving member gossips and probes once an hour, so that
// none of its broadcasts goes out during the test: a Leave that waited would wait out its whole
// budget (leaveWaitWithoutDeadline for a cancelled context, once per
// broadcast). The bound below only catches that wait; the time taken is
// logged.
func TestLeaveWithEndedContext(t *testing.T) {
	t.Parallel()
	quiet := func(c *Config) { c.GossipInterval, c.ProbeInterval = time.Hour, time.Hour }
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	for _, tc := range []struct {
		name string
		ctx  context.Context
	}{
		{"Cancelled", cancelled},
		{"Expired", expired},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := startNode(t, "a")
			b := startNode(t, "b", quiet, withSeeds(a.LocalAddr()))
			testkit.WaitFor(t, 10*time.Second, "a and b see each other", func() error {
				return expectAlive([]*testNode{a, b}, a, b)
			})
			start := time.Now()
			err := b.Leave(tc.ctx)
			took := time.Since(start)
			t.Logf("Leave with a context %s returned after %v: %v", tc.name, took.Round(time.Microsecond), err)
			if !errors.Is(err, tc.ctx.Err()) {
				t.Errorf("Leave = %v, want an error wrapping %v (leave not confirmed)", err, tc.ctx.Err())
			}
			if took >= leaveWaitWithoutDeadline {
				t.Errorf("Leave took %v: it waited for the broadcast", took)
			}
			if err := b.Leave(ctxTimeout(t, time.Second)); err != nil {
				t.Errorf("second Leave = %v, want nil (the leave was announced)", err)
			}
		})
	}
}

// TestAbruptDeath checks the failure-detection bound that DefaultLocalConfig
// promises: every survivor drops a crashed member within 2s. It is a
// correctness bound of the configured timings, not a benchmark; the measured
// figures are logged.
func TestAbruptDeath(t *testing.T) {
	const bound = 2 * time.Second
	for run := 1; run <= 3; run++ {
		t.Run(fmt.Sprintf("run%d", run), func(t *testing.T) {
			nodes := startCluster(t, "a", "b", "c")
			survivors, victim := nodes[:2], nodes[2]

			start := time.Now()
			victim.crash()
			dropped := make(map[string]time.Duration)
			testkit.WaitFor(t, 10*time.Second, "survivors drop c", func() error {
				for _, s := range survivors {
					if _, ok := dropped[s.name]; ok {
						continue
					}
					if !slices.ContainsFunc(s.Alive(), func(m Member) bool { return m.Name == "c" }) {
						dropped[s.name] = time.Since(start)
					}
				}
				if len(dropped) < len(survivors) {
					return fmt.Errorf("dropped so far: %v", dropped)
				}
				return nil
			})
			worst := max(dropped["a"], dropped["b"])
			t.Logf("crash detected: a after %v, b after %v (bound %v)",
				dropped["a"].Round(time.Millisecond), dropped["b"].Round(time.Millisecond), bound)
			if worst > bound {
				t.Errorf("a survivor took %v to drop the crashed member, want ≤ %v", worst, bound)
			}
			testkit.WaitFor(t, 5*time.Second, "survivors see c dead", func() error {
				return expectDeparted(survivors, "c", StateDead)
			})
			// Suspicion always starts with some survivor's own failed probe,
			// which this package reports as StateSuspect before the death.
			if !survivors[0].rec.saw("c", StateSuspect) && !survivors[1].rec.saw("c", StateSuspect) {
				t.Errorf("no survivor reported c as suspect before it died (memberlist log line changed?)")
			}
		})
	}
}

func TestRestartSameNameAndAddress(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"crash", "leave"} {
		t.Run("after "+how, func(t *testing.T) {
			t.Parallel()
			nodes := startCluster(t, "a", "b", "c")
			a, b, c := nodes[0], nodes[1], nodes[2]
			addr := c.LocalAddr()

			want := StateDead
			if how == "crash" {
				c.crash()
			} else {
				want = StateLeft
				if err := c.Close(ctxTimeout(t, 5*time.Second)); err != nil {
					t.Fatalf("Close: %v", err)
				}
			}
			testkit.WaitFor(t, 5*time.Second, "survivors see c gone", func() error {
				return expectDeparted([]*testNode{a, b}, "c", want)
			})

			c2 := startNode(t, "c", withBind(addr), withSeeds(a.LocalAddr()))
			if c2.LocalAddr() != addr {
				t.Fatalf("restarted c on %s, want %s", c2.LocalAddr(), addr)
			}
			testkit.WaitFor(t, 10*time.Second, "restarted c is alive everywhere", func() error {
				return expectAlive([]*testNode{a, b, c2}, a, b, c2)
			})
		})
	}
}

// TestRestartNewAddressAtOnce: a member that crashes and comes back under
// the same name from another address is on every member's list at once,
// long before the old instance could be declared dead (failure detection is
// slowed to tens of seconds here), and the list has one entry for the name.
func TestRestartNewAddressAtOnce(t *testing.T) {
	t.Parallel()
	slow := func(c *Config) { c.SuspicionMult = 50 }
	a := startNode(t, "a", slow)
	b := startNode(t, "b", slow, withSeeds(a.LocalAddr()))
	c := startNode(t, "c", slow, withSeeds(a.LocalAddr()))
	testkit.WaitFor(t, 10*time.Second, "cluster converges", func() error { return expectAlive([]*testNode{a, b, c}, a, b, c) })
	old := c.LocalAddr()
	c.crash()

	c2 := startNode(t, "c", slow, withSeeds(b.LocalAddr()))
	if c2.LocalAddr() == old {
		t.Fatalf("restarted c on its old address %s", old)
	}
	start := time.Now()
	testkit.WaitFor(t, 3*time.Second, "restarted c is alive everywhere with its new address", func() error {
		for _, n := range []*testNode{a, b, c2} {
			var cs []Member
			for _, m := range n.Members() {
				if m.Name == "c" {
					cs = append(cs, m)
				}
			}
			if len(cs) != 1 || cs[0].State != StateAlive || cs[0].GossipAddr != c2.LocalAddr() {
				return fmt.Errorf("%s lists c as %+v, want one alive entry at %s", n.name, cs, c2.LocalAddr())
			}
			if got := len(onRing(n.Members())); got != 3 {
				return fmt.Errorf("%s has %d members on the ring, want 3", n.name, got)
			}
		}
		return nil
	})
	t.Logf("restarted c alive everywhere after %v", time.Since(start).Round(time.Millisecond))
	if n := a.log.count("cluster: another process gossips under this member's name; the later one stands for it"); n != 0 {
		t.Errorf("a logged %d duplicate-name errors for a restart", n)
	}
}

func TestSplitInstance(t *testing.T) {
	at := time.Unix(1_700_000_000, 123)
	for _, tc := range []struct{ in, name, tag string }{
		{instanceName("node-1", at), "node-1", "17979cfe362a007b"},
		{instanceName("a@b", at), "a@b", "17979cfe362a007b"},
		{"node-1", "node-1", ""},
		{"node-1@17979cfe362a007", "node-1@17979cfe362a007", ""},
		{"node-1@17979CFE362A007B", "node-1@17979CFE362A007B", ""},
		{"@17979cfe362a007b", "@17979cfe362a007b", ""},
	} {
		if name, tag := splitInstance(tc.in); name != tc.name || tag != tc.tag {
			t.Errorf("splitInstance(%q) = %q, %q, want %q, %q", tc.in, name, tag, tc.name, tc.tag)
		}
	}
	if instanceName("n", at) >= instanceName("n", at.Add(time.Nanosecond)) {
		t.Errorf("a later instance's name does not sort after an earlier one's")
	}
}

// ---------------------------------------------------------------------------
// joining

func TestJoinRetry(t *testing.T) {
	t.Parallel()

	t.Run("dead seed only", func(t *testing.T) {
		t.Parallel()
		start := time.Now()
		n := startNode(t, "orphan", withSeeds(deadAddr(t)), func(c *Config) { c.JoinRetryInterval = 20 * time.Millisecond })
		if d := time.Since(start); d > time.Second {
			t.Errorf("New took %v with an unreachable seed, want it to return at once", d)
		}
		testkit.WaitFor(t, 5*time.Second, "two failed join attempts", func() error {
			if got := n.log.count(msgJoinFailed); got < 2 {
				return fmt.Errorf("%d failed attempts logged", got)
			}
			return nil
		})
		// It knows itself, but it is not a cluster of its own: it has not
		// joined, and its Listener has been told nothing.
		if got := n.Alive(); len(got) != 1 || got[0].Name != "orphan" {
			t.Errorf("Alive() = %v, want orphan alone", got)
		}
		if n.Joined() {
			t.Error("Joined() = true with its only seed unreachable")
		}
		if got := n.rec.count(); got != 0 {
			t.Errorf("listener told %d times before the first join (last %v), want 0", got, n.rec.last())
		}
		start = time.Now()
		if err := n.Close(ctxTimeout(t, 5*time.Second)); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("Close took %v while retrying to join, want it prompt", d)
		}
	})

	t.Run("dead and alive seeds", func(t *testing.T) {
		t.Parallel()
		a := startNode(t, "a")
		b := startNode(t, "b", withSeeds(deadAddr(t), a.LocalAddr()))
		testkit.WaitFor(t, 5*time.Second, "b joins a", func() error {
			return expectAlive([]*testNode{a, b}, a, b)
		})
		if got := b.log.count(msgJoinFailed); got != 0 {
			t.Errorf("b logged %d failed join attempts, want 0 (one seed answered)", got)
		}
	})

	t.Run("seed comes up later", func(t *testing.T) {
		t.Parallel()
		later := deadAddr(t)
		orphan := startNode(t, "orphan", withSeeds(later), func(c *Config) { c.JoinRetryInterval = 50 * time.Millisecond })
		testkit.WaitFor(t, 5*time.Second, "two failed join attempts", func() error {
			if got := orphan.log.count(msgJoinFailed); got < 2 {
				return fmt.Errorf("%d failed attempts logged", got)
			}
			return nil
		})
		seed := startNode(t, "seed", withBind(later))
		testkit.WaitFor(t, 5*time.Second, "orphan joins the late seed", func() error {
			return expectAlive([]*testNode{orphan, seed}, orphan, seed)
		})
		if first := orphan.rec.first(); len(first) != 2 {
			t.Errorf("orphan's listener was first told %v, want orphan and seed together", first)
		}
	})

	// A member whose seeds are down is joined by another: it is in a
	// cluster from then on, though none of its seeds ever answered, and
	// without waiting for its next attempt (an hour away here).
	t.Run("joined by another member first", func(t *testing.T) {
		t.Parallel()
		first := startNode(t, "first", withSeeds(deadAddr(t)), func(c *Config) { c.JoinRetryInterval = time.Hour })
		testkit.WaitFor(t, 5*time.Second, "a failed join attempt", func() error {
			if got := first.log.count(msgJoinFailed); got < 1 {
				return fmt.Errorf("%d failed attempts logged", got)
			}
			return nil
		})
		if first.Joined() || first.rec.count() != 0 {
			t.Fatalf("before anyone joined it: Joined() = %v, listener told %d times, want false and 0", first.Joined(), first.rec.count())
		}
		second := startNode(t, "second", withSeeds(first.LocalAddr()))
		testkit.WaitFor(t, 5*time.Second, "both list both", func() error {
			return expectAlive([]*testNode{first, second}, first, second)
		})
		if !first.Joined() {
			t.Error("first: Joined() = false after second joined it")
		}
		if got := first.rec.first(); len(got) != 2 {
			t.Errorf("first's listener was first told %v, want first and second together", got)
		}
	})

}

func TestOwnAddressIgnoredInSeeds(t *testing.T) {
	c := &Cluster{
		cfg:       Config{BindAddr: "0.0.0.0:7946", Seeds: []string{"10.0.0.1:7946", "10.0.0.2:7946", "0.0.0.0:7946", "10.0.0.3:7946"}},
		localAddr: "10.0.0.2:7946",
	}
	if got, want := c.otherSeeds(), []string{"10.0.0.1:7946", "10.0.0.3:7946"}; !slices.Equal(got, want) {
		t.Errorf("otherSeeds() = %v, want %v", got, want)
	}
}

// ---------------------------------------------------------------------------
// listener and admission

func TestSlowListenerDoesNotStallMembership(t *testing.T) {
	t.Parallel()
	slow := &recorder{delay: 150 * time.Millisecond}
	a := startNode(t, "a", withListener(slow))
	a.rec = slow
	b := startNode(t, "b", withSeeds(a.LocalAddr()))
	c := startNode(t, "c", withSeeds(a.LocalAddr()))

	// Membership converges on a regardless of its slow listener...
	testkit.WaitFor(t, 5*time.Second, "a's view converges", func() error {
		if got := len(a.Alive()); got != 3 {
			return fmt.Errorf("a sees %d alive", got)
		}
		return nil
	})
	// ...and the listener eventually gets the final list, one call at a time.
	testkit.WaitFor(t, 5*time.Second, "listeners catch up", func() error {
		return expectAlive([]*testNode{a, b, c}, a, b, c)
	})
	if got := slow.maxIn.Load(); got != 1 {
		t.Errorf("listener ran %d calls concurrently, want 1", got)
	}
	slow.mu.Lock()
	calls := len(slow.calls)
	slow.mu.Unlock()
	t.Logf("slow listener got %d calls", calls)
}

func TestForeignMemberRefused(t *testing.T) {
	t.Parallel()
	a := startNode(t, "a")

	// A plain memberlist node without ringlimit metadata.
	mc := memberlist.DefaultLocalConfig()
	mc.Name = "intruder"
	mc.BindAddr = "127.0.0.1"
	mc.BindPort = 0
	mc.LogOutput = io.Discard
	ml, err := memberlist.Create(mc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ml.Shutdown() })
	_, _ = ml.Join([]string{a.LocalAddr()})

	testkit.WaitFor(t, 5*time.Second, "a refuses the intruder", func() error {
		if a.log.count("cluster: refusing member") == 0 {
			return errors.New("not refused yet")
		}
		return nil
	})
	if slices.ContainsFunc(a.Members(), func(m Member) bool { return m.Name == "intruder" }) {
		t.Errorf("a admitted a member without metadata: %v", a.Members())
	}
}

// ---------------------------------------------------------------------------
// configuration

func TestConfigValidate(t *testing.T) {
	valid := func() Config {
		c := DefaultLocalConfig()
		c.Name = "n1"
		c.PeerAddr = "127.0.0.1:9091"
		c.Clock = clock.System()
		return c
	}
	tests := []struct {
		name    string
		mutate  func(*Config)
		wantErr string // substring; "" means valid
	}{
		{"local defaults", func(*Config) {}, ""},
		{"LAN defaults", func(c *Config) {
			*c = DefaultLANConfig()
			c.Name, c.PeerAddr, c.Clock = "n1", "10.0.0.1:9091", clock.System()
		}, ""},
		{"zero timings take LAN defaults", func(c *Config) {
			*c = Config{Name: "n1", BindAddr: "127.0.0.1:0", PeerAddr: "127.0.0.1:9091", Clock: clock.System()}
		}, ""},
		{"no clock", func(c *Config) { c.Clock = nil }, "cluster: Config.Clock is required"},
		{"hostname seed", func(c *Config) { c.Seeds = []string{"node-2.example:7946"} }, ""},
		{"empty name", func(c *Config) { c.Name = "" }, "Name is required"},
		{"missing PeerAddr", func(c *Config) { c.PeerAddr = "" }, "PeerAddr is required"},
		{"PeerAddr without port", func(c *Config) { c.PeerAddr = "127.0.0.1" }, "PeerAddr"},
		{"PeerAddr port 0", func(c *Config) { c.PeerAddr = "127.0.0.1:0" }, "port 0"},
		{"PeerAddr unspecified", func(c *Config) { c.PeerAddr = "0.0.0.0:9091" }, "not dialable"},
		{"PeerAddr too long", func(c *Config) { c.PeerAddr = strings.Repeat("h", MaxAddrLen) + ":9091" }, "longer than"},
		{"missing BindAddr", func(c *Config) { c.BindAddr = "" }, "BindAddr is required"},
		{"BindAddr without port", func(c *Config) { c.BindAddr = "127.0.0.1" }, "BindAddr"},
		{"BindAddr hostname", func(c *Config) { c.BindAddr = "localhost:7946" }, "not an IP address"},
		{"BindAddr bad port", func(c *Config) { c.BindAddr = "127.0.0.1:99999" }, "port"},
		{"AdvertiseAddr hostname", func(c *Config) { c.AdvertiseAddr = "example.com:7946" }, "AdvertiseAddr"},
		{"seed without port", func(c *Config) { c.Seeds = []string{"10.0.0.2"} }, "Seeds[0]"},
		{"seed port 0", func(c *Config) { c.Seeds = []string{"10.0.0.2:7946", "10.0.0.3:0"} }, "Seeds[1]"},
		{"negative probe interval", func(c *Config) { c.ProbeInterval = -time.Second }, "ProbeInterval must not be negative"},
		{"negative rejoin interval", func(c *Config) { c.RejoinInterval = -time.Second }, "RejoinInterval must not be negative"},
		// Validate does not use the Transport, so a typed nil will do here.
		{"transport, no BindAddr", func(c *Config) { c.Transport = (*faultnet.Transport)(nil); c.BindAddr = "" }, ""},
		{"transport ignores a bad BindAddr", func(c *Config) { c.Transport = (*faultnet.Transport)(nil); c.BindAddr = "x" }, ""},
		{"probe timeout ≥ interval", func(c *Config) { c.ProbeTimeout = c.ProbeInterval }, "below ProbeInterval"},
		{"negative suspicion mult", func(c *Config) { c.SuspicionMult = -1 }, "SuspicionMult"},
		{"keys of 16, 24 and 32 bytes", func(c *Config) {
			c.Keys = [][]byte{make([]byte, 16), bytes.Repeat([]byte{1}, 24), bytes.Repeat([]byte{2}, 32)}
		}, ""},
		{"key of 15 bytes", func(c *Config) { c.Keys = [][]byte{make([]byte, 32), make([]byte, 15)} }, "Keys[1]: must be 16, 24 or 32 bytes"},
		{"key of 33 bytes", func(c *Config) { c.Keys = [][]byte{make([]byte, 33)} }, "Keys[0]: must be 16, 24 or 32 bytes"},
		{"empty key", func(c *Config) { c.Keys = [][]byte{{}} }, "Keys[0]"},
		{"repeated key", func(c *Config) { c.Keys = [][]byte{make([]byte, 16), make([]byte, 16)} }, "Keys[1] repeats Keys[0]"},
		{"label of 255 bytes", func(c *Config) { c.Label = strings.Repeat("l", 255) }, ""},
		{"label of 256 bytes", func(c *Config) { c.Label = strings.Repeat("l", 256) }, "Label must be at most 255 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := valid()
			tt.mutate(&cfg)
			before := fmt.Sprint(cfg)
			err := cfg.Validate()
			if fmt.Sprint(cfg) != before {
				t.Errorf("Validate modified the config")
			}
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("Validate() = %v, want an error containing %q", err, tt.wantErr)
			case err != nil && !strings.HasPrefix(err.Error(), "cluster: "):
				t.Errorf("error %q lacks the package prefix", err)
			}
			if err != nil {
				if _, nerr := New(cfg); nerr == nil || nerr.Error() != err.Error() {
					t.Errorf("New() = %v, want the Validate error %v", nerr, err)
				}
			}
		})
	}
}

func TestNewBindError(t *testing.T) {
	t.Parallel()
	a := startNode(t, "a")
	cfg := DefaultLocalConfig()
	cfg.Name = "b"
	cfg.Clock = clock.System()
	cfg.PeerAddr = "127.0.0.1:9091"
	cfg.BindAddr = a.LocalAddr() // taken
	if c, err := New(cfg); err == nil {
		_ = c.Close(ctxTimeout(t, time.Second))
		t.Fatal("New on a port in use succeeded")
	}
}

func TestDefaultLocalConfigIsBuiltFromLAN(t *testing.T) {
	lan, local := DefaultLANConfig(), DefaultLocalConfig()
	ml := memberlist.DefaultLANConfig()
	if lan.ProbeInterval != ml.ProbeInterval || lan.SuspicionMult != ml.SuspicionMult || lan.TCPTimeout != ml.TCPTimeout {
		t.Errorf("DefaultLANConfig does not carry memberlist's LAN timings: %+v", lan)
	}
	if local.ProbeInterval >= lan.ProbeInterval || local.GossipInterval >= lan.GossipInterval {
		t.Errorf("DefaultLocalConfig is not faster than LAN: %+v", local)
	}
	if lan.DepartedRetention != local.DepartedRetention || lan.DeadNodeReclaimTime != local.DeadNodeReclaimTime {
		t.Errorf("DefaultLocalConfig changed fields unrelated to timing")
	}
}

// TestLifeguardStaysOn: whatever the timings, the memberlist configuration
// keeps Lifeguard (local health awareness: a member whose own probes fail
// probes less often, up to AwarenessMaxMultiplier × ProbeInterval; the
// suspect message sent with a probe so that the suspected member can
// refute at once; suspicion that shortens with confirmations) and carries
// the configured suspicion multipliers: they are what keeps a live member
// that is starved of CPU from being declared dead.
func TestLifeguardStaysOn(t *testing.T) {
	for name, cfg := range map[string]Config{"LAN": DefaultLANConfig(), "local": DefaultLocalConfig()} {
		cfg.Name, cfg.PeerAddr = "n1", "127.0.0.1:9091"
		c := &Cluster{cfg: cfg.withDefaults(), mlName: "n1@0"}
		mc := c.memberlistConfig()
		lan := memberlist.DefaultLANConfig()
		if mc.AwarenessMaxMultiplier != lan.AwarenessMaxMultiplier || mc.AwarenessMaxMultiplier < 2 {
			t.Errorf("%s: AwarenessMaxMultiplier %d, want memberlist's %d (local health awareness on)", name, mc.AwarenessMaxMultiplier, lan.AwarenessMaxMultiplier)
		}
		if mc.IndirectChecks != lan.IndirectChecks || mc.DisableTcpPings {
			t.Errorf("%s: IndirectChecks %d, DisableTcpPings %v: a probe must not rest on one UDP round trip", name, mc.IndirectChecks, mc.DisableTcpPings)
		}
		if mc.SuspicionMult != cfg.SuspicionMult || mc.SuspicionMaxTimeoutMult != cfg.SuspicionMaxTimeoutMult ||
			mc.ProbeInterval != cfg.ProbeInterval || mc.ProbeTimeout != cfg.ProbeTimeout {
			t.Errorf("%s: memberlist got suspicion ×%d (max ×%d), probes %v/%v; configured ×%d (max ×%d), %v/%v", name,
				mc.SuspicionMult, mc.SuspicionMaxTimeoutMult, mc.ProbeInterval, mc.ProbeTimeout,
				cfg.SuspicionMult, cfg.SuspicionMaxTimeoutMult, cfg.ProbeInterval, cfg.ProbeTimeout)
		}
	}
}

// ---------------------------------------------------------------------------
// metadata and memberlist's log lines

func TestMetaRoundTrip(t *testing.T) {
	for _, m := range []meta{
		{peerAddr: "127.0.0.1:9091"},
		{peerAddr: "node-1.example:9091", leaving: true},
		{peerAddr: "[::1]:9091"},
		{peerAddr: strings.Repeat("h", MaxAddrLen-5) + ":9091", apiAddr: strings.Repeat("a", MaxAddrLen-5) + ":9090",
			httpAddr: strings.Repeat("w", MaxAddrLen-5) + ":8080"},
		{peerAddr: "10.0.0.1:9191", apiAddr: "10.0.0.1:9091"},
		{peerAddr: "10.0.0.1:9191", httpAddr: "10.0.0.1:8080"},
	} {
		b := encodeMeta(m)
		if len(b) > memberlist.MetaMaxSize {
			t.Errorf("encodeMeta(%v) is %d bytes, over memberlist's limit", m, len(b))
		}
		got, err := decodeMeta(b)
		if err != nil || got != m {
			t.Errorf("decodeMeta(encodeMeta(%v)) = %v, %v", m, got, err)
		}
	}
	for _, b := range [][]byte{nil, {3}, {2, 0, 3, 'a', ':', '1'}, {3, 0, 3}, []byte("\x03\x00\x07\x00no-port"),
		[]byte("\x03\x00\x09\x00h:1"), []byte("\x03\x00\x03\x00h:1no-port"), []byte("\x03\x00\x03\x03h:1h:2x"),
		[]byte("\x03\x00\x03\x00h:1:0"), []byte("\x03\x00\x03\x08h:1")} {
		if m, err := decodeMeta(b); err == nil {
			t.Errorf("decodeMeta(%q) = %v, want an error", b, m)
		}
	}
	// Unknown flag bits are ignored (forward compatibility).
	if m, err := decodeMeta([]byte("\x03\xfe\x03\x00h:1")); err != nil || m.leaving || m.peerAddr != "h:1" || m.apiAddr != "" {
		t.Errorf("decodeMeta with unknown flags = %v, %v", m, err)
	}
}

func TestMemberlistLogLines(t *testing.T) {
	tests := []struct {
		line      string
		level     slog.Level
		msg       string
		suspected string
	}{
		{"[DEBUG] memberlist: Stream connection from=127.0.0.1:1\n", slog.LevelDebug, "memberlist: Stream connection from=127.0.0.1:1", ""},
		{"[INFO] memberlist: Suspect node-2 has failed, no acks received\n", slog.LevelInfo, "memberlist: Suspect node-2 has failed, no acks received", "node-2"},
		{"[WARN] memberlist: Refuting a suspect message (from: b)\n", slog.LevelWarn, "memberlist: Refuting a suspect message (from: b)", ""},
		{"[ERR] memberlist: Failed fallback TCP ping: x\n", slog.LevelError, "memberlist: Failed fallback TCP ping: x", ""},
		{"no prefix", slog.LevelInfo, "no prefix", ""},
	}
	for _, tt := range tests {
		level, msg := parseMemberlistLine(tt.line)
		if level != tt.level || msg != tt.msg {
			t.Errorf("parseMemberlistLine(%q) = %v, %q; want %v, %q", tt.line, level, msg, tt.level, tt.msg)
		}
		name, ok := suspectedName(msg)
		if name != tt.suspected || ok != (tt.suspected != "") {
			t.Errorf("suspectedName(%q) = %q, %v; want %q", msg, name, ok, tt.suspected)
		}
	}

	// The adapter routes lines into slog at their level.
	h := &testLog{t: t, level: slog.LevelError + 1, counts: map[string]int{}}
	var suspects []string
	l := newMemberlistLogger(newLogWriter(slog.New(h), func(n string) { suspects = append(suspects, n) }, clock.System()))
	l.Printf("[WARN] memberlist: hello")
	l.Printf("[INFO] memberlist: Suspect x has failed, no acks received")
	if h.count("memberlist: hello") != 1 || !slices.Equal(suspects, []string{"x"}) {
		t.Errorf("adapter: counts %v, suspects %v", h.counts, suspects)
	}
}
