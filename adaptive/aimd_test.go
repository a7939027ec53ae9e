package adaptive

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/clock"
)

// win is one window's samples for a step table: n samples of latency lat,
// errs of them errors, the largest in flight maxIn.
type win struct {
	n, errs int
	lat     time.Duration
	maxIn   int64
}

// feed gives c the samples of w in window k (of length c's Window,
// counted from 0) and ticks at the window's end.
func feed(c *Controller, k int, w win) (changed bool, dir int) {
	start := clock.Instant(0).Add(time.Duration(k) * c.spec.Window)
	for i := range w.n {
		o := OK
		if i < w.errs {
			o = Error
		}
		in := w.maxIn
		if i > 0 {
			in = w.maxIn / 2
		}
		c.Observe(Sample{Outcome: o, Latency: w.lat, InFlight: in}, start.Add(time.Millisecond))
	}
	return c.Tick(start.Add(c.spec.Window))
}

type step struct {
	w       win
	limit   int64
	changed bool
	dir     int
}

// runSteps feeds each step's window in turn and checks the limit and what
// Tick reported.
func runSteps(t *testing.T, c *Controller, steps []step) {
	t.Helper()
	for i, s := range steps {
		changed, dir := feed(c, i, s.w)
		if got := c.Limit(); got != s.limit || changed != s.changed || dir != s.dir {
			t.Errorf("step %d: window %+v: Limit() = %d, Tick = (%v, %d); want %d, (%v, %d)",
				i, s.w, got, changed, dir, s.limit, s.changed, s.dir)
		}
	}
}

func TestAIMDSteps(t *testing.T) {
	spec := Spec{Algorithm: AIMD, Min: 2, Max: 12, Initial: 10, LatencyThreshold: 100 * time.Millisecond}
	healthy := win{n: 10, lat: 50 * time.Millisecond, maxIn: 10}
	runSteps(t, New(spec, 0), []step{
		{healthy, 11, true, 1},  // +1
		{healthy, 12, true, 1},  // +1
		{healthy, 12, false, 0}, // at Max
		{win{n: 10, errs: 1, lat: time.Millisecond, maxIn: 12}, 12, false, 0}, // 10% errors: not above 0.1
		{win{n: 10, errs: 2, lat: time.Millisecond, maxIn: 12}, 10, true, -1}, // 20%: ⌊12×0.9⌋ = 10
		{win{n: 10, lat: 101 * time.Millisecond, maxIn: 12}, 9, true, -1},     // average 101ms > 100ms: ⌊10×0.9⌋ = 9
		{win{n: 9, errs: 9, maxIn: 12}, 9, false, 0},                          // under MinSamples: holds
		{win{}, 9, false, 0},                          // no samples: holds
		{win{n: 10, maxIn: 4}, 9, false, 0},           // app-limited: 4×2 < 9
		{win{n: 10, maxIn: 5}, 10, true, 1},           // 5×2 ≥ 9
		{win{n: 10, errs: 10, maxIn: 1}, 9, true, -1}, // app-limited still cuts
		{win{n: 10, errs: 10}, 8, true, -1},
		{win{n: 10, errs: 10}, 7, true, -1},
		{win{n: 10, errs: 10}, 6, true, -1},
		{win{n: 10, errs: 10}, 5, true, -1},
		{win{n: 10, errs: 10}, 4, true, -1},
		{win{n: 10, errs: 10}, 3, true, -1},
		{win{n: 10, errs: 10}, 2, true, -1},
		{win{n: 10, errs: 10}, 2, false, 0}, // at Min
	})
}

// TestAIMDGolden checks a long run against Netflix's AIMDLimit formula
// written out independently: cut to (int)(limit × backoff) on a bad
// window, add one when inflight × 2 ≥ limit, clamp to [min, max].
func TestAIMDGolden(t *testing.T) {
	spec := Spec{Algorithm: AIMD, Min: 3, Max: 40, Initial: 20, Backoff: 0.75, MinSamples: 4}
	c := New(spec, 0)
	want := 20
	for k := range 200 {
		w := win{n: 4 + k%3, maxIn: int64(k % 30)}
		if k%7 == 0 || k%11 == 0 {
			w.errs = 1 + k%2 // 1 of 4..6 is above 0.1
		}
		bad := w.errs > 0
		switch {
		case bad:
			want = int(float64(want) * 0.75)
		case int(w.maxIn)*2 >= want:
			want++
		}
		want = min(40, max(3, want))
		feed(c, k, w)
		if got := c.Limit(); got != int64(want) {
			t.Fatalf("window %d: Limit() = %d, want %d", k, got, want)
		}
	}
}
