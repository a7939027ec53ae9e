package client_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/client"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
)

// newLimiter builds a Limiter of l on cl for t.
func newLimiter(t testing.TB, cl *client.Client, l client.Limit) *client.Limiter {
	t.Helper()
	lim, err := client.NewLimiter(cl, l)
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

// lkey is the key the store holds for a Limiter's key under an algorithm,
// n per period and burst (0: n).
func lkey(key string, alg bucket.Algorithm, n int64, per time.Duration, burst int64) string {
	l := bucket.MustLimit(alg, n, per, burst)
	return bucket.InlineKey(key, &l)
}

func TestLimitValidate(t *testing.T) {
	good := []struct {
		l     client.Limit
		str   string
		burst int64
	}{
		{client.PerSecond(5), "5 per 1s", 5},
		{client.PerMinute(100).WithBurst(20), "100 per 1m0s, burst 20", 20},
		{client.PerHour(3), "3 per 1h0m0s", 3},
		{client.Per(5, 10*time.Second), "5 per 10s", 5},
		{client.PerSecond(5).WithAlgorithm(bucket.LeakyBucket).WithBurst(8), "5 per 1s, burst 8, leaky_bucket", 8},
		{client.PerMinute(7).WithAlgorithm(bucket.FixedWindow).WithBurst(3), "7 per 1m0s, burst 3, fixed_window", 7}, // windows ignore the burst
	}
	for _, g := range good {
		if err := g.l.Validate(); err != nil {
			t.Errorf("%v: %v", g.l, err)
		}
		if g.l.String() != g.str || g.l.Burst() != g.burst || g.l.IsZero() {
			t.Errorf("%v: String %q Burst %d IsZero %v, want %q %d false", g.l, g.l.String(), g.l.Burst(), g.l.IsZero(), g.str, g.burst)
		}
	}
	cl := newClient(t, client.Config{Targets: []string{testkit.DeadAddr(t)}})
	bad := []struct {
		l    client.Limit
		want string
	}{
		{client.Limit{}, "client: no limit"},
		{client.PerSecond(0), "client: limit 0 per 1s: limit: must be at least 1, got 0"},
		{client.PerMinute(-3), "limit: must be at least 1, got -3"},
		{client.Per(5, 0), "per: required: a period between 1ms and 8784h0m0s"},
		{client.Per(5, -time.Second), "per: must be between 1ms and 8784h0m0s, got -1s"},
		{client.Per(5, 1500*time.Microsecond), "per: must be a whole number of milliseconds, got 1.5ms"},
		{client.PerSecond(5).WithBurst(0), "burst: must be at least 1, got 0"},
		{client.PerSecond(5).WithBurst(1 << 31), "burst: must be at most 2147483647, got 2147483648"},
		{client.PerSecond(5).WithBurst(-2), "burst: must be at least 1, got -2"},
		{client.PerSecond(5).WithAlgorithm(bucket.Algorithm(9)), "algorithm: unknown algorithm \"algorithm(9)\""},
	}
	for _, b := range bad {
		err := b.l.Validate()
		if err == nil || !strings.Contains(err.Error(), b.want) || !strings.HasPrefix(err.Error(), "client: ") {
			t.Errorf("%v: Validate = %v, want an error containing %q", b.l, err, b.want)
		}
		if lim, err := client.NewLimiter(cl, b.l); lim != nil || err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%v: NewLimiter = %v, %v; want the error", b.l, lim, err)
		}
		if b.l.IsZero() {
			continue // the zero Limit is the policy mode of the middleware
		}
		if mw, err := client.Middleware(client.MiddlewareConfig{Client: cl, Limit: b.l}); mw != nil || err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%v: Middleware = %v; want the error", b.l, err)
		}
	}
}

// PerMinute(5): exactly 5 of 20 Allow calls on one key are true, whichever
// of the 3 nodes each one reaches, and the owner holds exactly 5 spent.
func TestLimiterAllowExactAcrossNodes(t *testing.T) {
	const goroutines, perG = 4, 5
	c := newCluster(t, 3, "")
	cl := newClient(t, client.Config{Targets: c.addrs(), Timeout: 10 * time.Second, Unbatched: true})
	lim := newLimiter(t, cl, client.PerMinute(5))
	c.rpc.reset()
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range perG {
				if lim.Allow(context.Background(), "user:42") {
					allowed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if got := allowed.Load(); got != 5 {
		t.Fatalf("%d of %d Allow true, want exactly 5", got, goroutines*perG)
	}
	if got := c.used(t, lkey("user:42", bucket.TokenBucket, 5, time.Minute, 0)); got != 5 {
		t.Fatalf("owner %s: used %d, want 5", c.owner("user:42"), got)
	}
	if got := c.rpc.calls.Load(); got != goroutines*perG {
		t.Fatalf("%d RPCs, want %d: one per Allow", got, goroutines*perG)
	}
	// Another key has its own 5.
	n := 0
	for range 20 {
		if lim.Allow(context.Background(), "user:43") {
			n++
		}
	}
	if n != 5 {
		t.Fatalf("user:43: %d of 20 Allow true, want 5", n)
	}
	// One token of 5 per minute comes back every 12 s.
	c.clock.Advance(12 * time.Second)
	if !lim.Allow(context.Background(), "user:42") || lim.Allow(context.Background(), "user:42") {
		t.Fatal("after 12 s: want exactly one more Allow true")
	}
}

func TestLimiterAllowN(t *testing.T) {
	c := newCluster(t, 3, "")
	cl := newClient(t, client.Config{Targets: c.addrs()})
	lim := newLimiter(t, cl, client.PerMinute(5))
	owner := c.owner(lkey("n", bucket.TokenBucket, 5, time.Minute, 0))
	const token = 12 * time.Second
	steps := []struct {
		n    int
		want client.Decision
	}{
		{3, client.Decision{Allowed: true, Limit: 5, Remaining: 2, ResetAfter: 3 * token, Scope: "inline", Owner: owner}},
		{3, client.Decision{Allowed: false, Limit: 5, Remaining: 2, RetryAfter: token, ResetAfter: 3 * token, Scope: "inline", Owner: owner}},
		{2, client.Decision{Allowed: true, Limit: 5, Remaining: 0, ResetAfter: 5 * token, Scope: "inline", Owner: owner}},
		{1, client.Decision{Allowed: false, Limit: 5, Remaining: 0, RetryAfter: token, ResetAfter: 5 * token, Scope: "inline", Owner: owner}},
	}
	for i, s := range steps {
		got, err := lim.AllowN(context.Background(), "n", s.n)
		if err != nil || got != s.want {
			t.Fatalf("step %d: AllowN(n=%d) = %+v, %v; want %+v", i, s.n, got, err, s.want)
		}
	}
	if got := c.used(t, lkey("n", bucket.TokenBucket, 5, time.Minute, 0)); got != 5 {
		t.Fatalf("used %d, want 5: the rejections spent nothing", got)
	}
	// n outside 1..burst is refused before any call; a bad key by the
	// cluster.
	c.rpc.reset()
	for _, n := range []int{0, -1, 6} {
		if _, err := lim.AllowN(context.Background(), "n", n); err == nil || !strings.Contains(err.Error(), "between 1 and the burst 5") {
			t.Errorf("AllowN(n=%d): %v, want the burst error", n, err)
		}
	}
	if got := c.rpc.calls.Load(); got != 0 {
		t.Fatalf("%d RPCs for bad n, want 0", got)
	}
	if _, err := lim.AllowN(context.Background(), "", 1); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("empty key: %v, want InvalidArgument", err)
	}
	if lim.Allow(context.Background(), "") {
		t.Fatal("Allow on an empty key reported true")
	}
}

// waitTimers waits until clk has n timers waiting.
func waitTimers(t *testing.T, clk *testkit.Clock, n int) {
	t.Helper()
	testkit.WaitFor(t, 10*time.Second, fmt.Sprintf("%d waiting timers", n), func() error {
		if got := clk.Timers(); got != n {
			return fmt.Errorf("%d timers", got)
		}
		return nil
	})
}

// Wait on PerSecond(2): the first two return at once; a third waits one
// token (500 ms of the clock) and not a millisecond less; a wait longer
// than the context's deadline returns at once, spending nothing.
// Concurrent waiters are admitted one per 500 ms, exactly.
func TestLimiterWait(t *testing.T) {
	c := newCluster(t, 3, "")
	// The client sleeps on a clock of its own, which the test moves with
	// the cluster's: its only timers are the waiters'.
	clk := testkit.NewClock(c.clock.Now())
	advance := func(d time.Duration) {
		c.clock.Advance(d)
		clk.Advance(d)
	}
	cl := newClient(t, client.Config{Targets: c.addrs(), Clock: clk})
	lim := newLimiter(t, cl, client.PerSecond(2))
	key := lkey("w", bucket.TokenBucket, 2, time.Second, 0)
	for i := range 2 {
		if err := lim.Wait(context.Background(), "w"); err != nil {
			t.Fatalf("Wait %d: %v", i+1, err)
		}
	}
	if clk.Timers() != 0 {
		t.Fatal("an admitted Wait started a timer")
	}

	// The next token comes in 500 ms; a deadline 100 ms away is too close.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	err := lim.Wait(ctx, "w")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "500ms would outlast the context's deadline") {
		t.Fatalf("Wait with 100ms left: %v, want the deadline error at once", err)
	}
	if got := c.used(t, key); got != 2 {
		t.Fatalf("used %d after the refused Wait, want 2", got)
	}

	done := make(chan error, 1)
	go func() { done <- lim.Wait(context.Background(), "w") }()
	waitTimers(t, clk, 1)
	advance(499 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("Wait returned %v after 499ms, want it to wait 500ms", err)
	default:
	}
	advance(time.Millisecond)
	if err := <-done; err != nil {
		t.Fatalf("Wait after 500ms: %v", err)
	}
	if got := c.used(t, key); got != 2 {
		t.Fatalf("used %d, want 2 (full at 2, refilled one, spent one)", got)
	}

	// Three waiters, no tokens: each 500 ms admits exactly one of them.
	const waiters = 3
	var admitted atomic.Int64
	errs := make(chan error, waiters)
	for range waiters {
		go func() {
			err := lim.Wait(context.Background(), "w")
			if err == nil {
				admitted.Add(1)
			}
			errs <- err
		}()
	}
	for step := 1; step <= waiters; step++ {
		waitTimers(t, clk, waiters-step+1)
		advance(500 * time.Millisecond)
		testkit.WaitFor(t, 10*time.Second, fmt.Sprintf("step %d: %d admitted", step, step), func() error {
			if got := admitted.Load(); got != int64(step) {
				return fmt.Errorf("%d admitted", got)
			}
			if got := clk.Timers(); got != waiters-step {
				return fmt.Errorf("%d waiting", got)
			}
			return nil
		})
	}
	for range waiters {
		if err := <-errs; err != nil {
			t.Fatalf("waiter: %v", err)
		}
	}

	// A cancelled context ends a Wait that sleeps.
	ctx, cancel = context.WithCancel(context.Background())
	go func() { done <- lim.Wait(ctx, "w") }()
	waitTimers(t, clk, 1)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Wait: %v, want context.Canceled", err)
	}
	// n above the burst can never be admitted: an error at once.
	if err := lim.WaitN(context.Background(), "w", 3); err == nil || !strings.Contains(err.Error(), "burst 2") {
		t.Fatalf("WaitN(3) on burst 2: %v, want the burst error", err)
	}
}

