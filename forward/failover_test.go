package forward

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/ringlimit/ringlimit/bucket"
	peerv1 "github.com/ringlimit/ringlimit/proto/peerv1"
)

// blackhole is a TCP listener that accepts connections and never says a
// word: a peer behind it is neither refused nor answered, so only the
// deadline ends a call.
func blackhole(t testing.TB) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		lis.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return lis.Addr().String()
}

// deadAddr returns a loopback address nothing listens on.
func deadAddr(t testing.TB) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

const failTimeout = 200 * time.Millisecond

// timedCheck runs checks through r and returns the results and how long it took.
func timedCheck(t testing.TB, r *Router, checks ...Check) ([]Result, time.Duration) {
	t.Helper()
	out := make([]Result, len(checks))
	start := time.Now()
	err := r.Check(context.Background(), checks, out)
	el := time.Since(start)
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	return out, el
}

func TestOwnerUnreachable(t *testing.T) {
	// A's ring has three members: A, a live Z, and an owner that cannot be
	// reached: a node whose server was stopped after one good check, an
	// address that refuses connections, or one that accepts and never speaks.
	type target struct {
		name string
		addr func(t *testing.T) Member // nil: a real node, stopped
	}
	targets := []target{
		{"stopped server", nil},
		{"refused", func(t *testing.T) Member { return Member{Name: "Y", Addr: deadAddr(t)} }},
		{"blackhole", func(t *testing.T) Member { return Member{Name: "X", Addr: blackhole(t)} }},
	}
	var worst time.Duration
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			clock := newFakeClock()
			a := startNode(t, "A", clock, func(c *Config) { c.PeerTimeout = failTimeout })
			var down Member
			var b *node
			if tg.addr == nil {
				b = startNode(t, "B", clock, nil)
				down = Member{Name: "B", Addr: b.addr}
			} else {
				down = tg.addr(t)
			}
			// Three members: A, the unreachable one, and a live Z.
			z := startNode(t, "Z", clock, nil)
			ms := []Member{{Name: "A", Addr: a.addr}, down, {Name: "Z", Addr: z.addr}}
			a.r.SetMembers(ms)
			z.r.SetMembers(ms)
			if b != nil {
				b.r.SetMembers(ms)
			}
			clock.Advance(testGrace)
			keys := keysOwnedBy(t, a.r, down.Name, "down", 6)
			if b != nil {
				// Reach B once, then stop it.
				if res := check1(t, a.r, keys[5], hourly(10), 1); res.Owner != "B" || res.Degraded {
					t.Fatalf("B alive: %+v", res)
				}
				b.stop()
			}

			var lat []time.Duration
			// FailOpen: admitted, degraded, decided by the entry.
			out, el := timedCheck(t, a.r, Check{Key: keys[0], Limit: hourly(10), Cost: 1, Mode: FailOpen})
			lat = append(lat, el)
			if r := out[0]; !r.Allowed || !r.Degraded || r.Owner != "A" || r.Limit != 10 {
				t.Fatalf("fail_open: %+v", r)
			}
			// FailClosed: rejected, retry after 1s.
			out, el = timedCheck(t, a.r, Check{Key: keys[1], Limit: hourly(10), Cost: 1, Mode: FailClosed})
			lat = append(lat, el)
			if r := out[0]; r.Allowed || !r.Degraded || r.Owner != "A" || r.RetryAfter != time.Second || r.Limit != 10 {
				t.Fatalf("fail_closed: %+v", r)
			}
			// Local: 9 per hour over 3 members = 3 per hour, burst 3.
			var allowed int
			for i := range 5 {
				out, el = timedCheck(t, a.r, Check{Key: keys[2], Limit: hourly(9), Cost: 1, Mode: Local})
				lat = append(lat, el)
				r := out[0]
				if !r.Degraded || r.Owner != "A" || r.Limit != 9 {
					t.Fatalf("local #%d: %+v", i, r)
				}
				if r.Allowed {
					allowed++
					if r.Remaining != int64(2-i) {
						t.Fatalf("local #%d: %+v, want remaining %d of 3", i, r, 2-i)
					}
				} else if r.RetryAfter != 20*time.Minute {
					t.Fatalf("local #%d rejected: %+v, want retry after 20m (3 per hour)", i, r)
				}
			}
			if allowed != 3 {
				t.Fatalf("local: %d of 5 admitted, want 3 (9/h over 3 members)", allowed)
			}
			// Integer division with a minimum of 1: 2 per hour over 3 members
			// is 1 per hour; burst 6 of a 9/h limit is 2.
			out, el = timedCheck(t, a.r,
				Check{Key: keys[3], Limit: hourly(2), Cost: 1, Mode: Local},
				Check{Key: keys[3], Limit: hourly(2), Cost: 1, Mode: Local},
				Check{Key: keys[4], Limit: bucket.MustLimit(bucket.TokenBucket, 9, time.Hour, 6), Cost: 1, Mode: Local},
				Check{Key: keys[4], Limit: bucket.MustLimit(bucket.TokenBucket, 9, time.Hour, 6), Cost: 1, Mode: Local},
				Check{Key: keys[4], Limit: bucket.MustLimit(bucket.TokenBucket, 9, time.Hour, 6), Cost: 1, Mode: Local},
			)
			lat = append(lat, el)
			wantAllowed := []bool{true, false, true, true, false}
			for i, r := range out {
				if r.Allowed != wantAllowed[i] || !r.Degraded || r.Owner != "A" {
					t.Fatalf("min-1 batch: out[%d] = %+v, want allowed=%v", i, r, wantAllowed[i])
				}
			}
			if r := out[1]; r.RetryAfter != time.Hour || r.Limit != 2 {
				t.Fatalf("1 per hour rejected: %+v, want retry after 1h", r)
			}

			for _, mode := range []struct {
				name string
				want float64
			}{{"fail_open", 1}, {"fail_closed", 1}, {"local", 5 + 5}} {
				if got := metricValue(t, a.reg, "ringlimit_degraded_checks_total", "mode", mode.name); got != mode.want {
					t.Errorf("degraded_checks_total{mode=%q} = %v, want %v", mode.name, got, mode.want)
				}
			}
			var maxLat time.Duration
			for _, l := range lat {
				maxLat = max(maxLat, l)
				if l >= time.Second {
					t.Errorf("a degraded call took %v (PeerTimeout %v)", l, failTimeout)
				}
			}
			if tg.name == "blackhole" && lat[0] < failTimeout/2 {
				t.Errorf("blackhole answered in %v: the deadline did not matter", lat[0])
			}
			worst = max(worst, maxLat)
			t.Logf("%s: degraded latencies %v (max %v, PeerTimeout %v)", tg.name, lat, maxLat, failTimeout)
		})
	}
	t.Logf("slowest degraded check: %v", worst)
}

