package adaptive

import (
	"math"
	"testing"
	"time"
)

// refGradient2 is Gradient2Limit._update from Netflix concurrency-limits,
// written out again for the tests, with the two changes this package
// makes and documents: the queue allowance only while the gradient is 1,
// and the long RTT taught only by windows not judged queueing (after its
// warm-up, or with the limit at its minimum).
type refGradient2 struct {
	estimate, minL, maxL float64
	tolerance, smoothing float64
	longWindow           int
	longValue, longSum   float64
	longCount            int
}

func (r *refGradient2) update(rtt float64, inflight int) {
	queueSize := math.Max(4, float64(int(math.Sqrt(float64(int(r.estimate))))))
	longRtt := r.longValue
	if r.longCount < 10 || rtt <= r.tolerance*r.longValue || r.estimate <= r.minL {
		// ExpAvgMeasurement.add
		if r.longCount < 10 {
			r.longCount++
			r.longSum += rtt
			r.longValue = r.longSum / float64(r.longCount)
		} else {
			factor := 2.0 / float64(r.longWindow+1)
			r.longValue = r.longValue*(1-factor) + rtt*factor
		}
		longRtt = r.longValue
	}
	if longRtt/rtt > 2 {
		r.longValue *= 0.95
	}
	if float64(inflight) < r.estimate/2 {
		return
	}
	gradient := math.Max(0.5, math.Min(1.0, r.tolerance*longRtt/rtt))
	if gradient < 1 {
		queueSize = 0
	}
	newLimit := r.estimate*gradient + queueSize
	newLimit = r.estimate*(1-r.smoothing) + newLimit*r.smoothing
	r.estimate = math.Max(r.minL, math.Min(r.maxL, newLimit))
}

// TestGradient2ByHand: the first windows worked out on paper from the
// published formulas (Initial 20, tolerance 1.5, smoothing 0.2).
func TestGradient2ByHand(t *testing.T) {
	c := New(Spec{Algorithm: Gradient2, Min: 5, Max: 100, Initial: 20}, 0)
	ms := time.Millisecond
	for i, s := range []struct {
		w        win
		estimate float64
		long     float64 // ms
	}{
		// long = 100; gradient 1; queue max(4, ⌊√20⌋) = 4; new 24; 20×0.8 + 24×0.2
		{win{n: 10, lat: 100 * ms, maxIn: 20}, 20.8, 100},
		{win{n: 10, lat: 100 * ms, maxIn: 20}, 21.6, 100},
		{win{n: 10, lat: 100 * ms, maxIn: 20}, 22.4, 100},
		// warm-up mean (300 + 300)/4 = 150; gradient 1.5×150/300 = 0.75;
		// new 22.4×0.75 = 16.8; 22.4×0.8 + 16.8×0.2 = 21.28
		{win{n: 10, lat: 300 * ms, maxIn: 22}, 21.28, 150},
		// app-limited (10 < 21.28/2): the limit holds; long (600+300)/5 = 180
		{win{n: 10, lat: 300 * ms, maxIn: 10}, 21.28, 180},
		// under MinSamples: nothing moves
		{win{n: 9, lat: time.Hour, maxIn: 21}, 21.28, 180},
		// long (900+30)/6 = 155; 155/30 > 2 pulls it to 147.25; gradient 1;
		// queue ⌊√21⌋ = 4; 21.28 + 0.2×4 = 22.08
		{win{n: 10, lat: 30 * ms, maxIn: 21}, 22.08, 147.25},
	} {
		feed(c, i, s.w)
		st := c.State()
		if math.Abs(st.Limit-s.estimate) > 1e-9 || math.Abs(st.LongRTT-s.long*1e6) > 1e-3 {
			t.Errorf("window %d: estimate %v long %vms, want %v and %vms", i, st.Limit, st.LongRTT/1e6, s.estimate, s.long)
		}
		if got, want := c.Limit(), int64(s.estimate); got != want {
			t.Errorf("window %d: Limit() = %d, want %d", i, got, want)
		}
	}
}