// Reserve on a leaky bucket of 5 per second (queue 5): the reservations
// hold the next five places, 200 ms apart exactly; the sixth is refused
// until the queue drains one place.
func TestLimiterReserve(t *testing.T) {
	c := newCluster(t, 3, "")
	clk := testkit.NewClock(c.clock.Now())
	cl := newClient(t, client.Config{Targets: c.addrs(), Clock: clk})
	lim := newLimiter(t, cl, client.PerSecond(5).WithAlgorithm(bucket.LeakyBucket))
	const interval = 200 * time.Millisecond
	var rs []*client.Reservation
	for i := range 5 {
		r, err := lim.Reserve(context.Background(), "r")
		if err != nil {
			t.Fatal(err)
		}
		if !r.OK() || r.Delay() != time.Duration(i)*interval || r.Decision().Delay != time.Duration(i)*interval {
			t.Fatalf("reservation %d: OK %v Delay %v, want OK and %v", i, r.OK(), r.Delay(), time.Duration(i)*interval)
		}
		rs = append(rs, r)
	}
	r, err := lim.Reserve(context.Background(), "r")
	if err != nil || r.OK() || r.Delay() != interval || r.Decision().RetryAfter != interval {
		t.Fatalf("sixth: %+v, %v; want not OK with Delay %v", r, err, interval)
	}
	// Delay counts down on the client's clock.
	clk.Advance(300 * time.Millisecond)
	for i, want := range []time.Duration{0, 0, 100 * time.Millisecond, 300 * time.Millisecond, 500 * time.Millisecond} {
		if got := rs[i].Delay(); got != want {
			t.Errorf("after 300ms: reservation %d Delay %v, want %v", i, got, want)
		}
	}
	// One place drains every 200 ms of the cluster's clock.
	c.clock.Advance(interval)
	r, err = lim.Reserve(context.Background(), "r")
	if err != nil || !r.OK() || r.Decision().Delay != 4*interval {
		t.Fatalf("after one place drained: %+v, %v; want OK with delay %v", r, err, 4*interval)
	}
	// ReserveN of 2 takes two places: the next reservation comes two later.
	c.clock.Advance(3 * interval)
	r2, err := lim.ReserveN(context.Background(), "r", 2)
	if err != nil || !r2.OK() || r2.Decision().Delay != 2*interval {
		t.Fatalf("ReserveN(2): %+v, %v; want OK with delay %v", r2, err, 2*interval)
	}
	r3, err := lim.Reserve(context.Background(), "r")
	if err != nil || !r3.OK() || r3.Decision().Delay != 4*interval {
		t.Fatalf("after ReserveN(2): %+v, %v; want OK with delay %v", r3, err, 4*interval)
	}

	// A token bucket does not queue: OK with no delay while tokens last,
	// then not OK with the time to the next token.
	tb := newLimiter(t, cl, client.PerSecond(5))
	for i := range 5 {
		if r, err := tb.Reserve(context.Background(), "t"); err != nil || !r.OK() || r.Delay() != 0 {
			t.Fatalf("token reservation %d: %+v, %v; want OK now", i, r, err)
		}
	}
	if r, err := tb.Reserve(context.Background(), "t"); err != nil || r.OK() || r.Delay() != interval {
		t.Fatalf("sixth token reservation: %+v, %v; want not OK, Delay %v", r, err, interval)
	}
}