// A member with no usable address at all (grpc.NewClient refuses it) is
// never dialled; its keys degrade at once.
func TestOwnerWithoutConnection(t *testing.T) {
	clock := newFakeClock()
	a := startNode(t, "A", clock, func(c *Config) { c.PeerTimeout = failTimeout })
	a.r.SetMembers([]Member{{Name: "A", Addr: a.addr}, {Name: "N", Addr: "bad\x00addr"}})
	clock.Advance(testGrace)
	key := keysOwnedBy(t, a.r, "N", "noconn", 1)[0]
	out, el := timedCheck(t, a.r, Check{Key: key, Limit: hourly(10), Cost: 1, Mode: FailClosed})
	if r := out[0]; r.Allowed || !r.Degraded || r.Owner != "A" || el > time.Second {
		t.Fatalf("%+v after %v", r, el)
	}
}

// ---- 6. context ----------------------------------------------------------------------

// slowServer is a pair of gRPC interceptors that hold every call until its
// context ends, counting the calls they hold: a unary call at once, a Check
// stream once its first batch has arrived.
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

func (s *slowServer) intercept(ctx context.Context, req any, _ *grpc.UnaryServerInfo, _ grpc.UnaryHandler) (any, error) {
	select {
	case s.held <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

func TestCancelledCallerReturnsPromptly(t *testing.T) {
	clock := newFakeClock()
	a := startNode(t, "A", clock, func(c *Config) { c.PeerTimeout = 5 * time.Second })
	slow := &slowServer{held: make(chan struct{}, 16)}
	held := []grpc.ServerOption{grpc.UnaryInterceptor(slow.intercept), grpc.StreamInterceptor(slow.interceptStream)}
	b := startNode(t, "B", clock, nil, held...)
	c := startNode(t, "C", clock, nil, held...)
	formCluster(clock, a, b, c)
	kb := keysOwnedBy(t, a.r, "B", "slow", 1)[0]
	kc := keysOwnedBy(t, a.r, "C", "slow", 1)[0]
	ka := keysOwnedBy(t, a.r, "A", "slow", 1)[0]

	t.Run("cancel", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			<-slow.held // the owner has the call
			cancel()
		}()
		var out [1]Result
		start := time.Now()
		err := a.r.Check(ctx, []Check{{Key: kb, Limit: hourly(10), Cost: 1, Mode: FailOpen}}, out[:])
		el := time.Since(start)
		if err != ctx.Err() || !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want ctx.Err() = %v", err, ctx.Err())
		}
		if el > time.Second {
			t.Fatalf("returned %v after the call, PeerTimeout 5s", el)
		}
		t.Logf("cancelled caller returned after %v", el)
	})
	t.Run("deadline, two slow owners", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
		defer cancel()
		out := make([]Result, 3)
		start := time.Now()
		err := a.r.Check(ctx, []Check{
			{Key: kb, Limit: hourly(10), Cost: 1},
			{Key: kc, Limit: hourly(10), Cost: 1},
			{Key: ka, Limit: hourly(10), Cost: 1},
		}, out)
		el := time.Since(start)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want DeadlineExceeded", err)
		}
		if el > time.Second {
			t.Fatalf("returned after %v", el)
		}
	})
	t.Run("already cancelled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		var out [1]Result
		if err := a.r.Check(ctx, []Check{{Key: "fresh-key", Limit: hourly(10), Cost: 1}}, out[:]); err != context.Canceled {
			t.Fatalf("err = %v", err)
		}
		if a.store.Has("fresh-key") {
			t.Fatal("a cancelled call spent")
		}
	})
	for _, mode := range []string{"local", "fail_open", "fail_closed"} {
		if got := metricValue(t, a.reg, "ringlimit_degraded_checks_total", "mode", mode); got != 0 {
			t.Errorf("a cancelled caller counted as degraded (%s: %v)", mode, got)
		}
	}
}

