package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/ringlimit/ringlimit/internal/testonly/faultnet"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
)

// healWithin bounds how long a healed partition may take to become one
// cluster again with DefaultLocalConfig (RejoinInterval 1s): a round or two,
// plus a generous margin for -race on a loaded machine.
const healWithin = 10 * time.Second

const msgBack = "cluster: member is back after being declared dead"

// newFaultnet returns an in-memory network closed when the test ends, after
// the nodes started on it (cleanups run last-registered first).
func newFaultnet(t *testing.T) *faultnet.Network {
	t.Helper()
	fn := faultnet.New()
	t.Cleanup(fn.Close)
	return fn
}

func withTransport(tr memberlist.NodeAwareTransport) nodeOpt {
	return func(c *Config) { c.Transport = tr }
}

// startNetNode starts a member whose gossip goes over fn.
func startNetNode(t *testing.T, fn *faultnet.Network, name string, opts ...nodeOpt) *testNode {
	t.Helper()
	tr, err := fn.Transport(name)
	if err != nil {
		t.Fatal(err)
	}
	return startNode(t, name, append([]nodeOpt{withTransport(tr)}, opts...)...)
}

// startNetCluster is startCluster over fn.
func startNetCluster(t *testing.T, fn *faultnet.Network, names ...string) []*testNode {
	t.Helper()
	nodes := []*testNode{startNetNode(t, fn, names[0])}
	for _, name := range names[1:] {
		nodes = append(nodes, startNetNode(t, fn, name, withSeeds(nodes[0].LocalAddr())))
	}
	testkit.WaitFor(t, 10*time.Second, "cluster converges", func() error { return expectOneCluster(nodes) })
	return nodes
}

// expectOneCluster checks that every node knows exactly the nodes, all
// alive, and that its Listener was last told so.
func expectOneCluster(nodes []*testNode) error {
	if err := expectAlive(nodes, nodes...); err != nil {
		return err
	}
	for _, n := range nodes {
		if got := n.Members(); len(got) != len(nodes) {
			return fmt.Errorf("%s: Members() = %v, want %d alive members", n.name, got, len(nodes))
		}
		if got := n.rec.last(); len(got) != len(nodes) {
			return fmt.Errorf("%s: listener last told %v, want %d alive members", n.name, got, len(nodes))
		}
	}
	return nil
}

// expectState checks that o lists member name in state want.
func expectState(o *testNode, name string, want State) error {
	for _, m := range o.Members() {
		if m.Name == name {
			if m.State != want {
				return fmt.Errorf("%s sees %s %s, want %s", o.name, name, m.State, want)
			}
			return nil
		}
	}
	return fmt.Errorf("%s does not know %s", o.name, name)
}

func TestPartitionHeals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// extra time the partition lasts after both sides declared the other
		// dead. Past GossipToTheDeadTime (2s) memberlist has forgotten the
		// other side, and the heal takes another path (a new member rather
		// than a refuted death).
		extra time.Duration
	}{
		{"heal at once", 0},
		{"heal after memberlist forgot", 3 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fn := newFaultnet(t)
			nodes := startNetCluster(t, fn, "a", "b", "c")
			a, b, c := nodes[0], nodes[1], nodes[2]

			start := time.Now()
			fn.Isolate("c")
			// c, cut off, finds its own probes failing and slows them
			// (memberlist's awareness), so on a busy machine it may take
			// longer than 10 s to declare the others dead.
			testkit.WaitFor(t, 30*time.Second, "each side sees the other dead", func() error {
				return errors.Join(
					expectState(a, "c", StateDead), expectState(b, "c", StateDead),
					expectState(c, "a", StateDead), expectState(c, "b", StateDead))
			})
			t.Logf("both sides saw the other dead %v after the cut", time.Since(start).Round(time.Millisecond))
			time.Sleep(tc.extra) // the partition lasts; nothing to poll for

			healed := time.Now()
			fn.HealAll()
			testkit.WaitFor(t, healWithin, "one cluster again after the heal", func() error { return expectOneCluster(nodes) })
			t.Logf("one cluster again %v after the heal", time.Since(healed).Round(time.Millisecond))

			for _, s := range []struct {
				o    *testNode
				name string
			}{{a, "c"}, {b, "c"}, {c, "a"}, {c, "b"}} {
				if !s.o.rec.saw(s.name, StateDead) {
					t.Errorf("%s: listener was never told %s dead", s.o.name, s.name)
				}
			}
			for _, n := range nodes {
				if n.log.count(msgBack) == 0 {
					t.Errorf("%s: no %q log", n.name, msgBack)
				}
			}
		})
	}
}

