// Package harness runs in-process ringlimit clusters for tests: each node
// is a whole node started through node.Start, whose listeners, peer
// connections and gossip are on a fault-injecting network
// (internal/testonly/faultnet) whose links a test can cut, isolate, delay and heal
// while checks flow. Membership is given by the test (SetMembers): each
// node's gossip starts a cluster of its own and joins no one, so that what
// a fault does to admissions is exact and does not wait on failure
// detection.
//
// Every node a Cluster starts is closed by t.Cleanup.
package harness

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/resolver"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/clock"
	"github.com/ringlimit/ringlimit/forward"
	"github.com/ringlimit/ringlimit/internal/testonly/faultnet"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/ring"
)

// Options configure a Cluster. Zero values mean the defaults.
type Options struct {
	// Clock is every node's clock. Required (clock.System() or a
	// testkit.Clock), as in every package a node is made of.
	Clock clock.Clock
	// PeerTimeout is every peer call's deadline. Default 200ms.
	PeerTimeout time.Duration
	// Grace is the handoff grace period. Default 300ms.
	Grace time.Duration
	// Node, when not nil, edits each node's node.Config before Start.
	Node func(*node.Config)
}

func (o Options) withDefaults() Options {
	if o.PeerTimeout == 0 {
		o.PeerTimeout = 200 * time.Millisecond
	}
	if o.Grace == 0 {
		o.Grace = 300 * time.Millisecond
	}
	return o
}

// Node is one member of a Cluster: a node started through node.Start.
type Node struct {
	Name   string
	Addr   string // the peer address other nodes dial
	Node   *node.Node
	Router *forward.Router      // Node.Router()
	Store  *bucket.Store        // Node.Store()
	Reg    *prometheus.Registry // the node's metrics

	once   sync.Once
	stop   func() // closes the node
	gossip string // the gossip address on the Network, for StartGossip's seed
}

// Cluster is a set of in-process nodes on one fault-injecting Network.
type Cluster struct {
	Net   *faultnet.Network
	Clock clock.Clock
	Nodes []*Node
	t     testing.TB
}

// Start starts one node per name on a new Network and gives every node the
// full member list. The cluster stops when the test ends.
func Start(t testing.TB, opts Options, names ...string) *Cluster {
	t.Helper()
	if opts.Clock == nil {
		t.Fatal("harness: Options.Clock is required")
	}
	opts = opts.withDefaults()
	c := &Cluster{Net: faultnet.New(), Clock: opts.Clock, t: t}
	t.Cleanup(c.Net.Close)
	for _, name := range names {
		c.Nodes = append(c.Nodes, c.start(name, opts))
	}
	c.SetMembers(c.Nodes...)
	return c
}

// StartGossip starts one node per name on a new Network, every one after
// the first joining the first by gossip: unlike Start, membership, the ring
// and failure detection are the nodes' own, as in a deployment. It returns
// once every node is started; waiting for them to agree is the test's (see
// Converged). The cluster stops when the test ends.
func StartGossip(t testing.TB, opts Options, names ...string) *Cluster {
	t.Helper()
	if opts.Clock == nil {
		t.Fatal("harness: Options.Clock is required")
	}
	opts = opts.withDefaults()
	c := &Cluster{Net: faultnet.New(), Clock: opts.Clock, t: t}
	t.Cleanup(c.Net.Close)
	var seed string
	for i, name := range names {
		n := c.startWith(name, opts, true, seed)
		if i == 0 {
			seed = n.gossip
		}
		c.Nodes = append(c.Nodes, n)
	}
	return c
}

// Converged says whether every running node's ring holds exactly the
// cluster's nodes, all at one ring version; when not, why.
func (c *Cluster) Converged() error {
	names := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		names[i] = n.Name
	}
	slices.Sort(names)
	version := c.Nodes[0].Router.RingVersion()
	for _, n := range c.Nodes {
		got := slices.Sorted(slices.Values(n.Router.RingMembers()))
		if !slices.Equal(got, names) {
			return fmt.Errorf("%s's ring has %d members, want %d", n.Name, len(got), len(names))
		}
		if v := n.Router.RingVersion(); v != version {
			return fmt.Errorf("%s's ring version %d, %s's %d", n.Name, v, c.Nodes[0].Name, version)
		}
	}
	return nil
}