// A stopping node asks its peers to end their Check streams to it
// (DrainPeers), so that a graceful stop of its gRPC server returns instead
// of waiting for streams that would otherwise stay open for good. After it,
// the peer's checks on the node's keys go to their failure mode.
func TestDrainEndsPeerStreams(t *testing.T) {
	clock := newFakeClock()
	nodes := startNodes(t, clock, nil, "A", "B")
	formCluster(clock, nodes...)
	a, b := nodes[0], nodes[1]
	key := keysOwnedBy(t, a.r, "B", "drain", 1)[0]
	if r := check1(t, a.r, key, hourly(10), 1); !r.Allowed || r.Owner != "B" || r.Remaining != 9 {
		t.Fatalf("first check through A: %+v, want allowed by B with 9 left", r)
	}
	stopped := make(chan struct{})
	go func() {
		b.srv.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
		t.Fatal("GracefulStop returned while A's Check stream to B was open and not drained")
	case <-time.After(300 * time.Millisecond):
	}
	start := time.Now()
	b.r.DrainPeers()
	select {
	case <-stopped:
		t.Logf("GracefulStop returned %v after DrainPeers", time.Since(start))
	case <-time.After(5 * time.Second):
		t.Fatal("GracefulStop still waiting 5s after DrainPeers")
	}
	out, el := timedCheck(t, a.r, Check{Key: key, Limit: hourly(10), Cost: 1, Mode: FailClosed})
	if r := out[0]; r.Allowed || !r.Degraded || el > time.Second {
		t.Fatalf("check through A after B stopped: %+v after %v, want a prompt fail-closed rejection", r, el)
	}
}