// Wait on a leaky bucket sleeps the place's delay.
func TestLimiterWaitLeaky(t *testing.T) {
	c := newCluster(t, 1, "")
	clk := testkit.NewClock(c.clock.Now())
	cl := newClient(t, client.Config{Targets: c.addrs(), Clock: clk})
	lim := newLimiter(t, cl, client.PerSecond(5).WithAlgorithm(bucket.LeakyBucket))
	if err := lim.Wait(context.Background(), "lw"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- lim.Wait(context.Background(), "lw") }()
	waitTimers(t, clk, 1)
	clk.Advance(199 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("Wait returned %v after 199ms, want 200ms", err)
	default:
	}
	clk.Advance(time.Millisecond)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// A place further away than the deadline: an error at once.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := lim.Wait(ctx, "lw"); !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "400ms") {
		t.Fatalf("Wait with 100ms left for a place 400ms away: %v", err)
	}
}

// Each of the five algorithms reaches the cluster as named: PerMinute(3)
// admits exactly 3 of 5, in the bucket of that algorithm.
func TestLimiterAlgorithms(t *testing.T) {
	c := newCluster(t, 3, "")
	cl := newClient(t, client.Config{Targets: c.addrs()})
	for _, alg := range []bucket.Algorithm{bucket.TokenBucket, bucket.LeakyBucket, bucket.FixedWindow, bucket.SlidingWindowLog, bucket.SlidingWindowCounter} {
		lim := newLimiter(t, cl, client.PerMinute(3).WithAlgorithm(alg))
		key := "alg:" + alg.String()
		n := 0
		for range 5 {
			if lim.Allow(context.Background(), key) {
				n++
			}
		}
		if n != 3 {
			t.Errorf("%v: %d of 5 allowed, want 3", alg, n)
		}
		if got := c.used(t, lkey(key, alg, 3, time.Minute, 0)); got != 3 {
			t.Errorf("%v: used %d in the %v bucket, want 3", alg, got, alg)
		}
	}
}
