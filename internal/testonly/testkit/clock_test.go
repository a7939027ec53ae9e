package testkit_test

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ringlimit/ringlimit/clock"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
)

// start is where the tests' clocks begin.
var start = clock.FromTime(time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC))

// received returns what ch holds right now, without waiting.
func received(ch <-chan time.Time) (time.Time, bool) {
	select {
	case v := <-ch:
		return v, true
	default:
		return time.Time{}, false
	}
}

// wantFired fails unless ch holds exactly one value, the instant at.
func wantFired(t *testing.T, what string, ch <-chan time.Time, at clock.Instant) {
	t.Helper()
	v, ok := received(ch)
	if !ok {
		t.Fatalf("%s did not fire; want it fired at %v", what, at.Time())
	}
	if !v.Equal(at.Time()) {
		t.Fatalf("%s fired at %v, want %v", what, v, at.Time())
	}
	if v, ok := received(ch); ok {
		t.Fatalf("%s fired again at %v", what, v)
	}
}

// wantQuiet fails if ch holds a value.
func wantQuiet(t *testing.T, what string, ch <-chan time.Time) {
	t.Helper()
	if v, ok := received(ch); ok {
		t.Fatalf("%s fired at %v, want nothing yet", what, v)
	}
}

// waitTimers blocks until c has at least n timers waiting. The deadline
// only turns a hang into a failure; the test never sleeps.
func waitTimers(t *testing.T, c *testkit.Clock, n int) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		added := c.TimerAdded() // before the count, so no addition is missed
		if c.Timers() >= n {
			return
		}
		select {
		case <-added:
		case <-deadline:
			t.Fatalf("%d timers waiting after 10s, want %d", c.Timers(), n)
		}
	}
}

func TestClockNowMovesOnlyWhenTold(t *testing.T) {
	c := testkit.NewClock(0)
	zero := clock.FromTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	steps := []struct {
		advance time.Duration
		want    clock.Instant
	}{
		{0, zero},
		{1500 * time.Millisecond, zero.Add(1500 * time.Millisecond)},
		{1, zero.Add(1500*time.Millisecond + 1)},
		{-time.Hour, zero.Add(1500*time.Millisecond + 1)}, // never backwards
		{time.Hour, zero.Add(time.Hour + 1500*time.Millisecond + 1)},
	}
	for i, s := range steps {
		c.Advance(s.advance)
		for range 2 {
			if got := c.Now(); got != s.want {
				t.Fatalf("step %d: after Advance(%v), Now() = %v want %v", i, s.advance, got.Time(), s.want.Time())
			}
		}
	}
	if got := testkit.NewClock(start).Now(); got != start {
		t.Fatalf("NewClock(%d).Now() = %d", start, got)
	}
}

func TestClockAdvanceFiresInOrder(t *testing.T) {
	// Advance sets the clock to each timer's instant as it fires it, so a
	// timer fired out of order would carry a later timer's instant.
	c := testkit.NewClock(start)
	t3 := c.NewTimer(3 * time.Second)
	t1 := c.NewTimer(1 * time.Second)
	t2 := c.NewTimer(2 * time.Second)
	t2b := c.NewTimer(2 * time.Second)
	t10 := c.NewTimer(10 * time.Second)
	if n := c.Timers(); n != 5 {
		t.Fatalf("Timers() = %d want 5", n)
	}
	c.Advance(999 * time.Millisecond)
	for _, tm := range []clock.Timer{t1, t2, t2b, t3, t10} {
		wantQuiet(t, "a timer of 1s or more", tm.C())
	}
	c.Advance(4*time.Second + time.Millisecond) // to 5s
	wantFired(t, "timer 1s", t1.C(), start.Add(time.Second))
	wantFired(t, "timer 2s", t2.C(), start.Add(2*time.Second))
	wantFired(t, "second timer 2s", t2b.C(), start.Add(2*time.Second))
	wantFired(t, "timer 3s", t3.C(), start.Add(3*time.Second))
	wantQuiet(t, "timer 10s", t10.C())
	if got := c.Now(); got != start.Add(5*time.Second) {
		t.Fatalf("Now() = %v after firing, want the end of the advance %v", got.Time(), start.Add(5*time.Second).Time())
	}
	if n := c.Timers(); n != 1 {
		t.Fatalf("Timers() = %d want 1", n)
	}
	c.Advance(5 * time.Second)
	wantFired(t, "timer 10s", t10.C(), start.Add(10*time.Second))
	if n := c.Timers(); n != 0 {
		t.Fatalf("Timers() = %d want 0", n)
	}
	if t1.Stop() {
		t.Fatal("Stop of a fired and received timer reported it active")
	}
}

