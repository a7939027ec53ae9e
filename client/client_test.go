package client_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/api"
	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/client"
	"github.com/ringlimit/ringlimit/clock"
	"github.com/ringlimit/ringlimit/cluster"
	"github.com/ringlimit/ringlimit/forward"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/policy"
	pb "github.com/ringlimit/ringlimit/proto/ringlimitv1"
)

func TestMain(m *testing.M) {
	// The example's node runs memberlist, whose Shutdown does not wait for
	// a probe in flight: its goroutine ends when the probe's ack timer fires.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/hashicorp/memberlist.(*Memberlist).probeNode"))
}

// ---- harness ---------------------------------------------------------------

// clusterStart is where every test cluster's fake clock starts: on a whole
// hour, so that windows line up. The clock moves only when a test says so,
// so that remaining, retry-after and reset are exact.
var clusterStart = clock.Instant(int64(1_700_000_000/3600*3600) * int64(time.Second))

// defaultPolicy is the policy file of a cluster whose test gives none.
const defaultPolicy = `
version: test
policies:
  api:
    default_tier: free
    tiers:
      free: { limit: 5, per: 1h, burst: 5 }
    global: { limit: 1000, per: 1h }
`

// rpcCounter counts the public RateLimiter/Check RPCs the test servers
// receive (not the peer RPCs between nodes), and can fail or hold them.
type rpcCounter struct {
	calls  atomic.Int64
	checks atomic.Int64

	mu     sync.Mutex
	sizes  []int            // checks per RPC, in arrival order
	byNode map[string]int64 // RPCs per node
	hook   func(node string, req *pb.CheckRequest) error

	// Leases RPCs: operations per RPC in arrival order, operations per
	// node, and a hook each runs first.
	leaseSizes  []int
	leaseByNode map[string]int64
	leaseHook   func(node string, req *pb.LeasesRequest) error

	// Batches streams opened per node, and a hook each runs first (an
	// error refuses the stream).
	streams    map[string]int64
	streamHook func(node string) error
}

func (c *rpcCounter) streamInterceptor(node string) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if info.FullMethod != pb.RateLimiter_Batches_FullMethodName {
			return handler(srv, ss)
		}
		c.mu.Lock()
		c.streams[node]++
		hook := c.streamHook
		c.mu.Unlock()
		if hook != nil {
			if err := hook(node); err != nil {
				return err
			}
		}
		return handler(srv, ss)
	}
}

func (c *rpcCounter) interceptor(node string) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if info.FullMethod == pb.RateLimiter_Leases_FullMethodName {
			lr := req.(*pb.LeasesRequest)
			c.mu.Lock()
			c.leaseSizes = append(c.leaseSizes, len(lr.GetOps()))
			c.leaseByNode[node] += int64(len(lr.GetOps()))
			hook := c.leaseHook
			c.mu.Unlock()
			if hook != nil {
				if err := hook(node, lr); err != nil {
					return nil, err
				}
			}
			return handler(ctx, req)
		}
		if info.FullMethod != pb.RateLimiter_Check_FullMethodName {
			return handler(ctx, req)
		}
		cr := req.(*pb.CheckRequest)
		c.calls.Add(1)
		c.checks.Add(int64(len(cr.GetChecks())))
		c.mu.Lock()
		c.sizes = append(c.sizes, len(cr.GetChecks()))
		c.byNode[node]++
		hook := c.hook
		c.mu.Unlock()
		if hook != nil {
			if err := hook(node, cr); err != nil {
				return nil, err
			}
		}
		return handler(ctx, req)
	}
}

// setHook installs (nil: removes) a function every public Check RPC runs
// first; an error it returns is the RPC's answer.
func (c *rpcCounter) setHook(h func(node string, req *pb.CheckRequest) error) {
	c.mu.Lock()
	c.hook = h
	c.mu.Unlock()
}

// reset zeroes the counts.
func (c *rpcCounter) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls.Store(0)
	c.checks.Store(0)
	c.sizes = nil
	clear(c.byNode)
	c.leaseSizes = nil
	clear(c.leaseByNode)
}

func (c *rpcCounter) rpcSizes() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.sizes)
}

// testNode is one in-process node, started through node.Start.
type testNode struct {
	name   string
	addr   string // the public gRPC API
	store  *bucket.Store
	router *forward.Router
	policy *policy.Manager
	reg    *prometheus.Registry // the node's metrics
	n      *node.Node
}

// testCluster is n nodes that know each other, on one fake clock.
type testCluster struct {
	nodes      []*testNode
	clock      *testkit.Clock
	rpc        *rpcCounter
	policyPath string
	tokens     string // the admin token file
}

// startCluster starts n nodes named node-1..node-n on 127.0.0.1:0 with the
// policy file policyYAML, all on one fake clock, joined into one cluster,
// and moves the clock past the routers' grace once every ring holds them
// all. Stop undoes it.
func startCluster(n int, policyYAML string) (*testCluster, error) {
	return startClusterAt(n, policyYAML, clusterStart)
}

