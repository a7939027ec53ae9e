package bucket

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/clock"
)

// step is one check in a table: at is the time since the table's base, and
// the rest is the decision it must get.
type step struct {
	at        time.Duration
	cost      int64
	allowed   bool
	remaining int64
	retry     time.Duration
	reset     time.Duration
	delay     time.Duration
}

// runSteps applies steps to b, starting at base, and fails on the first
// field that differs.
func runSteps(t *testing.T, b Bucket, base clock.Instant, steps []step) {
	t.Helper()
	for i, s := range steps {
		d, err := b.TakeAt(base.Add(s.at), s.cost)
		if err != nil {
			t.Fatalf("step %d: TakeAt(%v, %d): %v", i, s.at, s.cost, err)
		}
		want := Decision{Allowed: s.allowed, Limit: b.Limit().Count(), Remaining: s.remaining,
			RetryAfter: s.retry, ResetAfter: s.reset, Delay: s.delay}
		if d != want {
			t.Fatalf("step %d: TakeAt(%v, %d) = %+v want %+v", i, s.at, s.cost, d, want)
		}
	}
}

// repeat returns n copies of s, the k-th (0-based) with remaining
// s.remaining-k*s.cost and delay s.delay+k*delayStep.
func repeat(n int, s step, delayStep time.Duration) []step {
	out := make([]step, n)
	for k := range out {
		out[k] = s
		out[k].remaining = s.remaining - int64(k)*s.cost
		out[k].delay = s.delay + time.Duration(k)*delayStep
	}
	return out
}