// TestAsymmetricLinkHeals cuts everything c sends, and nothing it receives:
// the others declare c dead while c keeps hearing them (and refutes in
// vain). A single one-way cut between two of three members is hidden by
// indirect probes through the third, so both of c's outgoing links are cut.
func TestAsymmetricLinkHeals(t *testing.T) {
	t.Parallel()
	fn := newFaultnet(t)
	nodes := startNetCluster(t, fn, "a", "b", "c")
	a, b := nodes[0], nodes[1]

	start := time.Now()
	fn.CutOneWay("c", "a")
	fn.CutOneWay("c", "b")
	testkit.WaitFor(t, 30*time.Second, "a and b see c dead", func() error {
		return errors.Join(expectState(a, "c", StateDead), expectState(b, "c", StateDead))
	})
	t.Logf("a and b saw c dead %v after the cut", time.Since(start).Round(time.Millisecond))
	// Past GossipToTheDeadTime (2s), a and b no longer gossip to c: only
	// re-joining brings it back.
	time.Sleep(3 * time.Second)

	healed := time.Now()
	fn.HealAll()
	testkit.WaitFor(t, healWithin, "one cluster again after the heal", func() error { return expectOneCluster(nodes) })
	t.Logf("one cluster again %v after the heal", time.Since(healed).Round(time.Millisecond))
}

// resolver is a Config.Resolver that maps hostnames to addresses and SRV
// names to targets as the test sets, and counts lookups.
type resolver struct {
	mu      sync.Mutex
	addrs   map[string][]string
	srv     map[string][]*net.SRV
	lookups atomic.Int64
}

func (r *resolver) setSRV(name string, srvs ...*net.SRV) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.srv == nil {
		r.srv = map[string][]*net.SRV{}
	}
	r.srv[name] = srvs
}

func (r *resolver) LookupSRV(_ context.Context, service, proto, name string) (string, []*net.SRV, error) {
	r.lookups.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	if service != "" || proto != "" {
		return "", nil, fmt.Errorf("LookupSRV(%q, %q, %q): want the whole name in name", service, proto, name)
	}
	if s, ok := r.srv[name]; ok {
		return name, slices.Clone(s), nil
	}
	return "", nil, &net.DNSError{Err: "no such host", Name: name, IsNotFound: true}
}

func newResolver() *resolver { return &resolver{addrs: map[string][]string{}} }

func (r *resolver) set(host string, addrs ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.addrs[host] = addrs
}

