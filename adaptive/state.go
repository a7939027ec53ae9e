package adaptive

import (
	"math"

	"github.com/ringlimit/ringlimit/clock"
)

// State is everything a controller carries from one window to the next,
// fixed in size, so that a successor that resumes it decides as the owner
// would have: the limit, Gradient2's long-term RTT, the open window's
// tallies and its timing. Instants are on the timeline of the node that
// took the State; Resume brings those in the future back to its own now.
type State struct {
	// Limit is the estimate (fractional under Gradient2).
	Limit float64
	// LongRTT, LongSum and LongCount are Gradient2's long-term RTT in
	// nanoseconds: its value, and the sum and count of its warm-up.
	LongRTT, LongSum float64
	LongCount        int64
	// WindowStart is when the open window began; LastSample when the last
	// ok or error sample arrived.
	WindowStart, LastSample clock.Instant
	// Fallen is set while the Fallback applies.
	Fallen bool
	// Samples, Errors, LatencySum (nanoseconds) and MaxInFlight are the
	// open window's tallies.
	Samples, Errors int64
	LatencySum      float64
	MaxInFlight     int64
}

// State returns what Resume needs to continue this controller elsewhere.
func (c *Controller) State() State {
	return State{Limit: c.limit, LongRTT: c.long.value, LongSum: c.long.sum, LongCount: c.long.count,
		WindowStart: c.winStart, LastSample: c.lastSample, Fallen: c.fallen,
		Samples: c.win.n, Errors: c.win.errors, LatencySum: c.win.latencySum, MaxInFlight: c.win.maxInFlight}
}

// Resume returns a controller for spec that continues from st: the same
// Limit and, fed the same samples and ticks, the same decisions as the
// controller st was taken from. A State from a peer is not trusted: values
// out of range are brought into it (a limit into [Min, Max], tallies to
// at least zero, instants after now to now), never refused, so that a
// successor always has a controller.
func Resume(spec Spec, st State, now clock.Instant) *Controller {
	c := New(spec, now)
	if finite(st.Limit) {
		c.limit = min(max(st.Limit, float64(c.spec.Min)), float64(c.spec.Max))
	}
	if finite(st.LongRTT) && finite(st.LongSum) && st.LongRTT >= 0 && st.LongSum >= 0 {
		c.long = expAvg{value: st.LongRTT, sum: st.LongSum, count: min(max(st.LongCount, 0), warmup)}
	}
	c.winStart = min(st.WindowStart, now)
	c.lastSample = min(st.LastSample, now)
	c.fallen = st.Fallen
	if st.Samples > 0 && finite(st.LatencySum) && st.LatencySum >= 0 {
		c.win = window{n: st.Samples, errors: min(max(st.Errors, 0), st.Samples),
			latencySum: st.LatencySum, maxInFlight: max(st.MaxInFlight, 0)}
	}
	return c
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }
