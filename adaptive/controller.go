package adaptive

import (
	"math"
	"time"

	"github.com/ringlimit/ringlimit/clock"
)

// Outcome is how a request ended, as a release or a report says.
type Outcome uint8

const (
	// OK: the request succeeded.
	OK Outcome = iota
	// Error: the request failed in a way that signals overload (a 5xx, a
	// timeout).
	Error
	// Dropped: the request was never served (refused, cancelled by its
	// caller). The controllers ignore it: it says nothing of the backend.
	Dropped
)

// ParseOutcome reads "ok", "error" or "dropped".
func ParseOutcome(s string) (Outcome, bool) {
	switch s {
	case "ok":
		return OK, true
	case "error":
		return Error, true
	case "dropped":
		return Dropped, true
	}
	return 0, false
}

// Sample is one finished request.
type Sample struct {
	Outcome Outcome
	// Latency is the request's duration. Negative counts as 0.
	Latency time.Duration
	// InFlight is how many slots were in use (for a rate limit: how many
	// requests the current window had admitted) when the request started.
	InFlight int64
}

// Controller is one key's adaptive limit. Samples are gathered for a
// window; Tick closes the window once it is due and moves the limit from
// what it held. The zero Controller is not usable: build one with New or
// Resume. A Controller is not safe for concurrent use: its owner (the
// key's owner node) serialises calls, as it does for the key's bucket.
type Controller struct {
	spec  Spec
	limit float64 // the estimate; AIMD keeps it whole
	win   window
	// winStart is when the open window began: it closes at winStart+Window.
	winStart clock.Instant
	// lastSample is when the last ok or error sample arrived (or the
	// controller began).
	lastSample clock.Instant
	fallen     bool // the Fallback applies: no sample for FallbackAfter
	long       expAvg
}

// window is what one window's samples say.
type window struct {
	n, errors   int64
	latencySum  float64 // nanoseconds
	maxInFlight int64
}

// expAvg is Netflix's ExpAvgMeasurement: a plain mean of the first
// warmup values, then an exponential average with factor 2/(n+1).
type expAvg struct {
	value, sum float64
	count      int64
}

// warmup is how many values expAvg averages plainly before it turns
// exponential (ExpAvgMeasurement's warmupWindow of 10).
const warmup = 10

func (e *expAvg) add(v float64, n int) float64 {
	if e.count < warmup {
		e.count++
		e.sum += v
		e.value = e.sum / float64(e.count)
	} else {
		f := 2 / float64(n+1)
		e.value = e.value*(1-f) + v*f
	}
	return e.value
}

// New returns a controller for spec whose limit is spec.Initial and whose
// first window begins at now. An invalid spec (one Validate refuses) is
// made usable rather than refused: bounds ordered, parameters defaulted.
func New(spec Spec, now clock.Instant) *Controller {
	s := spec.sane()
	return &Controller{spec: s, limit: float64(s.Initial), winStart: now, lastSample: now}
}

// Spec returns the controller's spec, with its defaults filled.
func (c *Controller) Spec() Spec { return c.spec }

// Limit returns the current limit, always within [Min, Max]; a fractional
// estimate (Gradient2) is rounded down.
func (c *Controller) Limit() int64 {
	return min(max(int64(c.limit), c.spec.Min), c.spec.Max)
}

// Observe adds one sample to the open window; now is when it arrived.
// Dropped samples, and outcomes it does not know, are ignored. A sample
// that arrives after the window's end still counts in it: Tick decides
// which window closes.
func (c *Controller) Observe(s Sample, now clock.Instant) {
	if s.Outcome != OK && s.Outcome != Error {
		return
	}
	w := &c.win
	if w.n == math.MaxInt64 {
		return
	}
	w.n++
	if s.Outcome == Error {
		w.errors++
	}
	w.latencySum += float64(max(s.Latency, 0))
	w.maxInFlight = max(w.maxInFlight, s.InFlight)
	if now > c.lastSample {
		c.lastSample = now
	}
	c.fallen = false
}

