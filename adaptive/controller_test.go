package adaptive

import (
	"math"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/clock"
)

const sec = clock.Instant(time.Second)

func TestFallback(t *testing.T) {
	spec := Spec{Algorithm: AIMD, Min: 2, Max: 50, Initial: 20, Fallback: 8, FallbackAfter: 5 * time.Second}
	c := New(spec, 0)
	healthy := win{n: 10, maxIn: 50}
	for k := range 3 {
		feed(c, k, healthy)
	}
	if c.Limit() != 23 {
		t.Fatalf("Limit() = %d, want 23", c.Limit())
	}
	// The last sample came at 2.001s: the fallback applies from 7.001s.
	for _, s := range []struct {
		at      clock.Instant
		limit   int64
		changed bool
		dir     int
	}{
		{4 * sec, 23, false, 0},
		{7 * sec, 23, false, 0},
		{7*sec + clock.Instant(time.Millisecond), 8, true, -1},
		{8 * sec, 8, false, 0},
		{60 * sec, 8, false, 0},
	} {
		changed, dir := c.Tick(s.at)
		if c.Limit() != s.limit || changed != s.changed || dir != s.dir {
			t.Errorf("Tick(%v) = (%v, %d), Limit() %d; want (%v, %d), %d", s.at.Sub(0), changed, dir, c.Limit(), s.changed, s.dir, s.limit)
		}
	}
	// Samples come back: the limit moves from the fallback.
	c.Observe(Sample{Outcome: OK, InFlight: 8}, 60*sec+1)
	for range 9 {
		c.Observe(Sample{Outcome: OK, InFlight: 1}, 60*sec+2)
	}
	if changed, dir := c.Tick(61 * sec); !changed || dir != 1 || c.Limit() != 9 {
		t.Fatalf("first window back: (%v, %d), Limit() %d; want (true, 1), 9", changed, dir, c.Limit())
	}
	if changed, _ := c.Tick(65 * sec); changed || c.Limit() != 9 {
		t.Fatalf("4s after a sample: Limit() %d, want 9 (fallback only after 5s)", c.Limit())
	}
	if changed, dir := c.Tick(66 * sec); !changed || dir != -1 || c.Limit() != 8 {
		t.Fatalf("5s after a sample: (%v, %d), Limit() %d; want (true, -1), 8", changed, dir, c.Limit())
	}
}

func TestNoFallbackHolds(t *testing.T) {
	c := New(Spec{Algorithm: Gradient2, Min: 2, Max: 50, Initial: 20}, 0)
	for k := range 3 {
		feed(c, k, win{n: 10, lat: time.Millisecond, maxIn: 50})
	}
	want := c.Limit()
	for s := 4; s < 1000; s++ {
		if changed, _ := c.Tick(clock.Instant(s) * sec); changed {
			t.Fatalf("Tick(%ds) moved the limit with no samples", s)
		}
	}
	if c.Limit() != want || want != 22 {
		t.Fatalf("Limit() = %d, want %d = 22", c.Limit(), want)
	}
}

func TestTickWindows(t *testing.T) {
	c := New(Spec{Algorithm: AIMD, Min: 1, Max: 100, Initial: 10, MinSamples: 1}, 0)
	ok := Sample{Outcome: OK, InFlight: 10}
	c.Observe(ok, sec/2)
	if changed, _ := c.Tick(sec - 1); changed || c.Limit() != 10 {
		t.Fatalf("before the window's end: Limit() %d, want 10", c.Limit())
	}
	// Five windows late: the one with the sample closes, the empty ones
	// pass, and the next begins at 5s.
	if changed, dir := c.Tick(5*sec + sec/2); !changed || dir != 1 || c.Limit() != 11 {
		t.Fatalf("late tick: (%v, %d) Limit() %d; want (true, 1), 11", changed, dir, c.Limit())
	}
	c.Observe(ok, 5*sec+sec*6/10)
	c.Tick(3 * sec) // backwards: closes nothing
	if changed, _ := c.Tick(6*sec - 1); changed || c.Limit() != 11 {
		t.Fatalf("within the window from 5s: Limit() %d, want 11", c.Limit())
	}
	if changed, dir := c.Tick(6 * sec); !changed || dir != 1 || c.Limit() != 12 {
		t.Fatalf("at 6s: (%v, %d) Limit() %d; want (true, 1), 12", changed, dir, c.Limit())
	}
	// Dropped outcomes and unknown ones are not samples.
	c.Observe(Sample{Outcome: Dropped, InFlight: 100}, 6*sec+1)
	c.Observe(Sample{Outcome: Outcome(9), InFlight: 100}, 6*sec+1)
	if changed, _ := c.Tick(7 * sec); changed || c.Limit() != 12 {
		t.Fatalf("dropped only: Limit() %d, want 12", c.Limit())
	}
}

