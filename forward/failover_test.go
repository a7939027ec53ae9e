package forward

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
	peerv1 "github.com/ringlimit/ringlimit/proto/peerv1"
)

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
		{"refused", func(t *testing.T) Member { return Member{Name: "Y", Addr: testkit.DeadAddr(t)} }},
		{"blackhole", func(t *testing.T) Member { return Member{Name: "X", Addr: testkit.Blackhole(t)} }},
	}
	var worst time.Duration
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			clock := testkit.NewClock(0)
			// The deadline is the point: A's transport runs on real time.
			// Without replication nobody stands in for the owner: the
			// failure modes decide.
			a := startNode(t, "A", clock, func(c *nodeConfig) {
				c.PeerTimeout = failTimeout
				c.Replication.Off = true
				realTransport(c)
			})
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
			out, el := timedCheck(t, a.r, Check{Key: keys[0], Limit: hourly(10), Cost: 1, Mode: bucket.FailOpen})
			lat = append(lat, el)
			if r := out[0]; !r.Allowed || !r.Degraded || r.Owner != "A" || r.Limit != 10 {
				t.Fatalf("fail_open: %+v", r)
			}
			// FailClosed: rejected, retry after 1s.
			out, el = timedCheck(t, a.r, Check{Key: keys[1], Limit: hourly(10), Cost: 1, Mode: bucket.FailClosed})
			lat = append(lat, el)
			if r := out[0]; r.Allowed || !r.Degraded || r.Owner != "A" || r.RetryAfter != time.Second || r.Limit != 10 {
				t.Fatalf("fail_closed: %+v", r)
			}
			// Local: 9 per hour over 3 members = 3 per hour, burst 3.
			var allowed int
			for i := range 5 {
				out, el = timedCheck(t, a.r, Check{Key: keys[2], Limit: hourly(9), Cost: 1, Mode: bucket.Local})
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
			// Rounded down, so that the shares never add up to more than the
			// limit: 2 per hour over 3 members is 0 (refused); burst 6 of a
			// 9/h limit is 2.
			out, el = timedCheck(t, a.r,
				Check{Key: keys[3], Limit: hourly(2), Cost: 1, Mode: bucket.Local},
				Check{Key: keys[3], Limit: hourly(2), Cost: 1, Mode: bucket.Local},
				Check{Key: keys[4], Limit: bucket.MustLimit(bucket.TokenBucket, 9, time.Hour, 6), Cost: 1, Mode: bucket.Local},
				Check{Key: keys[4], Limit: bucket.MustLimit(bucket.TokenBucket, 9, time.Hour, 6), Cost: 1, Mode: bucket.Local},
				Check{Key: keys[4], Limit: bucket.MustLimit(bucket.TokenBucket, 9, time.Hour, 6), Cost: 1, Mode: bucket.Local},
			)
			lat = append(lat, el)
			wantAllowed := []bool{false, false, true, true, false}
			for i, r := range out {
				if r.Allowed != wantAllowed[i] || !r.Degraded || r.Owner != "A" {
					t.Fatalf("rounded-down batch: out[%d] = %+v, want allowed=%v", i, r, wantAllowed[i])
				}
			}
			if r := out[1]; r.RetryAfter != time.Hour || r.Limit != 2 {
				t.Fatalf("a share of 0 rejected: %+v, want retry after 1h", r)
			}

			for _, mode := range []struct {
				name string
				want float64
			}{{"fail_open", 1}, {"fail_closed", 1}, {"local", 5 + 5}} {
				if got := testkit.Metric(t, a.reg, "ringlimit_degraded_checks_total", "mode", mode.name); got != mode.want {
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
	clock := testkit.NewClock(0)
	a := startNode(t, "A", clock, func(c *nodeConfig) { c.PeerTimeout = failTimeout; c.Replication.Off = true })
	a.r.SetMembers([]Member{{Name: "A", Addr: a.addr}, {Name: "N", Addr: "bad\x00addr"}})
	clock.Advance(testGrace)
	key := keysOwnedBy(t, a.r, "N", "noconn", 1)[0]
	out, el := timedCheck(t, a.r, Check{Key: key, Limit: hourly(10), Cost: 1, Mode: bucket.FailClosed})
	if r := out[0]; r.Allowed || !r.Degraded || r.Owner != "A" || el > time.Second {
		t.Fatalf("%+v after %v", r, el)
	}
}

// ---- 6. context ----------------------------------------------------------------------

func TestCancelledCallerReturnsPromptly(t *testing.T) {
	clock := testkit.NewClock(0)
	a := startNode(t, "A", clock, func(c *nodeConfig) { c.PeerTimeout = 5 * time.Second })
	slow := testkit.NewSlowServer(func() any { return new(peerv1.CheckRequest) })
	held := slow.ServerOptions()
	b := startNode(t, "B", clock, nil, held...)
	c := startNode(t, "C", clock, nil, held...)
	formCluster(clock, a, b, c)
	kb := keysOwnedBy(t, a.r, "B", "slow", 1)[0]
	kc := keysOwnedBy(t, a.r, "C", "slow", 1)[0]
	ka := keysOwnedBy(t, a.r, "A", "slow", 1)[0]

	t.Run("cancel", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			<-slow.Held // the owner has the call
			cancel()
		}()
		var out [1]Result
		start := time.Now()
		err := a.r.Check(ctx, []Check{{Key: kb, Limit: hourly(10), Cost: 1, Mode: bucket.FailOpen}}, out[:])
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
		if got := testkit.Metric(t, a.reg, "ringlimit_degraded_checks_total", "mode", mode); got != 0 {
			t.Errorf("a cancelled caller counted as degraded (%s: %v)", mode, got)
		}
	}
}

// A check that reaches a joining node before its first member list waits
// for the list and is decided by the key's owner, not in its failure mode:
// the local share a joining node hands out would admit on a key its owner
// has exhausted (TestRingJoinExact, through a ring-aware client that
// reached the new member before it had a ring).
func TestJoiningNodeWaitsForMembers(t *testing.T) {
	clock := testkit.NewClock(0)
	a := startNode(t, "A", clock, func(c *nodeConfig) { c.Joining = true })
	base := clock.Timers()
	out := make([]Result, 1)
	done := make(chan error, 1)
	go func() {
		done <- a.r.Check(context.Background(), []Check{{Key: "k", Limit: hourly(12), Cost: 1, Mode: bucket.Local}}, out)
	}()
	if !testkit.Poll(10*time.Second, func() bool { return clock.Timers() > base }) {
		t.Fatal("the check did not wait for the member list")
	}
	a.r.SetMembers(membersOf(a))
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the check was not answered once the member list came")
	}
	if r := out[0]; !r.Allowed || r.Degraded || r.Owner != "A" || r.Remaining != 11 {
		t.Fatalf("%+v, want allowed by A with 11 left, not degraded", r)
	}
	if got := testkit.Metric(t, a.reg, "ringlimit_degraded_checks_total", "mode", "local"); got != 0 {
		t.Fatalf("%v checks degraded, want 0", got)
	}
}