// Tick closes the open window if it is due (now at or past its end),
// moves the limit from it, and starts the next window at the last window
// boundary at or before now: windows that passed with no Tick were empty
// and hold. Then, if no sample has arrived for FallbackAfter and a
// Fallback is set, the limit becomes the Fallback. It reports whether
// Limit changed and in which direction (-1, 0, +1). Time that goes
// backwards closes nothing.
func (c *Controller) Tick(now clock.Instant) (changed bool, dir int) {
	before := c.Limit()
	if end := c.winStart.Add(c.spec.Window); !now.Before(end) {
		c.close()
		if d := now.Sub(c.winStart); d > 0 {
			c.winStart = c.winStart.Add(d / c.spec.Window * c.spec.Window)
		} else { // an overflowed span: start afresh
			c.winStart = now
		}
		c.win = window{}
	}
	if c.spec.Fallback != 0 && !c.fallen && now.Sub(c.lastSample) >= c.spec.FallbackAfter {
		c.fallen = true
		c.limit = float64(c.spec.Fallback)
	}
	after := c.Limit()
	switch {
	case after > before:
		return true, 1
	case after < before:
		return true, -1
	}
	return false, 0
}

// close moves the limit from the window that just closed. A window with
// fewer than MinSamples (none included) holds, and teaches Gradient2's
// long-term RTT nothing.
func (c *Controller) close() {
	w := c.win
	if w.n == 0 || w.n < int64(c.spec.MinSamples) {
		return
	}
	if c.spec.Algorithm == Gradient2 {
		c.gradient2(w)
	} else {
		c.aimd(w)
	}
	c.limit = min(max(c.limit, float64(c.spec.Min)), float64(c.spec.Max))
}

// appLimited reports whether the window used under half the limit: its
// largest InFlight × 2 is below the limit. Such a window never raises the
// limit (the limit was not what held traffic back).
func (c *Controller) appLimited(w window) bool {
	return float64(w.maxInFlight) < c.limit/2
}

// aimd is Netflix's AIMDLimit judged per window: a window whose error
// fraction is above ErrorThreshold, or whose average latency is above
// LatencyThreshold, multiplies the limit by Backoff (rounded down);
// otherwise a window that was not app-limited adds one.
func (c *Controller) aimd(w window) {
	errFrac := float64(w.errors) / float64(w.n)
	avg := w.latencySum / float64(w.n)
	slow := c.spec.LatencyThreshold > 0 && avg > float64(c.spec.LatencyThreshold)
	switch {
	case errFrac > c.spec.ErrorThreshold || slow:
		c.limit = math.Floor(c.limit * c.spec.Backoff)
	case !c.appLimited(w):
		c.limit++
	}
}

// gradient2 is Netflix's Gradient2Limit, once per window: the short RTT
// is the window's average latency, the long RTT an exponential average of
// short RTTs over LongWindow windows (a plain mean of the first ten),
// pulled down by 5% whenever it is over twice the short one (their fix
// for drift). An app-limited window leaves the limit alone. Otherwise
//
//	gradient = max(0.5, min(1, Tolerance × long / short))
//	new      = limit × gradient + queue
//	limit    = limit × (1 − Smoothing) + new × Smoothing
//
// with queue = max(4, ⌊√⌊limit⌋⌋) (their square-root queue function).
// Two changes from the published form, both against the creep under a
// modest steady overload (concurrency-limits #134): past its warm-up the
// long RTT learns only from a window that is not queueing (short ≤
// Tolerance × long) or that finds the limit at Min, so it does not follow
// the queued RTT up; and queue is added only while gradient is 1.
func (c *Controller) gradient2(w window) {
	short := w.latencySum / float64(w.n)
	long := c.long.value
	if c.long.count < warmup || short <= c.spec.Tolerance*long || c.limit <= float64(c.spec.Min) {
		long = c.long.add(short, c.spec.LongWindow)
	}
	if short > 0 && long/short > 2 {
		c.long.value *= 0.95
	}
	if c.appLimited(w) {
		return
	}
	gradient := 1.0
	if short > 0 {
		gradient = max(0.5, min(1, c.spec.Tolerance*long/short))
	}
	queue := 0.0
	if gradient >= 1 {
		queue = max(4, math.Floor(math.Sqrt(math.Floor(c.limit))))
	}
	next := c.limit*gradient + queue
	c.limit = c.limit*(1-c.spec.Smoothing) + next*c.spec.Smoothing
}