// startClusterAt is startCluster with the fake clock starting at start.
func startClusterAt(n int, policyYAML string, start clock.Instant) (*testCluster, error) {
	dir, err := os.MkdirTemp("", "ringlimit-client-test")
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(path, []byte(policyYAML), 0o644); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	tokens := filepath.Join(dir, "admin-tokens")
	if err := os.WriteFile(tokens, []byte("ops:"+testAdminToken+"\n"), 0o600); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	c := &testCluster{clock: testkit.NewClock(start), rpc: &rpcCounter{byNode: map[string]int64{}, leaseByNode: map[string]int64{}, streams: map[string]int64{}}, policyPath: path}
	fail := func(err error) (*testCluster, error) {
		c.Stop()
		return nil, err
	}
	c.tokens = tokens
	for range n {
		if err := c.startNode(); err != nil {
			return fail(err)
		}
	}
	if err := c.converge(); err != nil {
		return fail(err)
	}
	c.clock.Advance(forward.DefaultConfig().Grace)
	return c, nil
}

// startNode starts node-<len(nodes)+1>, joined to node-1.
func (c *testCluster) startNode() error {
	name := fmt.Sprintf("node-%d", len(c.nodes)+1)
	cfg := node.DefaultLocalConfig()
	cfg.Name, cfg.PolicyPath, cfg.Clock = name, c.policyPath, c.clock
	cfg.AdminTokenFile = c.tokens
	cfg.QuiesceTimeout = time.Millisecond // the fake clock stands still: no wait for idle peers
	cfg.Registerer = prometheus.NewRegistry()
	cfg.GRPCUnaryInterceptors = []grpc.UnaryServerInterceptor{c.rpc.interceptor(name)}
	cfg.GRPCServerOptions = []grpc.ServerOption{grpc.ChainStreamInterceptor(c.rpc.streamInterceptor(name))}
	// No test here is about failure detection, and a member suspected on
	// a loaded machine changes the ring under a test that counts exactly:
	// the probes of a LAN, not of the loopback defaults (200 ms, 100 ms).
	cfg.ClusterTuning = func(cc *cluster.Config) { cc.ProbeInterval, cc.ProbeTimeout = time.Second, 500*time.Millisecond }
	// Nor about slow owners: an owner that waits on its successor for a
	// lease's copy waits a quarter of this, 125 ms by default, which a
	// loaded machine under -race can exceed, and the acquire then comes
	// back degraded.
	cfg.PeerTimeout = 2 * time.Second
	if len(c.nodes) > 0 {
		cfg.Join = []string{c.nodes[0].n.GossipAddr()}
	}
	nd, err := node.Start(context.Background(), cfg)
	if err != nil {
		return err
	}
	c.nodes = append(c.nodes, &testNode{name: name, addr: nd.GRPCAddr(), store: nd.Store(), router: nd.Router(), policy: nd.Policy(),
		reg: cfg.Registerer.(*prometheus.Registry), n: nd})
	return nil
}

// converge waits until every node's ring holds every node, in one version.
func (c *testCluster) converge() error {
	var names []string
	for _, nd := range c.nodes {
		names = append(names, nd.name)
	}
	converged := testkit.Poll(20*time.Second, func() bool {
		for _, nd := range c.nodes {
			if !slices.Equal(slices.Sorted(slices.Values(nd.router.RingMembers())), names) || nd.router.RingVersion() != c.nodes[0].router.RingVersion() {
				return false
			}
		}
		return true
	})
	if !converged {
		return fmt.Errorf("the rings did not converge on %v", names)
	}
	return nil
}

// Stop closes the nodes, the last started first.
func (c *testCluster) Stop() {
	for _, nd := range slices.Backward(c.nodes) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		nd.n.Close(ctx)
		cancel()
	}
	if c.policyPath != "" {
		os.RemoveAll(filepath.Dir(c.policyPath))
	}
}

// newCluster starts a cluster for t and stops it when t ends.
func newCluster(t testing.TB, n int, policyYAML string) *testCluster {
	t.Helper()
	if policyYAML == "" {
		policyYAML = defaultPolicy
	}
	c, err := startCluster(n, policyYAML)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	return c
}

func (c *testCluster) addrs() []string {
	out := make([]string, len(c.nodes))
	for i, nd := range c.nodes {
		out[i] = nd.addr
	}
	return out
}

// owner returns the node the ring gives key to.
func (c *testCluster) owner(key string) string {
	o, _ := c.nodes[0].router.Owner(key)
	return o
}

// used returns what key has spent on its owner's store (0 if it has no
// state there).
func (c *testCluster) used(t testing.TB, key string) int64 {
	t.Helper()
	for _, nd := range c.nodes {
		if nd.name != c.owner(key) {
			continue
		}
		_, used, _ := nd.store.Used(key, c.clock.Now())
		return used
	}
	t.Fatalf("no node owns %s", key)
	return 0
}

