package node_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/resolver"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/client"
	"github.com/ringlimit/ringlimit/clock"
	"github.com/ringlimit/ringlimit/forward"
	"github.com/ringlimit/ringlimit/internal/testonly/faultnet"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
	"github.com/ringlimit/ringlimit/node"
	pb "github.com/ringlimit/ringlimit/proto/ringlimitv1"
)

func TestMain(m *testing.M) {
	// memberlist's Shutdown does not wait for a probe in flight: its
	// goroutine ends when the probe's ack timer fires.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/hashicorp/memberlist.(*Memberlist).probeNode"))
}

// TestValidate: each bad field is refused with an error naming it, and
// Validate changes nothing.
func TestValidate(t *testing.T) {
	for i, tt := range []struct {
		edit func(*node.Config)
		want string
	}{
		{func(c *node.Config) { c.Name = "" }, "node: Config.Name: must not be empty"},
		{func(c *node.Config) { c.MaxKeys = 0 }, "node: Config.MaxKeys: must be at least 1, got 0"},
		{func(c *node.Config) { c.MaxMemory = 4095 }, "node: Config.MaxMemory: must be at least 4096 bytes, got 4095"},
		{func(c *node.Config) { c.MaxKeyBytes = 1025 }, "node: Config.MaxKeyBytes: must be between 1 and 1024, got 1025"},
		{func(c *node.Config) { c.Replication = 9 }, "node: Config.Replication: must be from 0 to 8, got 9"},
		{func(c *node.Config) { c.ReplicationMaxLoss = -1 }, "node: Config.ReplicationMaxLoss: must be from 0 to 1073741824 tokens, got -1"},
		{func(c *node.Config) { c.ClusterSize = -1 }, "node: Config.ClusterSize: must not be negative, got -1"},
		{func(c *node.Config) { c.ClusterName = strings.Repeat("x", 256) }, "node: Config.ClusterName: must be at most 255 bytes, got 256"},
		{func(c *node.Config) { c.RLSStatKeys = -1 }, "node: Config.RLSStatKeys: must not be negative, got -1"},
		{func(c *node.Config) { c.RLSNearLimitRatio = 0 }, "node: Config.RLSNearLimitRatio: must be above 0 and at most 1, got 0"},
		{func(c *node.Config) { c.MaxConns = -1 }, "node: Config.MaxConns: must not be negative, got -1"},
		{func(c *node.Config) { c.DrainDelay = -time.Second }, "node: Config.DrainDelay: must not be negative, got -1s"},
		{func(c *node.Config) { c.Grace = -time.Second }, "node: Config.Grace: must not be negative, got -1s"},
		{func(c *node.Config) { c.QuiesceTimeout = -time.Second }, "node: Config.QuiesceTimeout: must not be negative, got -1s"},
		{func(c *node.Config) { c.QuiesceIdle = -time.Millisecond }, "node: Config.QuiesceIdle: must not be negative, got -1ms"},
		{func(c *node.Config) { c.CheckTimeout = 0 }, "node: Config.CheckTimeout: must be positive, got 0s"},
		{func(c *node.Config) { c.HTTPReadTimeout = 0 }, "node: Config.HTTPReadTimeout: must be positive, got 0s"},
		{func(c *node.Config) { c.HTTPWriteTimeout = -1 }, "node: Config.HTTPWriteTimeout: must be positive, got -1ns"},
		{func(c *node.Config) { c.HTTPIdleTimeout = 0 }, "node: Config.HTTPIdleTimeout: must be positive, got 0s"},
		{func(c *node.Config) { c.GRPCIdleTimeout = 0 }, "node: Config.GRPCIdleTimeout: must be positive, got 0s"},
		{func(c *node.Config) { c.CheckTimeout = 10 * time.Second },
			"node: Config.CheckTimeout: CheckTimeout (10s) must be less than HTTPWriteTimeout (10s), or a late answer could not be written"},
		{func(c *node.Config) { c.AdvertiseHost = "0.0.0.0" }, "node: Config.AdvertiseHost: AdvertiseHost 0.0.0.0: other machines cannot dial an unspecified address"},
		{func(c *node.Config) { c.AdvertisePeer = "10.0.0.1:0" }, `node: Config.AdvertisePeer: "10.0.0.1:0": the port must be from 1 to 65535`},
		{func(c *node.Config) { c.AdvertiseGossip = "gossip.example:7946" }, "node: Config.AdvertiseGossip: AdvertiseGossip gossip.example:7946: the host must be an IP address"},
		{func(c *node.Config) { c.Resolver = "10.0.0.1" }, "node: Config.Resolver: address 10.0.0.1: missing port in address"},
		{func(c *node.Config) { c.HTTPAddr = "8080" }, "node: Config.HTTPAddr: address 8080: missing port in address"},
		{func(c *node.Config) { c.GossipAddr = "" }, "node: Config.GossipAddr: missing port in address"},
		{func(c *node.Config) { c.TLSCA = "ca.pem" }, "node: Config.TLSCA: TLSCA, TLSCert and TLSKey go together: give all three or none"},
		{func(c *node.Config) { c.APITLSKey = "k.pem" }, "node: Config.APITLSCert: APITLSCert and APITLSKey go together: give both or neither"},
		{func(c *node.Config) { c.APITLSClientCA = "ca.pem" }, "node: Config.APITLSClientCA: APITLSClientCA needs APITLSCert and APITLSKey"},
		{func(c *node.Config) { c.PeerAddr = "10.0.0.1:9190" },
			"node: Config.PeerAddr: PeerAddr 10.0.0.1:9190 is reachable from other machines: give TLSCA, TLSCert and TLSKey (mutual TLS between nodes) and GossipKeys (encrypted gossip), or Insecure to run in clear"},
	} {
		c := node.DefaultLocalConfig()
		tt.edit(&c)
		before := fmt.Sprintf("%+v", c)
		err := c.Validate()
		if err == nil || err.Error() != tt.want {
			t.Errorf("step %d: Validate() = %v, want %q", i, err, tt.want)
		}
		if after := fmt.Sprintf("%+v", c); after != before {
			t.Errorf("step %d: Validate changed the Config:\n%s\nwant\n%s", i, after, before)
		}
		if _, err := node.Start(t.Context(), c); err == nil || err.Error() != tt.want {
			t.Errorf("step %d: Start = %v, want %q", i, err, tt.want)
		}
	}
	for _, c := range []node.Config{node.DefaultConfig(), node.DefaultLocalConfig()} {
		if err := c.Validate(); err != nil {
			t.Errorf("a default Config: %v", err)
		}
	}
	c := node.DefaultLocalConfig()
	c.PeerAddr, c.Insecure = "10.0.0.1:9190", true
	if err := c.Validate(); err != nil {
		t.Errorf("an exposed peer address with Insecure: %v", err)
	}
}

