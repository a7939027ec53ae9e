package peer_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/clock"
	"github.com/ringlimit/ringlimit/forward"
	"github.com/ringlimit/ringlimit/internal/harness"
	"github.com/ringlimit/ringlimit/internal/testkit"
	"github.com/ringlimit/ringlimit/peer"
	peerv1 "github.com/ringlimit/ringlimit/proto/peerv1"
	"github.com/ringlimit/ringlimit/ring"
)

// The transport's tests run real forward.Routers as the peer service's
// Handler, so that what they assert the owner spent is what an owner
// spends.

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testGrace is the Grace of every test router.
const testGrace = 300 * time.Millisecond

// failTimeout is the peer deadline of the tests where it fires.
const failTimeout = 200 * time.Millisecond

func newRing(members []string) (forward.Owners, error) {
	return ring.New(ring.DefaultConfig(), members)
}

// nodeConfig is what startNode builds a node from: the router's Config and
// its pool's. Unless a test sets them, the pool's Timeout is the router's
// PeerTimeout and its Clock the router's Clock; a test whose point is a
// transport deadline in real time sets Peer.Clock to clock.System().
type nodeConfig = harness.NodeConfig

// node is one in-process cluster member.
type node struct {
	name  string
	addr  string
	r     *forward.Router
	pool  *peer.Pool
	psrv  *peer.Server
	store *bucket.Store
	reg   *prometheus.Registry
	srv   *grpc.Server
}

// startNode starts a node named name on its own loopback gRPC server, shut
// down in cmd/node's order when the test ends: peer service drained and
// stopped, router closed, pool closed.
func startNode(t testing.TB, name string, clk clock.Clock, tweak func(*nodeConfig), sopts ...grpc.ServerOption) *node {
	t.Helper()
	cfg := nodeConfig{Config: forward.Config{
		Self:        name,
		NewRing:     newRing,
		Clock:       clk,
		Grace:       testGrace,
		PeerTimeout: 5 * time.Second, // generous: -race under load must not degrade
		Logger:      slog.New(slog.DiscardHandler),
	}, ServerOptions: sopts, CheckClose: true}
	if tweak != nil {
		tweak(&cfg)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n := harness.StartNode(t, lis, cfg)
	return &node{name: n.Name, addr: n.Addr, r: n.Router, pool: n.Pool, psrv: n.Server, store: n.Store, reg: n.Reg, srv: n.GRPC}
}

func startNodes(t testing.TB, clk clock.Clock, tweak func(*nodeConfig), names ...string) []*node {
	t.Helper()
	nodes := make([]*node, len(names))
	for i, name := range names {
		nodes[i] = startNode(t, name, clk, tweak)
	}
	return nodes
}

// realTransport runs a node's pool on real time.
func realTransport(c *nodeConfig) { c.Peer.Clock = clock.System() }

// formCluster gives every node the member list of all of them and moves the
// clock past the grace period.
func formCluster(clk *testkit.Clock, nodes ...*node) {
	ms := make([]forward.Member, len(nodes))
	for i, n := range nodes {
		ms[i] = forward.Member{Name: n.name, Addr: n.addr}
	}
	for _, n := range nodes {
		n.r.SetMembers(ms)
	}
	clk.Advance(testGrace)
}

// keysOwnedBy returns n keys "prefix-i" that r's ring gives to owner.
func keysOwnedBy(t testing.TB, r *forward.Router, owner, prefix string, n int) []string {
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

func hourlyLimit(n int64) bucket.Limit { return bucket.MustLimit(bucket.TokenBucket, n, time.Hour, 0) }

func check1(t testing.TB, r *forward.Router, key string, l bucket.Limit, cost int64) forward.Result {
	t.Helper()
	var out [1]forward.Result
	if err := r.Check(context.Background(), []forward.Check{{Key: key, Limit: l, Cost: cost}}, out[:]); err != nil {
		t.Fatalf("Check(%s on %s): %v", key, r.Self(), err)
	}
	return out[0]
}

// timedCheck runs checks through r and returns the results and how long it took.
func timedCheck(t testing.TB, r *forward.Router, checks ...forward.Check) ([]forward.Result, time.Duration) {
	t.Helper()
	out := make([]forward.Result, len(checks))
	start := time.Now()
	err := r.Check(context.Background(), checks, out)
	el := time.Since(start)
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	return out, el
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

// slowServer is a stream interceptor that holds every Check stream once its
// first batch has arrived, until its context ends, counting the streams it
// holds.
type slowServer struct{ held chan struct{} }

func (s *slowServer) interceptStream(_ any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, _ grpc.StreamHandler) error {
	var req peerv1.CheckRequest
	if err := ss.RecvMsg(&req); err != nil {
		return err
	}
	select {
	case s.held <- struct{}{}:
	default:
	}
	<-ss.Context().Done()
	return ss.Context().Err()
}