// TestGradient2Golden runs 400 windows of varied latency and load through
// the controller and the reference, exactly.
func TestGradient2Golden(t *testing.T) {
	spec := Spec{Algorithm: Gradient2, Min: 4, Max: 150, Initial: 30, LongWindow: 50, Tolerance: 2, Smoothing: 0.3}
	c := New(spec, 0)
	ref := refGradient2{estimate: 30, minL: 4, maxL: 150, tolerance: 2, smoothing: 0.3, longWindow: 50}
	for k := range 400 {
		lat := time.Duration(20+(k*37)%90) * time.Millisecond
		if k >= 100 && k < 130 {
			lat *= 4 // a slow spell
		}
		inflight := (k * 13) % 120
		feed(c, k, win{n: 10, lat: lat, maxIn: int64(inflight)})
		ref.update(float64(lat), inflight)
		st := c.State()
		if st.Limit != ref.estimate || st.LongRTT != ref.longValue || c.Limit() != int64(ref.estimate) {
			t.Fatalf("window %d: estimate %v long %v, want %v and %v", k, st.Limit, st.LongRTT, ref.estimate, ref.longValue)
		}
	}
	if ref.estimate == 30 {
		t.Fatal("the golden run never moved the limit")
	}
}

// TestGradient2QuietBaseline: windows with no samples, or too few (a lone
// request that took an hour), teach the long RTT nothing and move
// nothing, so the next real window decides exactly as if the quiet spell
// had not been (the huge-minRTT-from-an-empty-histogram outage).
func TestGradient2QuietBaseline(t *testing.T) {
	spec := Spec{Algorithm: Gradient2, Min: 5, Max: 100, Initial: 20}
	quiet, busy := New(spec, 0), New(spec, 0)
	normal := win{n: 10, lat: 40 * time.Millisecond, maxIn: 30}
	for k := range 15 {
		feed(quiet, k, normal)
		feed(busy, k, normal)
	}
	before := quiet.State()
	for k := 15; k < 115; k++ {
		w := win{}
		if k%2 == 0 {
			w = win{n: 1, lat: time.Hour, maxIn: 30}
		}
		if changed, _ := feed(quiet, k, w); changed {
			t.Fatalf("window %d: a quiet window moved the limit", k)
		}
	}
	if after := quiet.State(); after.Limit != before.Limit || after.LongRTT != before.LongRTT {
		t.Fatalf("quiet spell moved estimate %v → %v, long %v → %v", before.Limit, after.Limit, before.LongRTT, after.LongRTT)
	}
	feed(quiet, 115, normal)
	feed(busy, 15, normal)
	q, b := quiet.State(), busy.State()
	if q.Limit != b.Limit || q.LongRTT != b.LongRTT {
		t.Fatalf("after the quiet spell: estimate %v long %v, want %v and %v", q.Limit, q.LongRTT, b.Limit, b.LongRTT)
	}
	if q.LongRTT != float64(40*time.Millisecond) {
		t.Fatalf("long RTT %v, want 40ms", q.LongRTT)
	}
}

// TestGradient2ZeroLatency: windows of instant answers neither divide by
// zero nor leave the bounds.
func TestGradient2ZeroLatency(t *testing.T) {
	c := New(Spec{Algorithm: Gradient2, Min: 5, Max: 50, Initial: 20}, 0)
	for k := range 100 {
		feed(c, k, win{n: 10, maxIn: 50})
	}
	if st := c.State(); c.Limit() != 50 || math.IsNaN(st.LongRTT) || st.LongRTT != 0 {
		t.Fatalf("Limit() = %d long %v, want 50 and 0", c.Limit(), st.LongRTT)
	}
}

// TestGradient2AppLimited: traffic that never comes near the limit does
// not grow it; the same latencies at the limit do.
func TestGradient2AppLimited(t *testing.T) {
	spec := Spec{Algorithm: Gradient2, Min: 5, Max: 100, Initial: 20}
	c := New(spec, 0)
	for k := range 50 {
		feed(c, k, win{n: 10, lat: 10 * time.Millisecond, maxIn: 9}) // 9×2 < 20
	}
	if c.Limit() != 20 {
		t.Fatalf("app-limited: Limit() = %d, want 20", c.Limit())
	}
	feed(c, 50, win{n: 10, lat: 10 * time.Millisecond, maxIn: 10}) // 10×2 ≥ 20
	if st := c.State(); st.Limit != 20.8 {
		t.Fatalf("at half the limit: estimate %v, want 20.8", st.Limit)
	}
}