func TestClockTimerStopReset(t *testing.T) {
	c := testkit.NewClock(start)

	tm := c.NewTimer(time.Second)
	if !tm.Stop() {
		t.Fatal("Stop of a waiting timer = false")
	}
	if tm.Stop() {
		t.Fatal("second Stop = true")
	}
	c.Advance(2 * time.Second) // to 2s
	wantQuiet(t, "stopped timer", tm.C())

	if tm.Reset(time.Second) {
		t.Fatal("Reset of a stopped timer = true")
	}
	c.Advance(500 * time.Millisecond) // to 2.5s
	if !tm.Reset(time.Second) {
		t.Fatal("Reset of a waiting timer = false")
	}
	c.Advance(999 * time.Millisecond) // to 3.499s: the old deadline passed
	wantQuiet(t, "reset timer", tm.C())
	c.Advance(time.Millisecond) // to 3.5s
	wantFired(t, "reset timer", tm.C(), start.Add(3500*time.Millisecond))

	// Fired but not received: Reset drains the stale value and counts the
	// timer as active, as the runtime's timers do since Go 1.23.
	tm.Reset(time.Second)
	c.Advance(time.Second) // to 4.5s
	if !tm.Reset(time.Second) {
		t.Fatal("Reset of a fired, unreceived timer = false")
	}
	wantQuiet(t, "timer just reset", tm.C())
	c.Advance(time.Second) // to 5.5s
	wantFired(t, "timer reset after firing", tm.C(), start.Add(5500*time.Millisecond))

	// The same for Stop.
	tm.Reset(time.Second)
	c.Advance(time.Second) // to 6.5s
	if !tm.Stop() {
		t.Fatal("Stop of a fired, unreceived timer = false")
	}
	wantQuiet(t, "timer stopped after firing", tm.C())

	// A timer whose time has come already fires at once.
	for _, d := range []time.Duration{0, -time.Second} {
		now := c.Now()
		tm := c.NewTimer(d)
		wantFired(t, "NewTimer("+d.String()+")", tm.C(), now)
		if n := c.Timers(); n != 0 {
			t.Fatalf("NewTimer(%v) left %d timers waiting", d, n)
		}
		if tm.Reset(d) {
			t.Fatalf("Reset(%v) of a fired and received timer = true", d)
		}
		wantFired(t, "Reset("+d.String()+")", tm.C(), now)
	}
}

func TestClockStopRacesAdvance(t *testing.T) {
	// Whether Stop runs before Advance fires the timer or after, once it
	// returns nothing is left to receive, and it reports the timer active
	// since nobody received its value.
	c := testkit.NewClock(start)
	for i := range 200 {
		tm := c.NewTimer(time.Second)
		var wg sync.WaitGroup
		wg.Go(func() { c.Advance(time.Second) })
		stopped := tm.Stop()
		wg.Wait()
		if !stopped {
			t.Fatalf("round %d: Stop = false, but nobody received the timer's value", i)
		}
		wantQuiet(t, "stopped timer", tm.C())
	}
}

func TestClockTicker(t *testing.T) {
	c := testkit.NewClock(start)
	tk := c.NewTicker(time.Second)
	c.Advance(time.Second) // to 1s
	wantFired(t, "tick 1", tk.C(), start.Add(time.Second))
	c.Advance(500 * time.Millisecond) // to 1.5s
	wantQuiet(t, "ticker between ticks", tk.C())
	c.Advance(500 * time.Millisecond) // to 2s
	wantFired(t, "tick 2", tk.C(), start.Add(2*time.Second))

	// Nobody takes the ticks of 3s, 4s and 5s: the first waits, the others
	// are dropped, and the ticker keeps its rhythm.
	c.Advance(3 * time.Second) // to 5s
	wantFired(t, "first untaken tick", tk.C(), start.Add(3*time.Second))
	if n := c.Timers(); n != 1 {
		t.Fatalf("Timers() = %d with a ticker running, want 1", n)
	}
	c.Advance(time.Second) // to 6s
	wantFired(t, "tick 6", tk.C(), start.Add(6*time.Second))

	// Reset restarts the rhythm from now, with the new interval.
	c.Advance(500 * time.Millisecond) // to 6.5s
	tk.Reset(2 * time.Second)
	c.Advance(1500 * time.Millisecond) // to 8s: the old rhythm's tick
	wantQuiet(t, "reset ticker", tk.C())
	c.Advance(500 * time.Millisecond) // to 8.5s
	wantFired(t, "tick after Reset", tk.C(), start.Add(8500*time.Millisecond))
	c.Advance(2 * time.Second) // to 10.5s
	wantFired(t, "next tick after Reset", tk.C(), start.Add(10500*time.Millisecond))

	// Stop drains a tick nobody took and stops the ticks.
	c.Advance(2 * time.Second) // to 12.5s
	tk.Stop()
	wantQuiet(t, "stopped ticker", tk.C())
	c.Advance(time.Minute)
	wantQuiet(t, "stopped ticker", tk.C())
	if n := c.Timers(); n != 0 {
		t.Fatalf("Timers() = %d after Stop, want 0", n)
	}

	for name, f := range map[string]func(){
		"NewTicker(0)": func() { c.NewTicker(0) },
		"Reset(-1s)":   func() { tk.Reset(-time.Second) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s did not panic", name)
				}
			}()
			f()
		}()
	}
}