// An owner that takes batches on its Check stream and never answers them:
// each batch fails to its failure mode once it has waited PeerTimeout (the
// stream breaks, and the next batch opens a new one, held again).
func TestOwnerHoldsBatches(t *testing.T) {
	clock := newFakeClock()
	a := startNode(t, "A", clock, func(c *Config) { c.PeerTimeout = failTimeout })
	slow := &slowServer{held: make(chan struct{}, 16)}
	b := startNode(t, "B", clock, nil, grpc.StreamInterceptor(slow.interceptStream))
	formCluster(clock, a, b)
	keys := keysOwnedBy(t, a.r, "B", "held", 2)
	for i, key := range keys {
		out, el := timedCheck(t, a.r, Check{Key: key, Limit: hourly(10), Cost: 1, Mode: FailClosed})
		if r := out[0]; r.Allowed || !r.Degraded || r.Owner != "A" {
			t.Fatalf("check %d on a held batch: %+v, want a fail-closed rejection by A", i, r)
		}
		if el < failTimeout || el > failTimeout+time.Second {
			t.Fatalf("check %d degraded after %v, want PeerTimeout (%v) and not much more", i, el, failTimeout)
		}
	}
	if n := len(slow.held); n != 2 {
		t.Fatalf("B held %d streams, want 2 (one per check: the first broke at its deadline)", n)
	}
}