func (r *resolver) LookupHost(_ context.Context, host string) ([]string, error) {
	r.lookups.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	if a, ok := r.addrs[host]; ok {
		return slices.Clone(a), nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func withResolver(r *resolver) nodeOpt { return func(c *Config) { c.Resolver = r } }

func ipOf(t *testing.T, addr string) string {
	t.Helper()
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return host
}

// waitLookups waits until each node's resolver has been asked at least
// more times than it had when called: each re-join round asks once.
func waitLookups(t *testing.T, more int64, rs map[string]*resolver) {
	t.Helper()
	base := map[string]int64{}
	for name, r := range rs {
		base[name] = r.lookups.Load()
	}
	testkit.WaitFor(t, 10*time.Second, fmt.Sprintf("%d more re-join rounds", more), func() error {
		for name, r := range rs {
			if got := r.lookups.Load() - base[name]; got < more {
				return fmt.Errorf("%s: %d more lookups", name, got)
			}
		}
		return nil
	})
}

// TestHealthyClusterMakesNoJoinCalls: every member lists a DNS name that
// resolves to every member as its seed; once all are alive, re-join rounds
// go on (the name is resolved each round) but contact nobody.
func TestHealthyClusterMakesNoJoinCalls(t *testing.T) {
	t.Parallel()
	const interval = 100 * time.Millisecond
	fn := newFaultnet(t)
	resolvers := map[string]*resolver{}
	var nodes []*testNode
	var ips []string
	for _, name := range []string{"a", "b", "c"} {
		r := newResolver()
		resolvers[name] = r
		n := startNetNode(t, fn, name, withResolver(r), withSeeds("members.test:7946"),
			func(c *Config) { c.RejoinInterval = interval })
		nodes = append(nodes, n)
		// The name resolves to the members started so far, this one included.
		ips = append(ips, ipOf(t, n.LocalAddr()))
		for _, r := range resolvers {
			r.set("members.test", ips...)
		}
	}
	testkit.WaitFor(t, 10*time.Second, "cluster converges", func() error { return expectOneCluster(nodes) })

	// Let a round that started before convergence finish.
	waitLookups(t, 2, resolvers)
	before := map[string]int{}
	for _, n := range nodes {
		before[n.name] = n.log.count(msgRejoin)
	}
	waitLookups(t, 5, resolvers)
	for _, n := range nodes {
		if got := n.log.count(msgRejoin) - before[n.name]; got != 0 {
			t.Errorf("%s: %d join calls in 5 rounds of a healthy cluster, want 0", n.name, got)
		}
	}
}

// TestSeedHostnameReResolved: a seed given as a hostname is looked up at
// every attempt and every round, and every address it resolves to is
// contacted.
func TestSeedHostnameReResolved(t *testing.T) {
	t.Parallel()
	fn := newFaultnet(t)
	nodes := startNetCluster(t, fn, "a", "b")
	a, b := nodes[0], nodes[1]

	r := newResolver()
	r.set("seeds.test", "127.77.200.1") // no member there
	c := startNetNode(t, fn, "c", withResolver(r), withSeeds("seeds.test:7946"),
		func(c *Config) {
			c.JoinRetryInterval = 50 * time.Millisecond
			c.RejoinInterval = 100 * time.Millisecond
		})
	testkit.WaitFor(t, 5*time.Second, "two failed join attempts", func() error {
		if got := c.log.count(msgJoinFailed); got < 2 {
			return fmt.Errorf("%d failed attempts logged", got)
		}
		return nil
	})
	if got := r.lookups.Load(); got < 2 {
		t.Errorf("%d lookups for 2 attempts, want one per attempt", got)
	}

	// Now the name resolves to a and b, and a cannot be reached from c:
	// c joins through the second address.
	fn.Cut("a", "c")
	r.set("seeds.test", ipOf(t, a.LocalAddr()), ipOf(t, b.LocalAddr()))
	testkit.WaitFor(t, 5*time.Second, "c joins", func() error {
		if c.log.count(msgJoined) == 0 {
			return errors.New("not joined yet")
		}
		return nil
	})
	fn.HealAll()
	all := []*testNode{a, b, c}
	testkit.WaitFor(t, 10*time.Second, "cluster converges", func() error { return expectOneCluster(all) })

	// Rounds go on resolving the name.
	waitLookups(t, 3, map[string]*resolver{"c": r})
}

// TestListenerGetsDeadAndLeft: the Listener is told every member with its
// state, the departed ones included.
func TestListenerGetsDeadAndLeft(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, "a", "b", "c")
	a, b, c := nodes[0], nodes[1], nodes[2]
	if err := b.Close(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	c.crash()
	want := []Member{
		{Name: "a", PeerAddr: a.grpc, GossipAddr: a.LocalAddr(), State: StateAlive},
		{Name: "b", PeerAddr: b.grpc, GossipAddr: b.LocalAddr(), State: StateLeft},
		{Name: "c", PeerAddr: c.grpc, GossipAddr: c.LocalAddr(), State: StateDead},
	}
	testkit.WaitFor(t, 10*time.Second, "a's listener told b left and c dead", func() error {
		if got := a.rec.last(); !slices.Equal(got, want) {
			return fmt.Errorf("listener last told %v, want %v", got, want)
		}
		if got := a.Members(); !slices.Equal(got, want) {
			return fmt.Errorf("Members() = %v, want %v", got, want)
		}
		return nil
	})
}

// TestRejoinTargets checks what a re-join round contacts, with a fake
// resolver and clock.
func TestRejoinTargets(t *testing.T) {
	clk := testkit.NewClock(0)
	r := newResolver()
	r.set("seeds.example", "10.0.0.3", "10.0.0.4", "10.0.0.1")
	c := &Cluster{
		cfg: Config{
			BindAddr:          "0.0.0.0:7946",
			Seeds:             []string{"10.0.0.1:7946", "10.0.0.2:7946", "seeds.example:7946", "gone.example:7946"},
			DepartedRetention: time.Minute,
			TCPTimeout:        time.Second,
			Resolver:          r,
		},
		log:       slog.New(slog.DiscardHandler),
		clock:     clk,
		localAddr: "10.0.0.1:7946",
		members:   map[string]*record{},
	}
	add := func(name, ip string, s State, since time.Duration) {
		c.members[name] = &record{
			m:     Member{Name: name, GossipAddr: ip + ":7946", State: s},
			since: clk.Now().Add(-since),
		}
	}
	clk.Advance(time.Hour)
	add("self", "10.0.0.1", StateAlive, time.Hour)
	add("b", "10.0.0.2", StateAlive, time.Hour) // a seed, alive
	add("c", "10.0.0.3", StateSuspect, 0)       // a seed's address, suspect
	add("d", "10.0.0.5", StateDead, 30*time.Second)
	add("e", "10.0.0.6", StateLeft, 30*time.Second)
	add("f", "10.0.0.7", StateDead, 2*time.Minute) // past DepartedRetention

	got, pruned := c.rejoinTargets(context.Background())
	if want := []string{"10.0.0.4:7946", "10.0.0.5:7946"}; !slices.Equal(got, want) || !pruned {
		t.Errorf("rejoinTargets() = %v, %v; want %v, true", got, pruned, want)
	}
	if _, ok := c.members["f"]; ok {
		t.Errorf("f, dead for longer than DepartedRetention, is still known")
	}
	if got := r.lookups.Load(); got != 2 {
		t.Errorf("%d lookups, want 2 (seeds.example, gone.example)", got)
	}

	// The next round resolves again and sees the new addresses; d is back.
	r.set("seeds.example", "10.0.0.8")
	c.members["d"].m.State = StateAlive
	got, pruned = c.rejoinTargets(context.Background())
	if want := []string{"10.0.0.8:7946"}; !slices.Equal(got, want) || pruned {
		t.Errorf("second rejoinTargets() = %v, %v; want %v, false", got, pruned, want)
	}
}

// TestSRVSeeds: a seed with no port that starts with an underscore is a DNS
// SRV name; each target is resolved to its addresses, each with the
// target's port, at every round.
func TestSRVSeeds(t *testing.T) {
	r := newResolver()
	r.setSRV("_gossip._tcp.members.test",
		&net.SRV{Target: "n1.members.test.", Port: 7001},
		&net.SRV{Target: "n2.members.test.", Port: 7002},
		&net.SRV{Target: "127.0.0.9", Port: 7009},
		&net.SRV{Target: "gone.members.test.", Port: 7003})
	r.set("n1.members.test", "127.0.0.1")
	r.set("n2.members.test", "127.0.0.2", "::1")
	c := &Cluster{
		cfg: Config{BindAddr: "127.0.0.1:7001", TCPTimeout: time.Second, Resolver: r,
			Seeds: []string{"_gossip._tcp.members.test", "127.0.0.5:7005"}},
		log:       slog.New(slog.DiscardHandler),
		localAddr: "127.0.0.1:7001",
	}
	got, err := c.resolveSeeds(context.Background())
	slices.Sort(got)
	if want := []string{"127.0.0.1:7001", "127.0.0.2:7002", "127.0.0.5:7005", "127.0.0.9:7009", "[::1]:7002"}; !slices.Equal(got, want) {
		t.Errorf("resolveSeeds() = %v, want %v", got, want)
	}
	if err == nil || !strings.Contains(err.Error(), "gone.members.test") {
		t.Errorf("resolveSeeds() error = %v, want the failed lookup of gone.members.test", err)
	}
	// The targets change: the next resolution follows.
	r.set("n1.members.test", "127.0.0.4")
	got, _ = c.resolveSeeds(context.Background())
	if !slices.Contains(got, "127.0.0.4:7001") || slices.Contains(got, "127.0.0.1:7001") {
		t.Errorf("after the change resolveSeeds() = %v, want 127.0.0.4:7001 and not 127.0.0.1:7001", got)
	}

	for _, seed := range []string{"_gossip._tcp.members.test", "members.test:7946", "10.0.0.1:7946"} {
		if err := checkSeed(seed); err != nil {
			t.Errorf("checkSeed(%q) = %v, want nil", seed, err)
		}
	}
	for _, seed := range []string{"members.test", "_gossip._tcp", "10.0.0.1", "_x._tcp.members.test:0"} {
		if err := checkSeed(seed); err == nil {
			t.Errorf("checkSeed(%q) = nil, want an error", seed)
		}
	}
}
