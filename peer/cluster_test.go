package peer_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
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
)

// The transport's tests run each node as a Pool and a Server on a loopback
// gRPC server, with a small Handler of their own (storeHandler) that
// decides on a real bucket.Store and records what the transport gave it.

func TestMain(m *testing.M) {
	testkit.Main(m)
}

// failTimeout is the peer deadline of the tests where it fires.
const failTimeout = 200 * time.Millisecond

// testVersion is the ring version formCluster gives every pool.
const testVersion = 7

// storeHandler is the peer service's Handler in these tests. It decides
// every request on store at clk's time, except that a request that is not
// Final and whose key owner names another node is answered with a
// Redirect. It takes replicas from members only. It is safe for concurrent
// use; mu guards the fields below it.
type storeHandler struct {
	self  string
	store *bucket.Store
	clk   clock.Clock
	// owner names a key's owner; nil means self owns every key.
	owner func(key string) string

	mu       sync.Mutex
	members  map[string]bool // who may replicate here; nil: anyone
	versions []uint64        // the version of each batch, in order
	finals   []bool          // Final of each request, in order
	replicas []peer.State
	lookups  []string // "from key" of each Lookup
	record   bool     // record versions and finals (off for allocation counts)
}

func (h *storeHandler) Decide(_ context.Context, _ string, version uint64, reqs []peer.Request, out []peer.Answer) {
	if h.record {
		h.mu.Lock()
		h.versions = append(h.versions, version)
		for i := range reqs {
			h.finals = append(h.finals, reqs[i].Final)
		}
		h.mu.Unlock()
	}
	now := h.clk.Now()
	for i := range reqs {
		r := &reqs[i]
		if h.owner != nil && !r.Final {
			if o := h.owner(r.Key); o != h.self {
				out[i] = peer.Answer{Redirect: o}
				continue
			}
		}
		if r.Refund {
			_ = h.store.Refund(r.Key, &r.Limit, now, r.Cost)
			continue
		}
		d, err := h.store.Take(r.Key, &r.Limit, now, r.Cost)
		if err != nil {
			continue // valid requests only: cannot happen
		}
		out[i].SetDecision(&d)
	}
}

func (h *storeHandler) MayWait(string) bool { return false }

func (h *storeHandler) Merge(_ string, states []peer.State) int {
	return h.take(states)
}

func (h *storeHandler) take(states []peer.State) int {
	n := 0
	for i := range states {
		s := &states[i]
		if h.store.Merge(s.Key, &s.Limit, h.clk.Now(), s.Used) == nil {
			n++
		}
	}
	return n
}

func (h *storeHandler) Replicate(from string, states []peer.State) (int, error) {
	h.mu.Lock()
	if h.members != nil && !h.members[from] {
		h.mu.Unlock()
		return 0, fmt.Errorf("%s is not a member", from)
	}
	for _, s := range states {
		s.Key = strings.Clone(s.Key) // points into a reused buffer
		h.replicas = append(h.replicas, s)
	}
	h.mu.Unlock()
	return h.take(states), nil
}

func (h *storeHandler) Lookup(from, key string, _ *bucket.Limit) (peer.State, bool) {
	h.mu.Lock()
	h.lookups = append(h.lookups, from+" "+key)
	h.mu.Unlock()
	l, used, ok := h.store.Used(key, h.clk.Now())
	return peer.State{Key: key, Limit: l, Used: used}, ok
}

func (h *storeHandler) ResetFrom(_ context.Context, from, key string, l bucket.Limit, resetAt int64) peer.ResetAnswer {
	h.store.Delete(key)
	return peer.ResetAnswer{}
}

func (h *storeHandler) Keys() int64         { return int64(h.store.Len()) }
func (h *storeHandler) RingVersion() uint64 { return testVersion }

var _ peer.Handler = (*storeHandler)(nil)

// node is one in-process cluster member.
type node struct {
	name  string
	addr  string
	h     *storeHandler
	pool  *peer.Pool
	scfg  peer.ServerConfig // psrv's, which a test may change before serve
	psrv  *peer.Server      // nil before serve (or newServer)
	store *bucket.Store
	reg   *prometheus.Registry
	srv   *grpc.Server
}