// newClient builds a Client for t and closes it when t ends (before the
// cluster stops). Its outages are not logged unless cfg has a Logger.
func newClient(t testing.TB, cfg client.Config) *client.Client {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cl, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// ikey is the key the store holds for inline(key, limit, ...): the key in
// the inline namespace under its limit.
func ikey(key string, limit int64) string {
	l := bucket.MustLimit(bucket.TokenBucket, limit, time.Hour, 0)
	return bucket.InlineKey(key, &l)
}

// inline returns an inline check of key at limit per hour (burst = limit).
func inline(key string, limit, cost int64) *pb.Check {
	return &pb.Check{Key: key, Cost: &cost, Limit: &pb.Limit{Limit: limit, PerMs: time.Hour.Milliseconds()}}
}

// ---- 1. inline limits, exact and in order ---------------------------------------

func TestClientExactAcrossNodes(t *testing.T) {
	const goroutines, total, limit = 32, 1000, 100
	c := newCluster(t, 3, "")
	cl := newClient(t, client.Config{Targets: c.addrs(), Timeout: 10 * time.Second})
	var allowed, rejected, next atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range goroutines {
		wg.Go(func() {
			<-start
			for next.Add(1) <= total {
				ds, err := cl.Check(context.Background(), inline("hot", limit, 1))
				if err != nil {
					t.Error(err)
					return
				}
				d := ds[0]
				if len(ds) != 1 || d.GetDegraded() || d.GetLimit() != limit || d.GetScope() != api.ScopeInline || d.GetOwner() != c.owner("hot") {
					t.Errorf("decision %+v, want limit %d, scope inline, owner %s, not degraded", d, limit, c.owner("hot"))
					return
				}
				if d.GetAllowed() {
					allowed.Add(1)
				} else {
					rejected.Add(1)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	if allowed.Load() != limit || rejected.Load() != total-limit {
		t.Fatalf("allowed %d rejected %d, want exactly %d and %d", allowed.Load(), rejected.Load(), limit, total-limit)
	}
	if got := c.used(t, ikey("hot", limit)); got != limit {
		t.Fatalf("owner %s: used %d, want %d", c.owner("hot"), got, limit)
	}
	// Every node served some of the checks: the client spreads them.
	c.rpc.mu.Lock()
	defer c.rpc.mu.Unlock()
	for _, nd := range c.nodes {
		if c.rpc.byNode[nd.name] == 0 {
			t.Errorf("%s received no RPC: %v", nd.name, c.rpc.byNode)
		}
	}
	t.Logf("RPCs per node: %v (%d checks in %d RPCs)", c.rpc.byNode, c.rpc.checks.Load(), c.rpc.calls.Load())
}

func TestClientMultiCheckDecisionsInOrder(t *testing.T) {
	c := newCluster(t, 3, "")
	for _, unbatched := range []bool{false, true} {
		t.Run(fmt.Sprintf("unbatched=%v", unbatched), func(t *testing.T) {
			cl := newClient(t, client.Config{Targets: c.addrs(), Unbatched: unbatched})
			a, b := fmt.Sprintf("order-a-%v", unbatched), fmt.Sprintf("order-b-%v", unbatched)
			apiKey := fmt.Sprintf("k-%v", unbatched)
			pol := &pb.Check{Request: &pb.PolicyRequest{ApiKey: apiKey}}
			ds, err := cl.Check(context.Background(),
				inline(a, 5, 1), // a: 4 left
				inline(b, 7, 2), // b: 5 left
				inline(a, 5, 3), // a: 1 left
				pol,             // tier:free 5/h: 4 left
				inline(a, 5, 2), // a: rejected, 1 token short at 5/h: 12 min
				pol,             // 3 left
			)
			if err != nil {
				t.Fatal(err)
			}
			type want struct {
				allowed          bool
				limit, remaining int64
				retryMs, resetMs int64
				scope, owner     string
			}
			wants := []want{
				{true, 5, 4, 0, 12 * 60_000, "inline", c.owner(a)},
				{true, 7, 5, 0, (2*3_600_000 + 6) / 7, "inline", c.owner(b)}, // 2/7 h, rounded up to the ms
				{true, 5, 1, 0, 4 * 12 * 60_000, "inline", c.owner(a)},
				{true, 5, 4, 0, 12 * 60_000, "tier:free", c.owner("p|api|tier:free|key:" + apiKey)},
				{false, 5, 1, 12 * 60_000, 4 * 12 * 60_000, "inline", c.owner(a)},
				{true, 5, 3, 0, 2 * 12 * 60_000, "tier:free", c.owner("p|api|tier:free|key:" + apiKey)},
			}
			if len(ds) != len(wants) {
				t.Fatalf("%d decisions for %d checks", len(ds), len(wants))
			}
			for i, w := range wants {
				d := ds[i]
				got := want{d.GetAllowed(), d.GetLimit(), d.GetRemaining(), d.GetRetryAfterMs(), d.GetResetAfterMs(), d.GetScope(), d.GetOwner()}
				if got != w {
					t.Errorf("decision %d: got %+v, want %+v", i, got, w)
				}
			}
			if v := ds[3].GetPolicyVersion(); v == "" || v != c.nodes[0].policy.Current().Version {
				t.Errorf("policy version %q, want %q", v, c.nodes[0].policy.Current().Version)
			}
		})
	}
}

// ---- 2. coalescing ----------------------------------------------------------------

func TestClientCoalescesConcurrentChecks(t *testing.T) {
	const goroutines, perG, maxBatch = 64, 50, 64
	const total = goroutines * perG
	c := newCluster(t, 3, "")
	hammer := func(t *testing.T, cl *client.Client) time.Duration {
		t.Helper()
		var wg sync.WaitGroup
		start := make(chan struct{})
		began := time.Now()
		for g := range goroutines {
			wg.Go(func() {
				<-start
				for i := range perG {
					ds, err := cl.Check(context.Background(), inline(fmt.Sprintf("co-%d", (g+i)%16), 1_000_000, 1))
					if err != nil {
						t.Error(err)
						return
					}
					if !ds[0].GetAllowed() || ds[0].GetDegraded() {
						t.Errorf("%+v", ds[0])
						return
					}
				}
			})
		}
		close(start)
		wg.Wait()
		return time.Since(began)
	}

	c.rpc.reset()
	el := hammer(t, newClient(t, client.Config{Targets: c.addrs(), MaxBatch: maxBatch, Timeout: 10 * time.Second}))
	rpcs, checks := c.rpc.calls.Load(), c.rpc.checks.Load()
	ratio := float64(checks) / float64(rpcs)
	t.Logf("coalesced: %d checks in %d RPCs = %.2f checks per RPC (MaxBatch %d, 64 goroutines, 3 nodes), %v", checks, rpcs, ratio, maxBatch, el)
	if checks != total {
		t.Fatalf("servers saw %d checks, want %d", checks, total)
	}
	if ratio < 2 {
		t.Fatalf("%.2f checks per RPC, want at least 2", ratio)
	}
	if big := slices.Max(c.rpc.rpcSizes()); big > maxBatch {
		t.Fatalf("an RPC carried %d checks, above MaxBatch %d", big, maxBatch)
	}

	c.rpc.reset()
	el = hammer(t, newClient(t, client.Config{Targets: c.addrs(), MaxBatch: maxBatch, Unbatched: true, Timeout: 10 * time.Second}))
	rpcs, checks = c.rpc.calls.Load(), c.rpc.checks.Load()
	t.Logf("unbatched: %d checks in %d RPCs, %v", checks, rpcs, el)
	if rpcs != total || checks != total {
		t.Fatalf("unbatched: %d checks in %d RPCs, want %d in %d", checks, rpcs, total, total)
	}
}

// A call of more checks than MaxBatch travels alone, in one RPC.
func TestClientLargeCallOneRPC(t *testing.T) {
	c := newCluster(t, 3, "")
	cl := newClient(t, client.Config{Targets: c.addrs(), MaxBatch: 4})
	checks := make([]*pb.Check, 10)
	for i := range checks {
		checks[i] = inline(fmt.Sprintf("large-%d", i), 10, int64(1+i%3))
	}
	ds, err := cl.Check(context.Background(), checks...)
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range ds {
		if !d.GetAllowed() || d.GetRemaining() != 10-int64(1+i%3) {
			t.Errorf("decision %d: %+v", i, d)
		}
	}
	if got := c.rpc.rpcSizes(); !slices.Equal(got, []int{10}) {
		t.Fatalf("RPC sizes %v, want one RPC of 10", got)
	}
}

// ---- 3. failover and errors ------------------------------------------------------

func TestClientFailoverOneDeadTarget(t *testing.T) {
	c := newCluster(t, 3, "")
	dead := testkit.DeadAddr(t)
	for _, unbatched := range []bool{false, true} {
		t.Run(fmt.Sprintf("unbatched=%v", unbatched), func(t *testing.T) {
			key := fmt.Sprintf("failover-%v", unbatched)
			targets := []string{c.nodes[0].addr, dead, c.nodes[1].addr, c.nodes[2].addr}
			cl := newClient(t, client.Config{Targets: targets, Timeout: 5 * time.Second, Unbatched: unbatched})
			var allowed atomic.Int64
			var wg sync.WaitGroup
			for range 8 {
				wg.Go(func() {
					for range 25 {
						ds, err := cl.Check(context.Background(), inline(key, 100, 1))
						if err != nil {
							t.Errorf("with one dead target: %v", err)
							return
						}
						if ds[0].GetAllowed() {
							allowed.Add(1)
						}
					}
				})
			}
			wg.Wait()
			// Nothing reached the dead node, so nothing was spent twice.
			if allowed.Load() != 100 || c.used(t, ikey(key, 100)) != 100 {
				t.Fatalf("allowed %d, used %d; want 100 and 100", allowed.Load(), c.used(t, ikey(key, 100)))
			}
		})
	}
}

func TestClientAllDeadErrNoNode(t *testing.T) {
	const timeout = 300 * time.Millisecond
	for _, unbatched := range []bool{false, true} {
		t.Run(fmt.Sprintf("refused/unbatched=%v", unbatched), func(t *testing.T) {
			cl := newClient(t, client.Config{Targets: []string{testkit.DeadAddr(t), testkit.DeadAddr(t), testkit.DeadAddr(t)}, Timeout: timeout, Unbatched: unbatched})
			for i := range 5 {
				start := time.Now()
				_, err := cl.Check(context.Background(), inline("k", 10, 1))
				el := time.Since(start)
				if !errors.Is(err, client.ErrNoNode) {
					t.Fatalf("check %d: %v, want ErrNoNode", i, err)
				}
				if el > timeout+500*time.Millisecond {
					t.Fatalf("check %d: ErrNoNode after %v, want within Timeout %v + 500ms", i, el, timeout)
				}
			}
		})
	}
	// Targets that accept and never answer: each is tried once, for at most
	// Timeout.
	t.Run("blackhole", func(t *testing.T) {
		cl := newClient(t, client.Config{Targets: []string{testkit.Blackhole(t), testkit.Blackhole(t)}, Timeout: timeout})
		start := time.Now()
		_, err := cl.Check(context.Background(), inline("k", 10, 1))
		el := time.Since(start)
		t.Logf("two silent targets: %v after %v", err, el)
		if !errors.Is(err, client.ErrNoNode) {
			t.Fatalf("%v, want ErrNoNode", err)
		}
		if el < timeout || el > 2*timeout+500*time.Millisecond {
			t.Fatalf("ErrNoNode after %v, want between Timeout and 2×Timeout (+500ms)", el)
		}
		// A caller's own deadline ends the call first, with its error.
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		start = time.Now()
		_, err = cl.Check(ctx, inline("k", 10, 1))
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, client.ErrNoNode) || time.Since(start) > timeout {
			t.Fatalf("caller deadline 50ms: %v after %v, want context.DeadlineExceeded promptly", err, time.Since(start))
		}
	})
}

func TestClientInvalidArgumentNotRetried(t *testing.T) {
	c := newCluster(t, 3, "")
	bad := []struct {
		name  string
		check *pb.Check
	}{
		{"empty key", inline("", 10, 1)},
		{"cost above capacity", inline("k", 10, 11)},
		{"no limit", &pb.Check{Key: "k"}},
		{"unknown tier", &pb.Check{Request: &pb.PolicyRequest{ApiKey: "k", Tier: "gold"}}},
	}
	for _, unbatched := range []bool{false, true} {
		cl := newClient(t, client.Config{Targets: c.addrs(), Unbatched: unbatched})
		for _, b := range bad {
			c.rpc.reset()
			_, err := cl.Check(context.Background(), inline("fine", 10, 1), b.check)
			if status.Code(err) != codes.InvalidArgument || errors.Is(err, client.ErrNoNode) {
				t.Errorf("unbatched=%v, %s: %v, want the InvalidArgument status as is", unbatched, b.name, err)
			}
			if n := c.rpc.calls.Load(); n != 1 {
				t.Errorf("unbatched=%v, %s: %d RPCs, want 1 (not retried on another node)", unbatched, b.name, n)
			}
		}
	}
	// Nothing of the rejected calls was applied.
	for _, nd := range c.nodes {
		if nd.store.Has(ikey("fine", 10)) {
			t.Fatalf("%s holds the good check of a rejected call", nd.name)
		}
	}
}

// parkedCtx is a context that tells when its call is queued in a client's
// batcher: the batcher reads Done once as it queues the call and once more
// as it waits for the answer, so the second read means the call is in the
// queue, and cancelling the context from then on abandons a queued call.
type parkedCtx struct {
	context.Context
	reads  atomic.Int32
	parked chan struct{}
}

func newParkedCtx(parent context.Context) *parkedCtx {
	return &parkedCtx{Context: parent, parked: make(chan struct{})}
}

func (c *parkedCtx) Done() <-chan struct{} {
	if c.reads.Add(1) == 2 {
		close(c.parked)
	}
	return c.Context.Done()
}

// awaitParked waits until every ctx's call is queued.
func awaitParked(t *testing.T, ctxs ...*parkedCtx) {
	t.Helper()
	timer := time.NewTimer(5 * time.Second)
	defer timer.Stop()
	for i, c := range ctxs {
		select {
		case <-c.parked:
		case <-timer.C:
			t.Fatalf("call %d of %d not queued within 5s", i+1, len(ctxs))
		}
	}
}

// holdBlocker makes the cluster's servers hold every RPC whose first check
// is on key "blocker" until the returned release is called (at the latest
// when the test ends); held is closed when the first such RPC arrives.
func holdBlocker(t *testing.T, c *testCluster) (held <-chan struct{}, release func()) {
	t.Helper()
	h, r := make(chan struct{}), make(chan struct{})
	var heldOnce, releaseOnce sync.Once
	c.rpc.setHook(func(_ string, req *pb.CheckRequest) error {
		if req.GetChecks()[0].GetKey() == "blocker" {
			heldOnce.Do(func() { close(h) })
			<-r
		}
		return nil
	})
	release = func() { releaseOnce.Do(func() { close(r) }) }
	t.Cleanup(release)
	return h, release
}

// A bad check that travels in one RPC with other goroutines' good checks
// fails only its own caller.
func TestClientBadCheckCoalescedWithGoodOnes(t *testing.T) {
	const good = 8
	c := newCluster(t, 3, "")
	// One target and one call slot: while the first RPC is held, every
	// other check queues and leaves in the next RPC. The client does not
	// learn the ring, which would send each key to its own owner.
	cl := newClient(t, client.Config{Targets: []string{c.nodes[0].addr}, MaxInFlight: 1, Timeout: 10 * time.Second, RingRefresh: -1})
	held, release := holdBlocker(t, c)
	var wg sync.WaitGroup
	wg.Go(func() {
		if _, err := cl.Check(context.Background(), inline("blocker", 10, 1)); err != nil {
			t.Errorf("blocker: %v", err)
		}
	})
	<-held
	var badErr error
	results := make([]*pb.Decision, good)
	errs := make([]error, good)
	ctxs := make([]*parkedCtx, good+1)
	for i := range good {
		ctxs[i] = newParkedCtx(context.Background())
		wg.Go(func() {
			ds, err := cl.Check(ctxs[i], inline(fmt.Sprintf("good-%d", i), 10, int64(1+i%3)))
			errs[i] = err
			if err == nil {
				results[i] = ds[0]
			}
		})
	}
	ctxs[good] = newParkedCtx(context.Background())
	wg.Go(func() { _, badErr = cl.Check(ctxs[good], inline("", 10, 1)) })
	awaitParked(t, ctxs...) // the 9 callers wait behind the held RPC
	release()
	wg.Wait()

	if status.Code(badErr) != codes.InvalidArgument {
		t.Errorf("bad check: %v, want InvalidArgument", badErr)
	}
	for i := range good {
		if errs[i] != nil || !results[i].GetAllowed() || results[i].GetRemaining() != 10-int64(1+i%3) {
			t.Errorf("good check %d: %+v, %v; want allowed with %d left", i, results[i], errs[i], 10-int64(1+i%3))
		}
		if used := c.used(t, ikey(fmt.Sprintf("good-%d", i), 10)); used != int64(1+i%3) {
			t.Errorf("good-%d: used %d, want %d (applied exactly once)", i, used, 1+i%3)
		}
	}
	sizes := c.rpc.rpcSizes()
	t.Logf("RPC sizes: %v", sizes)
	if !slices.Contains(sizes, good+1) {
		t.Fatalf("RPC sizes %v: the bad check never travelled with the %d good ones", sizes, good)
	}
	// The blocker, the mixed RPC, then each caller alone.
	if len(sizes) != 1+1+good+1 {
		t.Fatalf("%d RPCs, want %d", len(sizes), 1+1+good+1)
	}
}

// A check whose caller gives up while it waits in the queue is never sent:
// the node neither receives it nor spends anything for it.
func TestClientAbandonedCheckIsNotSent(t *testing.T) {
	c := newCluster(t, 1, "")
	cl := newClient(t, client.Config{Targets: c.addrs(), MaxInFlight: 1, Timeout: 10 * time.Second})
	held, release := holdBlocker(t, c)
	blocker := make(chan error, 1)
	go func() {
		_, err := cl.Check(context.Background(), inline("blocker", 10, 1))
		blocker <- err
	}()
	<-held
	// The second check queues behind the held RPC, and its caller gives up.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pc := newParkedCtx(ctx)
	gone := make(chan error, 1)
	go func() {
		_, err := cl.Check(pc, inline("gone", 10, 1))
		gone <- err
	}()
	awaitParked(t, pc)
	cancel()
	if err := <-gone; !errors.Is(err, context.Canceled) {
		t.Fatalf("abandoned check: %v, want context.Canceled", err)
	}
	release()
	if err := <-blocker; err != nil {
		t.Fatalf("blocker: %v", err)
	}
	// A third check goes after it: the queue has been drained past the
	// abandoned one by the time it is answered.
	if ds, err := cl.Check(context.Background(), inline("after", 10, 1)); err != nil || !ds[0].GetAllowed() {
		t.Fatalf("check after: %v, %v; want allowed", ds, err)
	}
	if got := c.rpc.rpcSizes(); !slices.Equal(got, []int{1, 1}) {
		t.Fatalf("RPC sizes %v, want [1 1]: the blocker and the check after, nothing for the abandoned one", got)
	}
	if got := client.AbandonedChecks(cl); got != 1 {
		t.Fatalf("abandoned checks %d, want 1", got)
	}
	store := c.nodes[0].store
	kb, kg, ka := ikey("blocker", 10), ikey("gone", 10), ikey("after", 10)
	if !store.Has(kb) || store.Has(kg) || !store.Has(ka) {
		t.Fatalf("the node holds blocker %v, gone %v, after %v; want the abandoned one alone missing",
			store.Has(kb), store.Has(kg), store.Has(ka))
	}
	if b, a := c.used(t, kb), c.used(t, ka); b != 1 || a != 1 {
		t.Fatalf("used: blocker %d, after %d; want 1 and 1", b, a)
	}
}

// The documentation says a node that failed in the last second "is tried
// last"; Check skips it instead unless it happens to come last in turn, so
// a node that failed once, and is fine again, is not tried while a dead one
// is.
func TestClientRecentlyFailedNodeIsTriedLast(t *testing.T) {
	c := newCluster(t, 1, "")
	cl := newClient(t, client.Config{Targets: []string{c.nodes[0].addr, testkit.DeadAddr(t)}, Timeout: 2 * time.Second})
	// Warm up both connections (the dead one is marked failed).
	for range 2 {
		if _, err := cl.Check(context.Background(), inline("warm", 100, 1)); err != nil {
			t.Fatal(err)
		}
	}
	// node-1 fails one RPC, then is fine again.
	var failed atomic.Bool
	c.rpc.setHook(func(string, *pb.CheckRequest) error {
		if failed.CompareAndSwap(false, true) {
			return status.Error(codes.Unavailable, "injected")
		}
		return nil
	})
	var errs []error
	for range 4 {
		if _, err := cl.Check(context.Background(), inline("k", 100, 1)); err != nil {
			errs = append(errs, err)
		}
	}
	// The first check may legitimately fail (both nodes down as far as it
	// can tell); the others must not: node-1 is up.
	if len(errs) > 1 {
		t.Fatalf("with targets [up-again, dead], %d of 4 checks after one injected failure got %v; want at most 1 error", len(errs), errs)
	}
}

// A node that failed is tried last for one second of the client's Clock,
// then in its turn again. Policy checks carry no key, so no owner is
// learned and the client takes the targets in turn.
func TestClientFailedNodeTriedLastOnItsClock(t *testing.T) {
	c := newCluster(t, 1, "")
	dead, up := testkit.DeadAddr(t), c.nodes[0].addr
	var mu sync.Mutex
	tries := map[string]int{}
	count := grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		mu.Lock()
		tries[cc.Target()]++
		mu.Unlock()
		return invoker(ctx, method, req, reply, cc, opts...)
	})
	// A batch on the Batches stream is a message sent, or a stream that
	// could not be opened.
	countStream := grpc.WithStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil {
			mu.Lock()
			tries[cc.Target()]++
			mu.Unlock()
			return nil, err
		}
		return &sendCounter{ClientStream: cs, count: func() {
			mu.Lock()
			tries[cc.Target()]++
			mu.Unlock()
		}}, nil
	})
	clk := testkit.NewClock(0)
	// No ring: its calls would count as tries, and it knows no owner for a
	// policy check anyway.
	cl := newClient(t, client.Config{Targets: []string{dead, up}, Clock: clk, DialOptions: []grpc.DialOption{count, countStream}, RingRefresh: -1})
	// Each step moves the clock, makes one check and says how often each
	// target has been tried in all. The client starts the first check at
	// the second target, then alternates.
	steps := []struct {
		advance  time.Duration
		dead, up int
	}{
		{0, 0, 1},                      // up first
		{0, 1, 2},                      // dead first: it fails and is marked
		{0, 1, 3},                      // up first
		{0, 1, 4},                      // dead's turn, but it failed 0s ago: up only
		{999 * time.Millisecond, 1, 5}, // up first
		{0, 1, 6},                      // dead's turn, failed 999ms ago: up only
		{time.Millisecond, 1, 7},       // up first
		{0, 2, 8},                      // dead's turn, failed 1s ago: tried again
	}
	for i, s := range steps {
		clk.Advance(s.advance)
		ds, err := cl.Check(context.Background(), &pb.Check{Request: &pb.PolicyRequest{ApiKey: fmt.Sprintf("turn-%d", i)}})
		if err != nil || !ds[0].GetAllowed() {
			t.Fatalf("step %d: Check = %v, %v; want allowed", i, ds, err)
		}
		mu.Lock()
		gotDead, gotUp := tries[dead], tries[up]
		mu.Unlock()
		if gotDead != s.dead || gotUp != s.up {
			t.Fatalf("step %d: after +%v, tried dead %d and up %d times, want %d and %d", i, s.advance, gotDead, gotUp, s.dead, s.up)
		}
	}
}

// sendCounter counts the messages sent on a client stream.
type sendCounter struct {
	grpc.ClientStream
	count func()
}

func (s *sendCounter) SendMsg(m any) error {
	s.count()
	return s.ClientStream.SendMsg(m)
}

// ---- 4. Close ------------------------------------------------------------------

func TestClientClose(t *testing.T) {
	c := newCluster(t, 3, "")
	for _, unbatched := range []bool{false, true} {
		t.Run(fmt.Sprintf("unbatched=%v", unbatched), func(t *testing.T) {
			cl, err := client.New(client.Config{Targets: c.addrs(), Unbatched: unbatched})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := cl.Check(context.Background(), inline("close", 100, 1)); err != nil {
				t.Fatal(err)
			}
			if err := cl.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			for i := range 20 {
				start := time.Now()
				_, err := cl.Check(context.Background(), inline("close", 100, 1))
				if err == nil || time.Since(start) > 500*time.Millisecond {
					t.Fatalf("Check %d after Close: %v after %v, want an error at once", i, err, time.Since(start))
				}
				if !errors.Is(err, client.ErrNoNode) {
					t.Fatalf("Check %d after Close: %v, want ErrNoNode", i, err)
				}
			}
			// A second Close returns the first one's result, at once.
			done := make(chan error, 1)
			go func() { done <- cl.Close() }()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("second Close: %v, want nil like the first", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("second Close hangs")
			}
		})
	}
}

// Close while many goroutines check: every call returns (a decision or an
// error), none hangs, and nothing is left running (goleak).
func TestClientCloseWhileChecking(t *testing.T) {
	c := newCluster(t, 3, "")
	cl, err := client.New(client.Config{Targets: c.addrs(), Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var ok, failed atomic.Int64
	busy := make(chan struct{}) // closed at the 500th answer
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			for i := range 200 {
				if _, err := cl.Check(context.Background(), inline(fmt.Sprintf("cw-%d-%d", g, i%4), 1000, 1)); err != nil {
					failed.Add(1)
				} else if ok.Add(1) == 500 {
					close(busy)
				}
			}
		})
	}
	select {
	case <-busy:
	case <-time.After(5 * time.Second): // close anyway
	}
	closed := make(chan struct{})
	go func() {
		cl.Close()
		close(closed)
	}()
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("checks hang after Close")
	}
	<-closed
	t.Logf("around Close: %d checks answered, %d failed", ok.Load(), failed.Load())
	if failed.Load() == 0 {
		t.Fatalf("no check failed after Close (%d answered)", ok.Load())
	}
}