// start starts the node named name with its listeners, peer dialer and
// gossip on c.Net.
func (c *Cluster) start(name string, opts Options) *Node {
	c.t.Helper()
	return c.startWith(name, opts, false, "")
}

// startWith is start; with gossip, the node learns its members by gossip,
// joining seed unless it is "".
func (c *Cluster) startWith(name string, opts Options, gossip bool, seed string) *Node {
	c.t.Helper()
	var lns [3]net.Listener
	for i := range lns {
		ln, err := c.Net.Listen(name)
		if err != nil {
			c.t.Fatal(err)
		}
		lns[i] = ln
	}
	tr, err := c.Net.Transport(name)
	if err != nil {
		c.t.Fatal(err)
	}
	n := StartNode(c.t, name, opts, func(cfg *node.Config) {
		cfg.HTTPListener, cfg.GRPCListener, cfg.PeerListener = lns[0], lns[1], lns[2]
		cfg.GossipTransport = tr
		cfg.PeerDialOptions = []grpc.DialOption{grpc.WithContextDialer(c.Net.Dialer(name))}
		if gossip {
			if seed != "" {
				cfg.Join = []string{seed}
			}
			// Members learn each other's peer address from gossip, as
			// host:port: dialled as given, through the Network, never
			// looked up in DNS.
			cfg.PeerDialOptions = append(cfg.PeerDialOptions, grpc.WithResolvers(passthroughAsDNS{resolver.Get("passthrough")}))
		}
	})
	n.gossip = tr.Addr().String()
	n.Addr = "passthrough:///" + n.Addr
	// A crash: nothing the node says while it closes (its leave, its
	// handoff) reaches another node.
	closeNode := n.stop
	n.stop = func() {
		c.Net.Isolate(name)
		defer c.Net.Restore(name)
		closeNode()
	}
	return n
}

// StartNode starts one node named name, alone in its gossip cluster, on
// loopback sockets unless edit gives it listeners (edit, when not nil,
// edits its node.Config after opts are applied; then opts.Node). Its Addr
// is its peer address, and it is on its own ring when StartNode returns;
// other members are the test's to give (Router.SetMembers). It stops (see
// Stop) when the test ends.
func StartNode(t testing.TB, name string, opts Options, edit func(*node.Config)) *Node {
	t.Helper()
	if opts.Clock == nil {
		t.Fatal("harness: Options.Clock is required")
	}
	opts = opts.withDefaults()
	reg := prometheus.NewRegistry()
	cfg := node.DefaultLocalConfig()
	cfg.Name, cfg.Clock, cfg.Registerer = name, opts.Clock, reg
	cfg.PeerTimeout, cfg.Grace = opts.PeerTimeout, opts.Grace
	if edit != nil {
		edit(&cfg)
	}
	if opts.Node != nil {
		opts.Node(&cfg)
	}
	nd, err := node.Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("harness: start %s: %v", name, err)
	}
	n := &Node{Name: name, Addr: nd.PeerAddr(), Node: nd, Router: nd.Router(), Store: nd.Store(), Reg: reg}
	n.stop = func() {
		// A context that has ended: Close stops everything at once and
		// waits for nothing (no handoff, no draining), as a crash would.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		nd.Close(ctx)
	}
	t.Cleanup(n.Stop)
	// The node's gossip puts it on its own ring once; members given before
	// that would be replaced.
	testkit.WaitFor(t, 10*time.Second, name+" on its own ring", func() error {
		if !slices.Contains(n.Router.RingMembers(), name) {
			return fmt.Errorf("ring %v", n.Router.RingMembers())
		}
		return nil
	})
	return n
}

// passthroughAsDNS is gRPC's passthrough resolver under the scheme of a
// target that names none (dns): the address is dialled as it is given.
type passthroughAsDNS struct{ resolver.Builder }