func join(parts ...[]step) []step {
	var out []step
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// t1004 is 10:04:00 UTC on a day; windows of a minute start on it.
var t1004 = clock.FromTime(time.Date(2026, 11, 29, 10, 4, 0, 0, time.UTC))

func TestTokenWorkedMinute(t *testing.T) {
	// Capacity 20, rate 10/s: a batch of 20 goes through, the next one 50 ms
	// later finds 0.5 tokens and waits 50 ms, three quiet seconds fill it up.
	b := New(MustLimit(TokenBucket, 10, time.Second, 20))
	runSteps(t, b, t1004, join(
		[]step{{at: 0, cost: 1, allowed: true, remaining: 19, reset: 100 * time.Millisecond}},
		[]step{{at: 0, cost: 1, allowed: true, remaining: 18, reset: 200 * time.Millisecond}},
		[]step{{at: 0, cost: 18, allowed: true, remaining: 0, reset: 2 * time.Second}},
		[]step{{at: 50 * time.Millisecond, cost: 1, remaining: 0, retry: 50 * time.Millisecond, reset: 1950 * time.Millisecond}},
		[]step{{at: 99 * time.Millisecond, cost: 1, remaining: 0, retry: 1 * time.Millisecond, reset: 1901 * time.Millisecond}},
		[]step{{at: 100 * time.Millisecond, cost: 1, allowed: true, remaining: 0, reset: 2 * time.Second}},
		[]step{{at: 3100 * time.Millisecond, cost: 1, allowed: true, remaining: 19, reset: 100 * time.Millisecond}},
	))
	// After three quiet seconds the bucket holds 20 again: 20 more go through.
	b = New(MustLimit(TokenBucket, 10, time.Second, 20))
	for i := range 20 {
		if d, _ := b.TakeAt(t1004, 1); !d.Allowed {
			t.Fatalf("burst check %d rejected", i)
		}
	}
	steps := repeat(20, step{at: 3 * time.Second, cost: 1, allowed: true, remaining: 19}, 0)
	for k := range steps {
		steps[k].reset = time.Duration(k+1) * 100 * time.Millisecond
	}
	steps = append(steps, step{at: 3 * time.Second, cost: 1, remaining: 0, retry: 100 * time.Millisecond, reset: 2 * time.Second})
	runSteps(t, b, t1004, steps)
}

func TestTokenRetryAfterIsExact(t *testing.T) {
	// 0.4 tokens at 10/s for a cost of 1: retry in 60 ms, not 59.
	b := New(MustLimit(TokenBucket, 10, time.Second, 1))
	runSteps(t, b, 0, []step{
		{at: 0, cost: 1, allowed: true, remaining: 0, reset: 100 * time.Millisecond},
		{at: 40 * time.Millisecond, cost: 1, retry: 60 * time.Millisecond, reset: 60 * time.Millisecond},
		{at: 99 * time.Millisecond, cost: 1, retry: 1 * time.Millisecond, reset: 1 * time.Millisecond},
		{at: 100 * time.Millisecond, cost: 1, allowed: true, remaining: 0, reset: 100 * time.Millisecond},
		// A third of a token at 3/s still rounds the wait up: 1/3 s = 333.33 ms → 334 ms.
	})
	b = New(MustLimit(TokenBucket, 3, time.Second, 1))
	runSteps(t, b, 0, []step{
		{at: 0, cost: 1, allowed: true, reset: 334 * time.Millisecond},
		{at: 0, cost: 1, retry: 334 * time.Millisecond, reset: 334 * time.Millisecond},
		{at: 333 * time.Millisecond, cost: 1, retry: 1 * time.Millisecond, reset: 1 * time.Millisecond},
		{at: 334 * time.Millisecond, cost: 1, allowed: true, reset: 334 * time.Millisecond},
	})
}

func TestTokenCostAndBackwardsTime(t *testing.T) {
	b := New(MustLimit(TokenBucket, 10, time.Second, 50))
	runSteps(t, b, clock.Instant(0).Add(time.Hour), []step{
		{at: 0, cost: 10, allowed: true, remaining: 40, reset: time.Second},
		{at: 0, cost: 50, remaining: 40, retry: time.Second, reset: time.Second},
		// Time going backwards is no time at all: nothing removed, nothing granted.
		{at: -time.Minute, cost: 40, allowed: true, remaining: 0, reset: 5 * time.Second},
		{at: -time.Minute, cost: 1, retry: 100 * time.Millisecond, reset: 5 * time.Second},
		{at: 100 * time.Millisecond, cost: 1, allowed: true, remaining: 0, reset: 5 * time.Second},
		// An idle hour refills to capacity, not beyond.
		{at: time.Hour, cost: 1, allowed: true, remaining: 49, reset: 100 * time.Millisecond},
	})
}

func TestLeakyShapes(t *testing.T) {
	// 10/s with a queue of 5: five admitted at once with delays 0..400 ms,
	// the sixth does not fit and waits for one slot to drain.
	b := New(MustLimit(LeakyBucket, 10, time.Second, 5))
	steps := repeat(5, step{at: 0, cost: 1, allowed: true, remaining: 4}, 100*time.Millisecond)
	for k := range steps {
		steps[k].reset = time.Duration(k+1) * 100 * time.Millisecond
	}
	runSteps(t, b, 0, join(steps, []step{
		{at: 0, cost: 1, remaining: 0, retry: 100 * time.Millisecond, reset: 500 * time.Millisecond},
		{at: 99 * time.Millisecond, cost: 1, remaining: 0, retry: 1 * time.Millisecond, reset: 401 * time.Millisecond},
		{at: 100 * time.Millisecond, cost: 1, allowed: true, remaining: 0, delay: 400 * time.Millisecond, reset: 500 * time.Millisecond},
		// At 250 ms 3.5 are queued: a cost of 2 does not fit, a cost of 1 does.
		{at: 250 * time.Millisecond, cost: 2, remaining: 1, retry: 50 * time.Millisecond, reset: 350 * time.Millisecond},
		{at: 250 * time.Millisecond, cost: 1, allowed: true, remaining: 0, delay: 350 * time.Millisecond, reset: 450 * time.Millisecond},
		{at: 10 * time.Second, cost: 5, allowed: true, remaining: 0, reset: 500 * time.Millisecond},
	}))
}

func TestFixedWindow(t *testing.T) {
	b := New(MustLimit(FixedWindow, 3, time.Second, 0))
	runSteps(t, b, 0, []step{
		{at: 200 * time.Millisecond, cost: 2, allowed: true, remaining: 1, reset: 800 * time.Millisecond},
		{at: 300 * time.Millisecond, cost: 2, remaining: 1, retry: 700 * time.Millisecond, reset: 700 * time.Millisecond},
		{at: 999 * time.Millisecond, cost: 1, allowed: true, remaining: 0, reset: time.Millisecond},
		{at: 999 * time.Millisecond, cost: 1, remaining: 0, retry: time.Millisecond, reset: time.Millisecond},
		{at: 1000 * time.Millisecond, cost: 3, allowed: true, remaining: 0, reset: time.Second},
		{at: 5 * time.Second, cost: 1, allowed: true, remaining: 2, reset: time.Second},
	})
}

func TestSlidingLog(t *testing.T) {
	b := New(MustLimit(SlidingWindowLog, 3, time.Second, 0))
	runSteps(t, b, 0, []step{
		{at: 100 * time.Millisecond, cost: 1, allowed: true, remaining: 2, reset: time.Second},
		{at: 600 * time.Millisecond, cost: 2, allowed: true, remaining: 0, reset: time.Second},
		// The oldest entry (100 ms) expires at 1100 ms.
		{at: 700 * time.Millisecond, cost: 1, remaining: 0, retry: 400 * time.Millisecond, reset: 900 * time.Millisecond},
		// A cost of 2 needs the two oldest gone: the 600 ms pair at 1600 ms.
		{at: 1100 * time.Millisecond, cost: 2, remaining: 1, retry: 500 * time.Millisecond, reset: 500 * time.Millisecond},
		{at: 1100 * time.Millisecond, cost: 1, allowed: true, remaining: 0, reset: time.Second},
		{at: 1600 * time.Millisecond, cost: 2, allowed: true, remaining: 0, reset: time.Second},
	})
}

func TestSlidingCounterEstimate(t *testing.T) {
	// 100 per minute. The 10:04 window ended with 90; at 10:05:15, 20 have
	// come in the new window: estimate 20 + 90 × 0.75 = 87.5, allowed.
	lim := MustLimit(SlidingWindowCounter, 100, time.Minute, 0)
	b := New(lim)
	for i := range 90 {
		if d, _ := b.TakeAt(t1004.Add(10*time.Second), 1); !d.Allowed {
			t.Fatalf("check %d in the 10:04 window rejected", i)
		}
	}
	at := time.Minute + 15*time.Second
	for i := range 20 {
		if d, _ := b.TakeAt(t1004.Add(at), 1); !d.Allowed {
			t.Fatalf("check %d in the 10:05 window rejected: %+v", i, d)
		}
	}
	// 87.5 used: remaining counts the partial previous request as used.
	steps := repeat(12, step{at: at, cost: 1, allowed: true, remaining: 100 - 21 - 68}, 0)
	for k := range steps {
		steps[k].reset = 105 * time.Second
	}
	// curr 32: 32 + 67.5 + 1 > 100. prev×(60 s − e) ≤ 67×60 s holds from
	// e = 15.333… s on, so the wait is 333.33… ms, rounded up.
	steps = append(steps, step{at: at, cost: 1, remaining: 0, retry: 334 * time.Millisecond, reset: 105 * time.Second})
	steps = append(steps, step{at: at + 334*time.Millisecond, cost: 1, allowed: true, remaining: 0, reset: 105*time.Second - 334*time.Millisecond})
	runSteps(t, b, t1004, steps)
}

func TestSlidingCounterUndercountsEndOfWindowBurst(t *testing.T) {
	// All 90 of the previous window arrive at 10:04:59, then 20 at 10:05:15:
	// 110 really happen within one minute. The counter estimates
	// 20 + 90 × 0.75 = 87.5 and admits; the log counts 110 and rejects.
	counter := New(MustLimit(SlidingWindowCounter, 100, time.Minute, 0))
	log := New(MustLimit(SlidingWindowLog, 100, time.Minute, 0))
	for _, b := range []Bucket{counter, log} {
		if d, _ := b.TakeAt(t1004.Add(59*time.Second), 90); !d.Allowed {
			t.Fatalf("%T: 90 at 10:04:59 rejected", b)
		}
	}
	at := t1004.Add(time.Minute + 15*time.Second)
	d, _ := counter.TakeAt(at, 20)
	if want := (Decision{Allowed: true, Limit: 100, Remaining: 12, ResetAfter: 105 * time.Second}); d != want {
		t.Fatalf("counter: 20 at 10:05:15 = %+v, want %+v (estimate 87.5)", d, want)
	}
	d, _ = log.TakeAt(at, 20)
	if want := (Decision{Limit: 100, Remaining: 10, RetryAfter: 44 * time.Second, ResetAfter: 44 * time.Second}); d != want {
		t.Fatalf("log: 20 at 10:05:15 = %+v, want %+v (10:04:59 + 1m)", d, want)
	}
}

func TestSeamBurst(t *testing.T) {
	// 100 per minute; 100 at 10:04:59 and 100 at 10:05:01. Only the fixed
	// window admits all 200.
	want := map[Algorithm]int64{
		FixedWindow:          200,
		TokenBucket:          103, // 2 s of refill at 100/min is 3.33 tokens
		LeakyBucket:          103, // the queue of 100 drains 3.33 in 2 s
		SlidingWindowLog:     100,
		SlidingWindowCounter: 101, // 100 × 59/60 = 98.33 leaves room for one
	}
	for alg, n := range want {
		t.Run(alg.String(), func(t *testing.T) {
			b := New(MustLimit(alg, 100, time.Minute, 0))
			var admitted int64
			for _, at := range []clock.Instant{t1004.Add(59 * time.Second), t1004.Add(61 * time.Second)} {
				for range 100 {
					if d, _ := b.TakeAt(at, 1); d.Allowed {
						admitted++
					}
				}
			}
			if admitted != n {
				t.Fatalf("admitted %d of 200, want %d", admitted, n)
			}
		})
	}
}

func TestCostOutOfRange(t *testing.T) {
	for alg := range rateAlgorithms {
		b := New(MustLimit(alg, 10, time.Second, 0))
		for _, cost := range []int64{0, -1, 11} {
			if _, err := b.TakeAt(0, cost); err == nil {
				t.Fatalf("%v: cost %d accepted", alg, cost)
			}
		}
		d, err := b.TakeAt(0, 10)
		if err != nil || !d.Allowed || d.Remaining != 0 {
			t.Fatalf("%v: full check after bad costs = %+v, %v; want allowed with 0 remaining", alg, d, err)
		}
	}
}

func TestNewLimitValidation(t *testing.T) {
	bad := []struct {
		alg   Algorithm
		limit int64
		per   time.Duration
		burst int64
		name  string
	}{
		{TokenBucket, 0, time.Second, 0, "zero limit"},
		{TokenBucket, -5, time.Second, 0, "negative limit"},
		{TokenBucket, 10, 0, 0, "zero per"},
		{TokenBucket, 10, time.Microsecond, 0, "per below 1ms"},
		{TokenBucket, 10, MaxPer + 1, 0, "per above max"},
		{TokenBucket, 10, time.Second, -1, "negative burst"},
		{TokenBucket, MaxCount + 1, time.Second, 0, "limit above max"},
		{SlidingWindowLog, MaxLogLimit + 1, time.Second, 0, "log too long"},
		{TokenBucket, 7, MaxPer - 1, MaxCount, "burst × den overflows"},
		{Algorithm(9), 10, time.Second, 0, "unknown algorithm"},
	}
	for _, c := range bad {
		if _, err := NewLimit(c.alg, c.limit, c.per, c.burst); err == nil {
			t.Errorf("%s: NewLimit(%v, %d, %v, %d) accepted", c.name, c.alg, c.limit, c.per, c.burst)
		}
	}
	l, err := NewLimit(FixedWindow, 100, time.Minute, 7)
	if err != nil || l.Burst() != 100 || l.Capacity() != 100 {
		t.Fatalf("window burst: %v, %v; want burst ignored (= 100)", l, err)
	}
	l, err = NewLimit(TokenBucket, 10, time.Second, 0)
	if err != nil || l.Burst() != 10 {
		t.Fatalf("burst 0: %v, %v; want burst = limit", l, err)
	}
}

func TestParseAlgorithm(t *testing.T) {
	for a := range rateAlgorithms {
		got, err := ParseAlgorithm(a.String())
		if err != nil || got != a {
			t.Fatalf("ParseAlgorithm(%q) = %v, %v", a.String(), got, err)
		}
	}
	if a, err := ParseAlgorithm(""); err != nil || a != TokenBucket {
		t.Fatalf(`ParseAlgorithm("") = %v, %v; want token_bucket`, a, err)
	}
	if _, err := ParseAlgorithm("gcra"); err == nil {
		t.Fatal(`ParseAlgorithm("gcra") accepted`)
	}
}