// checkWhileJoining runs a.r.Check on a node that has no member list yet:
// the check waits half the peer deadline for one (entryView), so the fake
// clock is moved on until it is answered.
func checkWhileJoining(t *testing.T, a *node, clock *testkit.Clock, checks []Check, out []Result) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- a.r.Check(context.Background(), checks, out) }()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-done:
			return err
		case <-clock.TimerAdded():
		case <-time.After(time.Millisecond):
		}
		clock.Advance(a.r.cfg.PeerTimeout / 2)
	}
	t.Fatal("a check on a joining node was not answered within 10s")
	return nil
}

// A node that joins a cluster knows no owner until it is given the members:
// a check waits half the peer deadline for them, then is answered in its
// failure mode, the local one with its share of the limit; the node owns
// keys only from its first member list on.
func TestJoiningNodeAnswersInFailureMode(t *testing.T) {
	for _, tc := range []struct {
		size      int
		localLeft int64 // what a local bucket of 12 has left after one check
	}{
		{size: 0, localLeft: 5}, // half of 12: at least one other member
		{size: 3, localLeft: 3}, // a third of 12
		{size: 4, localLeft: 2}, // a quarter of 12
	} {
		t.Run(fmt.Sprint("cluster size ", tc.size), func(t *testing.T) {
			clock := testkit.NewClock(0)
			a := startNode(t, "A", clock, func(c *nodeConfig) { c.Joining, c.ClusterSize = true, tc.size })
			if st := a.r.Status(); !st.Minority || st.ClusterSize != tc.size {
				t.Errorf("Status before the first member list: %+v, want Minority, ClusterSize %d", st, tc.size)
			}
			if got := testkit.Metric(t, a.reg, "ringlimit_minority"); got != 1 {
				t.Errorf("ringlimit_minority = %v, want 1", got)
			}
			l := hourly(12)
			checks := []Check{
				{Key: "open", Limit: l, Cost: 1, Mode: bucket.FailOpen},
				{Key: "closed", Limit: l, Cost: 1, Mode: bucket.FailClosed},
				{Key: "local", Limit: l, Cost: 1, Mode: bucket.Local},
			}
			out := make([]Result, len(checks))
			if err := checkWhileJoining(t, a, clock, checks, out); err != nil {
				t.Fatal(err)
			}
			if r := out[0]; !r.Allowed || !r.Degraded {
				t.Errorf("fail_open: %+v, want allowed and degraded", r)
			}
			if r := out[1]; r.Allowed || !r.Degraded || r.RetryAfter != time.Second {
				t.Errorf("fail_closed: %+v, want refused and degraded, retry after 1s", r)
			}
			if r := out[2]; !r.Allowed || !r.Degraded || r.Remaining != tc.localLeft {
				t.Errorf("local: %+v, want allowed and degraded with %d left", r, tc.localLeft)
			}
			if n := a.store.Len(); n != 0 {
				t.Errorf("the authoritative store holds %d keys, want 0: nothing was decided as owner", n)
			}
			// Its first member list (here itself alone, as a cluster whose
			// seeds are all this node) makes it the owner of every key,
			// unless ClusterSize still puts one member in a minority.
			a.r.SetMembers(membersOf(a))
			res := check1(t, a.r, "fresh", l, 1)
			switch {
			case tc.size == 0 && (!res.Allowed || res.Degraded || res.Owner != "A" || res.Remaining != 11):
				t.Errorf("after SetMembers: %+v, want allowed by A with 11 left", res)
			case tc.size > 0 && (!res.Degraded || res.Remaining != tc.localLeft):
				t.Errorf("after SetMembers, 1 of %d members up: %+v, want degraded with %d left", tc.size, res, tc.localLeft)
			}
		})
	}
}