func (passthroughAsDNS) Scheme() string { return "dns" }

// Stop stops the node without telling the others (a crash, for a node of
// a Cluster). Safe to call more than once.
func (n *Node) Stop() { n.once.Do(func() { n.stop() }) }

// SetMembers gives every running node of c the member list made of nodes.
func (c *Cluster) SetMembers(nodes ...*Node) {
	ms := make([]forward.Member, len(nodes))
	for i, n := range nodes {
		ms[i] = forward.Member{Name: n.Name, Addr: n.Addr}
	}
	for _, n := range c.Nodes {
		n.Router.SetMembers(ms)
	}
}

// SetView gives the nodes on the member list made of up, with the members
// named in down as dead: what each would hear from failure detection.
func SetView(on, up []*Node, down ...string) {
	ms := make([]forward.Member, 0, len(up)+len(down))
	for _, n := range up {
		ms = append(ms, forward.Member{Name: n.Name, Addr: n.Addr})
	}
	for _, name := range down {
		ms = append(ms, forward.Member{Name: name, Down: true})
	}
	for _, n := range on {
		n.Router.SetMembers(ms)
	}
}

// Restart replaces the node named name, which must be stopped, with a new
// one of that name and an empty store (a process started again), and
// returns it. It is on no ring until the test says so.
func (c *Cluster) Restart(name string, opts Options) *Node {
	c.t.Helper()
	opts = opts.withDefaults()
	for i, n := range c.Nodes {
		if n.Name == name {
			n2 := c.start(name, opts)
			c.Nodes[i] = n2
			return n2
		}
	}
	c.t.Fatalf("harness: no node %q", name)
	return nil
}

// KeyWith returns the first key "prefix-N" that owner owns on the
// cluster's ring and succ would own without owner.
func (c *Cluster) KeyWith(owner, succ, prefix string) string {
	names := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		names[i] = n.Name
	}
	rg, err := ring.New(ring.DefaultConfig(), names)
	if err != nil {
		c.t.Fatal(err)
	}
	for i := range 100000 {
		k := fmt.Sprintf("%s-%d", prefix, i)
		if o, _ := rg.Owner(k); o == owner && rg.Successors(k, 1)[0] == succ {
			return k
		}
	}
	c.t.Fatalf("harness: no key of %s with successor %s found", owner, succ)
	return ""
}

// Used returns what the store of the node named name says key has spent
// (0 when it holds no copy).
func (c *Cluster) Used(name, key string) int64 {
	_, used, _ := c.Node(name).Store.Used(key, c.Clock.Now())
	return used
}

// Node returns the node named name.
func (c *Cluster) Node(name string) *Node {
	for _, n := range c.Nodes {
		if n.Name == name {
			return n
		}
	}
	c.t.Fatalf("harness: no node %q", name)
	return nil
}

// KeyOwnedBy returns the first key "prefix-N" that owner owns on the
// cluster's ring.
func (c *Cluster) KeyOwnedBy(owner, prefix string) string {
	for i := range 100000 {
		k := fmt.Sprintf("%s-%d", prefix, i)
		if o, _ := c.Nodes[0].Router.Owner(k); o == owner {
			return k
		}
	}
	c.t.Fatalf("harness: no key of %s found", owner)
	return ""
}

// Tally counts the answers of a run of checks.
type Tally struct {
	Allowed, Rejected, Degraded, Failed int
}

// Check sends n checks of cost 1 on key under l through the node, one after
// the other, each within timeout, and counts the answers.
func (n *Node) Check(key string, l bucket.Limit, mode bucket.FailureMode, count int, timeout time.Duration) Tally {
	var t Tally
	out := make([]forward.Result, 1)
	for range count {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		err := n.Router.Check(ctx, []forward.Check{{Key: key, Limit: l, Cost: 1, Mode: mode}}, out)
		cancel()
		switch {
		case err != nil:
			t.Failed++
		case out[0].Allowed:
			t.Allowed++
		default:
			t.Rejected++
		}
		if err == nil && out[0].Degraded {
			t.Degraded++
		}
	}
	return t
}