func TestNewValidates(t *testing.T) {
	for _, cfg := range []client.Config{
		{},
		{Targets: []string{"127.0.0.1:1"}, MaxBatch: 1001},
		{Targets: []string{"127.0.0.1:1"}, MaxBatch: -1},
		{Targets: []string{"127.0.0.1:1"}, Timeout: -time.Second},
		{Targets: []string{"127.0.0.1:1"}, MaxInFlight: -1},
	} {
		if cl, err := client.New(cfg); err == nil {
			cl.Close()
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}

// forwardedTotal sums ringlimit_forward_checks_total over the nodes.
func forwardedTotal(t *testing.T, c *testCluster) float64 {
	t.Helper()
	return metricSum(t, c, "ringlimit_forward_checks_total", nil)
}

// metricSum adds up the counter name over every node of c, keeping the
// series whose labels keep accepts (nil: all).
func metricSum(t *testing.T, c *testCluster, name string, keep func(labels map[string]string) bool) float64 {
	t.Helper()
	var sum float64
	for _, nd := range c.nodes {
		mfs, err := nd.reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
			for _, m := range mf.GetMetric() {
				labels := map[string]string{}
				for _, lp := range m.GetLabel() {
					labels[lp.GetName()] = lp.GetValue()
				}
				if keep == nil || keep(labels) {
					sum += m.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}

// Once a key's owner has answered (through a forwarding node), the client
// sends that key's checks straight to the owner: no forwarding hop. This
// is how a client without the ring routes (RingRefresh < 0, or a cluster
// that does not serve it).
func TestClientLearnsOwners(t *testing.T) {
	c := newCluster(t, 3, "")
	cl := newClient(t, client.Config{Targets: c.addrs(), RingRefresh: -1})
	keys := make([]string, 300)
	for i := range keys {
		keys[i] = fmt.Sprintf("owner-%d", i)
	}
	pass := func() float64 {
		before := forwardedTotal(t, c)
		for _, k := range keys {
			if _, err := cl.Check(context.Background(), inline(k, 1000, 1)); err != nil {
				t.Fatal(err)
			}
		}
		return forwardedTotal(t, c) - before
	}
	first := pass()
	pass() // keys first decided on their owner by chance are learned now
	third := pass()
	t.Logf("checks forwarded: %v in the first pass of 300, %v in the third", first, third)
	if first < 100 {
		t.Fatalf("first pass forwarded %v of 300 checks; round robin over 3 nodes should forward about 200", first)
	}
	if third != 0 {
		t.Fatalf("third pass forwarded %v checks, want 0: every owner is known", third)
	}
}