// start starts a node on DefaultLocalConfig named name, joining join, and
// closes it at the end of the test.
func start(t *testing.T, name string, join ...string) *node.Node {
	t.Helper()
	cfg := node.DefaultLocalConfig()
	cfg.Name, cfg.Join = name, join
	n, err := node.Start(t.Context(), cfg)
	if err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if err := n.Close(ctx); err != nil {
			t.Errorf("close %s: %v", name, err)
		}
	})
	return n
}

// TestStartOnPortZero: the listeners given port 0 report the ports picked,
// the node becomes ready, and Close is safe to call twice.
func TestStartOnPortZero(t *testing.T) {
	n := start(t, "solo")
	if n.Name() != "solo" {
		t.Errorf("Name() = %q", n.Name())
	}
	for what, addr := range map[string]string{"HTTP": n.HTTPAddr(), "gRPC": n.GRPCAddr(), "peer": n.PeerAddr(), "gossip": n.GossipAddr()} {
		host, port, err := net.SplitHostPort(addr)
		if err != nil || host != "127.0.0.1" || port == "0" {
			t.Errorf("%s address %q: want 127.0.0.1 and the port picked", what, addr)
		}
	}
	if a := n.Advertised(); a.GRPC != n.GRPCAddr() || a.Peer != n.PeerAddr() || a.HTTP != n.HTTPAddr() {
		t.Errorf("Advertised() = %+v, want the bound addresses", a)
	}
	testkit.WaitFor(t, 10*time.Second, "ready", n.Ready)
	if m := n.Members(); len(m) != 1 || m[0].Name != "solo" {
		t.Errorf("Members() = %+v, want solo alone", m)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(ctx); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := n.Ready(); err == nil {
		t.Error("ready after Close")
	}
}

// TestThreeNodesDecideExactly: three nodes form a cluster; checks of one
// key sent to each in turn are decided by its one owner, exactly: a limit
// of 10 admits 10 of 15.
func TestThreeNodesDecideExactly(t *testing.T) {
	n1 := start(t, "node-1")
	n2 := start(t, "node-2", n1.GossipAddr())
	n3 := start(t, "node-3", n1.GossipAddr())
	nodes := []*node.Node{n1, n2, n3}
	want := []string{"node-1", "node-2", "node-3"}
	testkit.WaitFor(t, 20*time.Second, "three nodes on every ring, ready", func() error {
		for _, n := range nodes {
			if got := slices.Sorted(slices.Values(n.Router().RingMembers())); !slices.Equal(got, want) {
				return fmt.Errorf("%s's ring: %v", n.Name(), got)
			}
			if n.Router().RingVersion() != n1.Router().RingVersion() {
				return fmt.Errorf("%s's ring version %d, node-1's %d", n.Name(), n.Router().RingVersion(), n1.Router().RingVersion())
			}
			if err := n.Ready(); err != nil {
				return fmt.Errorf("%s: %w", n.Name(), err)
			}
		}
		return nil
	})
	owner, _ := n1.Router().Owner("user:42")
	var clients []*client.Client
	for _, n := range nodes {
		cl, err := client.New(client.Config{Targets: []string{n.GRPCAddr()}, RingRefresh: -1}) // stays on its node: the others forward
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		clients = append(clients, cl)
	}
	allowed := 0
	for i := range 15 {
		cost := int64(1)
		d, err := clients[i%3].Check(t.Context(), &pb.Check{Key: "user:42", Cost: &cost, Limit: &pb.Limit{Limit: 10, PerMs: time.Hour.Milliseconds()}})
		if err != nil {
			t.Fatalf("check %d: %v", i, err)
		}
		if d[0].GetOwner() != owner || d[0].GetDegraded() {
			t.Fatalf("check %d via %s decided by %q (degraded %v), want the owner %s", i, nodes[i%3].Name(), d[0].GetOwner(), d[0].GetDegraded(), owner)
		}
		if d[0].GetAllowed() {
			allowed++
		}
	}
	if allowed != 10 {
		t.Errorf("allowed %d of 15, want exactly 10", allowed)
	}
}

// TestCloseFinishesChecksInFlight: Close waits for a check that has
// started: a slow client's check sent before Close is answered, and new
// connections are refused after.
func TestCloseFinishesChecksInFlight(t *testing.T) {
	cfg := node.DefaultLocalConfig()
	cfg.Name = "closing"
	cfg.DrainDelay = 300 * time.Millisecond // a check lands during the drain
	n, err := node.Start(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "ready", n.Ready)
	cl, err := client.New(client.Config{Targets: []string{n.GRPCAddr()}})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	cost := int64(1)
	check := func() error {
		d, err := cl.Check(context.Background(), &pb.Check{Key: "k", Cost: &cost, Limit: &pb.Limit{Limit: 100, PerMs: time.Hour.Milliseconds()}})
		if err == nil && !d[0].GetAllowed() {
			err = errors.New("refused")
		}
		return err
	}
	if err := check(); err != nil { // the connection is up
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		closed <- n.Close(ctx)
	}()
	testkit.WaitFor(t, 5*time.Second, "not ready once Close started", func() error {
		if n.Ready() == nil {
			return errors.New("still ready")
		}
		return nil
	})
	var wg sync.WaitGroup
	var inFlight error
	wg.Go(func() { inFlight = check() })
	wg.Wait()
	if inFlight != nil {
		t.Errorf("a check sent while the node drains: %v, want an answer", inFlight)
	}
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
	if c, err := net.DialTimeout("tcp", n.HTTPAddr(), time.Second); err == nil {
		c.Close()
		t.Errorf("HTTP listener still accepts after Close")
	}
}

// TestNodesOnFaultnet: two nodes whose listeners, peer dialer and gossip
// are on internal/testonly/faultnet form a cluster, and a check entering one node is
// decided by the other when it owns the key; with their link cut, it is
// decided by the key's failure mode.
func TestNodesOnFaultnet(t *testing.T) {
	fn := faultnet.New()
	t.Cleanup(fn.Close)
	var nodes []*node.Node
	for _, name := range []string{"node-1", "node-2"} {
		cfg := node.DefaultLocalConfig()
		cfg.Name = name
		// A peer deadline a starved CPU cannot miss: with the local 500ms,
		// node-2's successor rule stood in for a node-1 slow to answer the
		// first check. After the cut each check waits this long.
		cfg.PeerTimeout = 3 * time.Second
		lns := make([]net.Listener, 3)
		for i := range lns {
			ln, err := fn.Listen(name)
			if err != nil {
				t.Fatal(err)
			}
			lns[i] = ln
		}
		cfg.HTTPListener, cfg.GRPCListener, cfg.PeerListener = lns[0], lns[1], lns[2]
		// Peers dial the faultnet address as it is: the target's default
		// scheme (dns) resolves to the address itself.
		cfg.PeerDialOptions = []grpc.DialOption{grpc.WithContextDialer(fn.Dialer(name)), grpc.WithResolvers(asIs{resolver.Get("passthrough")})}
		tr, err := fn.Transport(name)
		if err != nil {
			t.Fatal(err)
		}
		cfg.GossipTransport = tr
		if len(nodes) > 0 {
			cfg.Join = []string{nodes[0].GossipAddr()}
		}
		n, err := node.Start(t.Context(), cfg)
		if err != nil {
			t.Fatalf("start %s: %v", name, err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			n.Close(ctx)
		})
		nodes = append(nodes, n)
	}
	testkit.WaitFor(t, 20*time.Second, "both nodes on both rings", func() error {
		for _, n := range nodes {
			if got := slices.Sorted(slices.Values(n.Router().RingMembers())); !slices.Equal(got, []string{"node-1", "node-2"}) {
				return fmt.Errorf("%s's ring: %v", n.Name(), got)
			}
		}
		return nil
	})
	key := ""
	for i := 0; key == ""; i++ {
		if o, _ := nodes[1].Router().Owner(fmt.Sprintf("k%d", i)); o == "node-1" {
			key = fmt.Sprintf("k%d", i)
		}
	}
	l := bucket.MustLimit(bucket.TokenBucket, 10, time.Hour, 10)
	check := func() forward.Result {
		t.Helper()
		out := make([]forward.Result, 1)
		if err := nodes[1].Router().Check(t.Context(), []forward.Check{{Key: key, Limit: l, Cost: 1, Mode: bucket.FailClosed}}, out); err != nil {
			t.Fatal(err)
		}
		return out[0]
	}
	if r := check(); r.Owner != "node-1" || r.Degraded || !r.Allowed {
		t.Fatalf("check via node-2 of a key node-1 owns: %+v, want decided by node-1", r)
	}
	fn.Cut("node-1", "node-2")
	testkit.WaitFor(t, 30*time.Second, "a check in its failure mode", func() error {
		if r := check(); !r.Degraded || r.Allowed {
			return fmt.Errorf("%+v, want refused in its failure mode (fail closed)", r)
		}
		return nil
	})
	fn.Heal("node-1", "node-2")
}

// asIs is gRPC's passthrough resolver under the default scheme's name.
type asIs struct{ resolver.Builder }

func (asIs) Scheme() string { return "dns" }

// TestReadyOnTheConfigClock: the ring's settling time is measured on
// Config.Clock: a node on a clock that stands still is not ready until the
// clock moves past the settle time.
func TestReadyOnTheConfigClock(t *testing.T) {
	clk := testkit.NewClock(clock.Instant(1_700_000_000 * int64(time.Second)))
	cfg := node.DefaultLocalConfig()
	cfg.Name, cfg.Clock, cfg.QuiesceTimeout = "still", clk, time.Millisecond
	n, err := node.Start(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		n.Close(ctx)
	})
	testkit.WaitFor(t, 10*time.Second, "on its own ring", func() error {
		if !slices.Contains(n.Router().RingMembers(), "still") {
			return errors.New("not on its ring")
		}
		return nil
	})
	if err := n.Ready(); err == nil || !strings.Contains(err.Error(), "the ring changed 0s ago") {
		t.Fatalf("Ready() on a clock that stands still = %v, want the ring settling", err)
	}
	clk.Advance(time.Second)
	if err := n.Ready(); err != nil {
		t.Fatalf("Ready() a second later on the clock: %v", err)
	}
}