// startNode starts a node named name on its own loopback gRPC server,
// stopped when the test ends in cmd/node's order: peer service drained and
// stopped, pool closed. Its pool runs on clk with a generous Timeout
// (-race under load must not fail a batch) unless tweak changes them.
func startNode(t testing.TB, name string, clk clock.Clock, tweak func(*peer.Config), sopts ...grpc.ServerOption) *node {
	t.Helper()
	n, lis := newNode(t, name, clk, tweak, sopts...)
	n.serve(t, lis)
	return n
}

// newNode is startNode up to serving: its listener is open and its peer
// service not made yet, so that the test can set the service's config
// (n.scfg) up first.
func newNode(t testing.TB, name string, clk clock.Clock, tweak func(*peer.Config), sopts ...grpc.ServerOption) (*node, net.Listener) {
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
	cfg := peer.Config{Self: name, Timeout: 5 * time.Second, Clock: clk, Metrics: pm}
	if tweak != nil {
		tweak(&cfg)
	}
	pool, err := peer.NewPool(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		pool.Close(context.Background())
		t.Fatal(err)
	}
	h := &storeHandler{self: name, store: store, clk: clk, record: true}
	n := &node{name: name, addr: lis.Addr().String(), h: h, pool: pool, scfg: peer.ServerConfig{Self: name, Handler: h, Stats: h, Clock: clock.System(), Metrics: pm},
		store: store, reg: reg, srv: grpc.NewServer(sopts...)}
	return n, lis
}

// newServer makes n's peer service from n.scfg and registers it on n.srv.
func (n *node) newServer(t testing.TB) {
	t.Helper()
	psrv, err := peer.NewServer(n.scfg)
	if err != nil {
		t.Fatal(err)
	}
	n.psrv = psrv
	n.psrv.Register(n.srv)
}

// serve serves n on lis until the test ends, making its peer service first
// unless newServer did.
func (n *node) serve(t testing.TB, lis net.Listener) {
	t.Helper()
	if n.psrv == nil {
		n.newServer(t)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = n.srv.Serve(lis)
	}()
	t.Cleanup(func() {
		n.psrv.Drain()
		n.srv.Stop()
		<-served
		if err := n.pool.Close(context.Background()); err != nil {
			t.Errorf("%s: Pool.Close: %v", n.name, err)
		}
	})
}

func startNodes(t testing.TB, clk clock.Clock, tweak func(*peer.Config), names ...string) []*node {
	t.Helper()
	nodes := make([]*node, len(names))
	for i, name := range names {
		nodes[i] = startNode(t, name, clk, tweak)
	}
	return nodes
}

// realTransport runs a node's pool on real time, with failTimeout.
func realTransport(c *peer.Config) {
	c.Clock = clock.System()
	c.Timeout = failTimeout
}

// formCluster gives every node's pool the member list of all of them, at
// ring version testVersion.
func formCluster(nodes ...*node) {
	addrs := make(map[string]string, len(nodes))
	for _, n := range nodes {
		addrs[n.name] = n.addr
	}
	for _, n := range nodes {
		n.pool.SetMembers(testVersion, addrs)
	}
}

// testKeys returns n keys "prefix-i".
func testKeys(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return keys
}

func hourlyLimit(n int64) bucket.Limit { return bucket.MustLimit(bucket.TokenBucket, n, time.Hour, 0) }

// check sends one check of cost 1 on key under l from n to the member to,
// within timeout, and returns the answer and the node that decided.
func check(n *node, to, key string, l bucket.Limit, timeout time.Duration) (peer.Answer, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out [1]peer.Answer
	owner, err := n.pool.Check(ctx, to, []peer.Request{{Key: key, Limit: l, Cost: 1}}, out[:])
	return out[0], owner, err
}

// check1 is check that must be answered.
func check1(t testing.TB, n *node, to, key string, l bucket.Limit) (peer.Answer, string) {
	t.Helper()
	a, owner, err := check(n, to, key, l, 10*time.Second)
	if err != nil {
		t.Fatalf("Check(%s from %s to %s): %v", key, n.name, to, err)
	}
	return a, owner
}

// timedCheck is check, with how long it took.
func timedCheck(n *node, to, key string, l bucket.Limit, timeout time.Duration) (peer.Answer, time.Duration, error) {
	start := time.Now()
	a, _, err := check(n, to, key, l, timeout)
	return a, time.Since(start), err
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