// lockstep feeds a and b the same samples and ticks for windows [from,
// to) and fails on the first difference.
// At window resumeAt, after six of its samples, b is replaced by what
// resume returns.
func lockstep(t *testing.T, a, b *Controller, from, to int, resumeAt int, resume func(*Controller) *Controller) *Controller {
	t.Helper()
	moves := map[int]int{}
	for k := from; k < to; k++ {
		start := clock.Instant(k) * sec
		for i := range 12 {
			if k == resumeAt && i == 6 {
				b = resume(b)
			}
			in := min(a.Limit(), int64(10+(k*11+i)%40))
			s := Sample{Outcome: OK, Latency: time.Duration(10+in*(3+int64(i%3))) * time.Millisecond, InFlight: in}
			if k%13 >= 10 {
				s.Latency *= 4 // a slow spell
			}
			if (k+i)%9 == 0 {
				s.Outcome = Error
			}
			if k%17 == 5 && i > 2 {
				continue // a thin window
			}
			at := start.Add(time.Duration(i) * 50 * time.Millisecond)
			a.Observe(s, at)
			b.Observe(s, at)
		}
		ca, da := a.Tick(start + sec)
		cb, db := b.Tick(start + sec)
		if a.Limit() != b.Limit() || ca != cb || da != db || a.State() != b.State() {
			t.Fatalf("window %d: Limit %d vs %d, Tick (%v, %d) vs (%v, %d)", k, a.Limit(), b.Limit(), ca, da, cb, db)
		}
		if k >= resumeAt {
			moves[da]++
		}
	}
	if moves[1] == 0 || moves[-1] == 0 {
		t.Fatalf("after the resume the limit moved up %d and down %d times; the run proves little", moves[1], moves[-1])
	}
	t.Logf("after the resume: %d windows up, %d down, %d held; limit %d", moves[1], moves[-1], moves[0], a.Limit())
	return b
}

func TestResumeContinues(t *testing.T) {
	for _, spec := range []Spec{
		{Algorithm: AIMD, Min: 2, Max: 200, Initial: 30, LatencyThreshold: 120 * time.Millisecond, Fallback: 7},
		{Algorithm: Gradient2, Min: 2, Max: 200, Initial: 30, LongWindow: 20, Fallback: 7},
	} {
		t.Run(spec.Algorithm.String(), func(t *testing.T) {
			orig := New(spec, 0)
			// Halfway through window 40, after six of its samples, the
			// twin is replaced by a controller resumed from its State.
			resumed := false
			twin := lockstep(t, orig, New(spec, 0), 0, 80, 40, func(b *Controller) *Controller {
				r := Resume(spec, b.State(), 40*sec+sec/2)
				if r.Limit() != orig.Limit() {
					t.Fatalf("resumed Limit() = %d, want %d", r.Limit(), orig.Limit())
				}
				resumed = true
				return r
			})
			if !resumed {
				t.Fatal("never resumed")
			}
			moved := orig.Limit() != spec.Initial
			// A silent spell: both fall back together.
			ca, da := orig.Tick(200 * sec)
			cb, db := twin.Tick(200 * sec)
			if !moved || ca != cb || da != db || orig.Limit() != 7 || twin.Limit() != 7 {
				t.Fatalf("fallback: (%v, %d) vs (%v, %d), limits %d and %d; want 7 (moved %v)", ca, da, cb, db, orig.Limit(), twin.Limit(), moved)
			}
		})
	}
}

func TestResumeDistrustsState(t *testing.T) {
	spec := Spec{Algorithm: Gradient2, Min: 3, Max: 30, Initial: 10}
	for _, st := range []State{
		{Limit: math.NaN(), LongRTT: math.Inf(1), Samples: 5, LatencySum: math.NaN()},
		{Limit: 1e300, LongRTT: -5, LongCount: -3, Samples: -1, Errors: 99, MaxInFlight: -7},
		{Limit: -4, LongSum: math.Inf(-1), WindowStart: 1 << 62, LastSample: 1 << 62, Samples: 3, Errors: 9, LatencySum: 1},
	} {
		c := Resume(spec, st, 100*sec)
		if l := c.Limit(); l < 3 || l > 30 {
			t.Fatalf("Resume(%+v): Limit() = %d, outside [3, 30]", st, l)
		}
		got := c.State()
		if got.WindowStart > 100*sec || got.LastSample > 100*sec || got.Errors > got.Samples || got.Samples < 0 ||
			math.IsNaN(got.Limit) || math.IsNaN(got.LongRTT) || got.LongRTT < 0 {
			t.Fatalf("Resume(%+v) kept %+v", st, got)
		}
		for k := range 20 {
			c.Observe(Sample{Outcome: OK, Latency: time.Millisecond, InFlight: 30}, 100*sec+clock.Instant(k))
			c.Tick(100*sec + clock.Instant(k)*sec)
		}
		if l := c.Limit(); l < 3 || l > 30 {
			t.Fatalf("after Resume(%+v): Limit() = %d, outside [3, 30]", st, l)
		}
	}
}