// Checks through a node whose owner is draining (stopping, still serving)
// never wait past their deadline: each batch is either answered by the
// owner or, when the owner ends the new stream before the batch is on it,
// fails to its failure mode at once. Before the fix, a batch that lost that
// race was on no stream at all, and its checks (and every later check to
// that owner) waited for their callers' deadlines. After the first 10
// checks the race is lost on purpose: a batch on a new stream waits for
// the drain to arrive first.
func TestChecksWhileOwnerDrains(t *testing.T) {
	clock := newFakeClock()
	nodes := startNodes(t, clock, nil, "A", "B")
	formCluster(clock, nodes...)
	a, b := nodes[0], nodes[1]
	keys := keysOwnedBy(t, a.r, "B", "draining", 110)
	b.r.DrainPeers() // B keeps serving, and drains every stream opened to it
	t.Cleanup(func() { testHookOpened = nil })
	var opened atomic.Int32 // streams opened once the hook is set
	failedLate := 0         // checks failed once the hook is set
	for i, key := range keys {
		if i == 10 {
			testHookOpened = func(s *stream) {
				opened.Add(1)
				broken := func() bool {
					s.mu.Lock()
					defer s.mu.Unlock()
					return s.broken
				}
				for deadline := time.Now().Add(2 * time.Second); !broken() && time.Now().Before(deadline); {
					time.Sleep(time.Millisecond)
				}
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		var out [1]Result
		err := a.r.Check(ctx, []Check{{Key: key, Limit: hourly(10), Cost: 1, Mode: FailClosed}}, out[:])
		cancel()
		switch r := out[0]; {
		case err != nil:
			t.Fatalf("check %d: %v (it waited for its deadline)", i, err)
		case r.Owner == "B" && r.Allowed && r.Remaining == 9:
		case r.Degraded && !r.Allowed:
			if i >= 10 {
				failedLate++
			}
		default:
			t.Fatalf("check %d: %+v", i, r)
		}
		if opened.Load() >= 5 {
			break
		}
	}
	// A check that finds the previous stream not yet drained is answered
	// on it; one that opens a stream fails closed.
	if n := int(opened.Load()); n < 5 || failedLate != n {
		t.Fatalf("%d checks failed closed and %d opened a stream that drained before their batch; want as many, and 5", failedLate, n)
	}
}

// An owner that drains a stream and then never answers the batch in flight
// on it: the batch keeps its deadline, and fails once it has waited
// PeerTimeout.
func TestDrainedStreamKeepsDeadline(t *testing.T) {
	clock := newFakeClock()
	a := startNode(t, "A", clock, func(c *Config) { c.PeerTimeout = failTimeout })
	hold := func(_ any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, _ grpc.StreamHandler) error {
		var req peerv1.CheckRequest
		if err := ss.RecvMsg(&req); err != nil {
			return err
		}
		if err := ss.SendMsg(&checkAnswer{owner: "B", drain: true}); err != nil {
			return err
		}
		<-ss.Context().Done()
		return ss.Context().Err()
	}
	b := startNode(t, "B", clock, nil, grpc.StreamInterceptor(hold))
	formCluster(clock, a, b)
	for i, key := range keysOwnedBy(t, a.r, "B", "drained", 2) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		var out [1]Result
		start := time.Now()
		err := a.r.Check(ctx, []Check{{Key: key, Limit: hourly(10), Cost: 1, Mode: FailClosed}}, out[:])
		el := time.Since(start)
		cancel()
		if r := out[0]; err != nil || r.Allowed || !r.Degraded || el < failTimeout || el > failTimeout+time.Second {
			t.Fatalf("check %d: %+v, err %v after %v, want a fail-closed rejection after PeerTimeout (%v)", i, r, err, el, failTimeout)
		}
	}
}

// gatedStream holds the first message of every Check stream until open is
// closed, then serves the stream as usual.
type gatedStream struct {
	grpc.ServerStream
	open  chan struct{}
	first bool
}

func (g *gatedStream) RecvMsg(m any) error {
	if !g.first {
		g.first = true
		<-g.open
	}
	return g.ServerStream.RecvMsg(m)
}

// A check whose caller gives up while it waits for the batch in flight is
// not sent: the owner spends nothing for a request that already failed.
// Before, it went out with the next batch and was charged at the owner.
func TestAbandonedCheckIsNotSent(t *testing.T) {
	clock := newFakeClock()
	a := startNode(t, "A", clock, nil)
	open := make(chan struct{})
	gate := func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		return h(srv, &gatedStream{ServerStream: ss, open: open})
	}
	b := startNode(t, "B", clock, nil, grpc.StreamInterceptor(gate))
	formCluster(clock, a, b)
	keys := keysOwnedBy(t, a.r, "B", "abandoned", 3)
	check := func(ctx context.Context, key string) (Result, error) {
		var out [1]Result
		err := a.r.Check(ctx, []Check{{Key: key, Limit: hourly(10), Cost: 1, Mode: FailClosed}}, out[:])
		return out[0], err
	}

	// The first check's batch is held by B, so it keeps A's only slot.
	first := make(chan error, 1)
	go func() {
		r, err := check(context.Background(), keys[0])
		if err == nil && (!r.Allowed || r.Owner != "B") {
			err = fmt.Errorf("first check: %+v, want admitted by B", r)
		}
		first <- err
	}()
	waitFor(t, 5*time.Second, "the first batch is sent", func() bool {
		return metricValue(t, a.reg, "ringlimit_forward_checks_total") == 1
	})
	// The second waits in the queue and its caller gives up.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	_, err := check(ctx, keys[1])
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("abandoned check: %v, want its deadline", err)
	}
	close(open)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if r, err := check(context.Background(), keys[2]); err != nil || !r.Allowed || r.Owner != "B" {
		t.Fatalf("third check: %+v %v, want admitted by B", r, err)
	}
	if got := metricValue(t, a.reg, "ringlimit_forward_abandoned_checks_total"); got != 1 {
		t.Fatalf("abandoned checks %v, want 1", got)
	}
	if got := metricValue(t, a.reg, "ringlimit_forward_checks_total"); got != 2 {
		t.Fatalf("checks sent %v, want 2", got)
	}
	if !b.store.Has(keys[0]) || b.store.Has(keys[1]) || !b.store.Has(keys[2]) {
		t.Fatalf("B holds %s %v, %s %v, %s %v; want the abandoned one alone missing",
			keys[0], b.store.Has(keys[0]), keys[1], b.store.Has(keys[1]), keys[2], b.store.Has(keys[2]))
	}
}