func TestClockAfterFunc(t *testing.T) {
	// synctest.Wait lets every goroutine AfterFunc started finish, so the
	// test can say what has run, and what never will. (A callback runs in
	// its own goroutine, perhaps after Advance has moved on: when it runs
	// is told by how far the test advanced, not by Now inside it.)
	synctest.Test(t, func(t *testing.T) {
		c := testkit.NewClock(start)
		var mu sync.Mutex
		var ran []string
		record := func(name string) func() {
			return func() {
				mu.Lock()
				ran = append(ran, name)
				mu.Unlock()
			}
		}
		want := func(step string, names ...string) {
			t.Helper()
			synctest.Wait()
			mu.Lock()
			defer mu.Unlock()
			if len(ran) != len(names) {
				t.Fatalf("%s: ran %q want %q", step, ran, names)
			}
			for i := range names {
				if ran[i] != names[i] {
					t.Fatalf("%s: ran %q want %q", step, ran, names)
				}
			}
			ran = nil
		}

		a := c.AfterFunc(time.Second, record("a"))
		stopped := c.AfterFunc(time.Second, record("stopped"))
		if a.C() != nil {
			t.Fatal("an AfterFunc timer has a channel")
		}
		if !stopped.Stop() {
			t.Fatal("Stop of a waiting AfterFunc = false")
		}
		c.AfterFunc(0, record("now"))
		want("AfterFunc(0)", "now")
		c.Advance(999 * time.Millisecond)
		want("before its time")
		c.Advance(time.Millisecond)
		want("at its time", "a")
		if a.Stop() {
			t.Fatal("Stop of an AfterFunc that ran = true")
		}
		if a.Reset(2 * time.Second) {
			t.Fatal("Reset of an AfterFunc that ran = true")
		}
		c.Advance(2*time.Second - 1)
		want("before its new time")
		c.Advance(1)
		want("after Reset", "a")
		c.Advance(time.Minute)
		want("a minute later")
		if n := c.Timers(); n != 0 {
			t.Fatalf("Timers() = %d want 0", n)
		}
	})
}

func TestClockReleasesBlockedGoroutines(t *testing.T) {
	// Goroutines blocked on the fake clock's timers are released by Advance
	// alone: the test waits for them to start waiting, then for them to
	// return, and never sleeps.
	c := testkit.NewClock(start)
	const n = 10
	woke := make(chan time.Duration, n)
	for i := 1; i <= n; i++ {
		go func() {
			d := time.Duration(i) * time.Second
			if clock.Sleep(c, d, nil) {
				woke <- d
			}
		}()
	}
	waitTimers(t, c, n)
	c.Advance(n * time.Second / 2)
	for range n / 2 {
		if d := <-woke; d > n*time.Second/2 {
			t.Fatalf("a sleep of %v ended after %v", d, n*time.Second/2)
		}
	}
	c.Advance(n * time.Second / 2)
	for range n / 2 {
		if d := <-woke; d <= n*time.Second/2 {
			t.Fatalf("a sleep of %v ended twice", d)
		}
	}

	// Sleep stops its timer when done is closed first.
	done := make(chan struct{})
	full := make(chan bool)
	go func() { full <- clock.Sleep(c, time.Hour, done) }()
	waitTimers(t, c, 1)
	close(done)
	if <-full {
		t.Fatal("Sleep reported the full hour after done was closed")
	}
	if k := c.Timers(); k != 0 {
		t.Fatalf("Timers() = %d after Sleep returned, want 0", k)
	}
}
