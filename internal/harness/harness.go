// Package harness runs in-process ringlimit clusters for tests: each node
// is a real forward.Router with its peer.Pool and peer.Server on a gRPC
// server, and the nodes reach each other over a fault-injecting network
// (internal/faultnet) whose links a test can cut, isolate, delay and heal
// while checks flow. Membership is given by the test (SetMembers), so that
// what a fault does to admissions is exact and does not wait on failure
// detection.
//
// Every server and goroutine a Cluster starts is stopped by t.Cleanup.
package harness

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/clock"
	"github.com/ringlimit/ringlimit/forward"
	"github.com/ringlimit/ringlimit/internal/faultnet"
	"github.com/ringlimit/ringlimit/peer"
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
	// Router, when not nil, edits each node's forward.Config before New.
	Router func(*forward.Config)
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

// Node is one member of a Cluster.
type Node struct {
	Name   string
	Addr   string // the peer address on the Network
	Router *forward.Router
	Pool   *peer.Pool
	Server *peer.Server
	Store  *bucket.Store
	Reg    *prometheus.Registry // nil when NodeConfig.Registerer was another Registerer
	GRPC   *grpc.Server         // serves the peer service

	served     chan struct{}
	once       sync.Once
	t          testing.TB
	checkClose bool
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

func (c *Cluster) start(name string, opts Options) *Node {
	c.t.Helper()
	ln, err := c.Net.Listen(name)
	if err != nil {
		c.t.Fatal(err)
	}
	cfg := NodeConfig{
		Config: forward.Config{Self: name, Clock: opts.Clock, PeerTimeout: opts.PeerTimeout, Grace: opts.Grace},
		Peer:   peer.Config{DialOptions: []grpc.DialOption{grpc.WithContextDialer(c.Net.Dialer(name))}},
	}
	if opts.Router != nil {
		opts.Router(&cfg.Config)
	}
	n := StartNode(c.t, ln, cfg)
	n.Addr = "passthrough:///" + n.Addr
	return n
}

// NodeConfig is what StartNode builds one node from: the router's Config
// and its pool's.
type NodeConfig struct {
	// Config is the router's. StartNode fills Self's store (Store), the
	// pool (Peers), a fresh registry (Registerer) and a ring.DefaultConfig
	// ring (NewRing) where they are zero.
	forward.Config
	// Peer is the pool's. StartNode sets Self and Metrics; a zero Timeout
	// is Config.PeerTimeout, a nil Clock is Config.Clock, a nil Logger is
	// Config.Logger.
	Peer peer.Config
	// ServerOptions are given to the node's gRPC server.
	ServerOptions []grpc.ServerOption
	// CheckClose makes an error from the router's Close, when the node
	// stops, fail the test.
	CheckClose bool
}

// StartNode starts one node named cfg.Self whose peer service serves on ln;
// its Addr is ln's address. It stops (see Stop) when the test ends.
func StartNode(t testing.TB, ln net.Listener, cfg NodeConfig) *Node {
	t.Helper()
	name := cfg.Self
	if cfg.Store == nil {
		store, err := bucket.NewStore(bucket.StoreConfig{MaxKeys: 1 << 16, Shards: 16})
		if err != nil {
			t.Fatal(err)
		}
		cfg.Store = store
	}
	reg, _ := cfg.Registerer.(*prometheus.Registry)
	if cfg.Registerer == nil {
		reg = prometheus.NewRegistry()
		cfg.Registerer = reg
	}
	if cfg.NewRing == nil {
		cfg.NewRing = func(members []string) (forward.Owners, error) { return ring.New(ring.DefaultConfig(), members) }
	}
	pm, err := peer.NewMetrics(cfg.Registerer)
	if err != nil {
		t.Fatal(err)
	}
	pc := cfg.Peer
	pc.Self, pc.Metrics = name, pm
	if pc.Timeout == 0 {
		pc.Timeout = cfg.PeerTimeout
	}
	if pc.Clock == nil {
		pc.Clock = cfg.Clock
	}
	if pc.Logger == nil {
		pc.Logger = cfg.Logger
	}
	pool, err := peer.NewPool(pc)
	if err != nil {
		t.Fatalf("NewPool(%s): %v", name, err)
	}
	cfg.Peers = pool
	r, err := forward.New(cfg.Config)
	if err != nil {
		pool.Close(context.Background())
		t.Fatalf("forward.New(%s): %v", name, err)
	}
	srv, err := peer.NewServer(peer.ServerConfig{Self: name, Handler: r, Clock: cfg.Clock, Metrics: pm})
	if err != nil {
		pool.Close(context.Background())
		t.Fatalf("peer.NewServer(%s): %v", name, err)
	}
	n := &Node{Name: name, Addr: ln.Addr().String(), Router: r, Pool: pool, Store: cfg.Store, Reg: reg,
		Server: srv, GRPC: grpc.NewServer(cfg.ServerOptions...), served: make(chan struct{}),
		t: t, checkClose: cfg.CheckClose}
	n.Server.Register(n.GRPC)
	go func() {
		defer close(n.served)
		_ = n.GRPC.Serve(ln)
	}()
	t.Cleanup(n.Stop)
	return n
}

// Stop stops the node in its shutdown order: drain the peer server, stop
// it, close the router, close the pool. Safe to call more than once.
func (n *Node) Stop() {
	n.once.Do(func() {
		n.Server.Drain()
		n.GRPC.Stop()
		<-n.served
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := n.Router.Close(ctx); err != nil && n.checkClose {
			n.t.Errorf("Close(%s): %v", n.Name, err)
		}
		if err := n.Pool.Close(ctx); err != nil && n.checkClose {
			n.t.Errorf("Pool.Close(%s): %v", n.Name, err)
		}
	})
}

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
