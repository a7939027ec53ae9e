// Package adaptive moves a limit from what its callers report: the
// outcomes and latencies of the requests it let through. A key's owner
// runs one Controller per adaptive key, feeds it every release and report
// (Observe), ticks it (Tick), and applies Limit to the key's concurrency or
// rate limit. The package is pure: no clock, goroutine, log or network;
// time is passed in as a clock.Instant.
//
// # Windows
//
// Samples are judged a window at a time (Spec.Window, default 1s). When
// Tick finds the open window due it closes it, and the limit moves at most
// once. A window with no samples, or fewer than Spec.MinSamples, holds:
// silence is not evidence, so it neither raises nor lowers the limit and
// teaches the controller nothing. Dropped outcomes (refused or cancelled
// requests) are ignored. A window is app-limited when its largest
// in-flight count, doubled, is below the limit (traffic never came near
// the limit); an app-limited window never raises the limit, so a quiet
// night does not leave a limit of Max waiting for the morning's surge.
//
// # AIMD
//
// As Netflix concurrency-limits' AIMDLimit, judged per window: a window
// whose error fraction is above Spec.ErrorThreshold, or whose average
// latency is above Spec.LatencyThreshold, multiplies the limit by
// Spec.Backoff (rounded down); a healthy window that was not app-limited
// adds one. It is simple and predictable, needs a threshold that says
// what "slow" is, and moves by at most one per window on the way up.
//
// # Gradient2
//
// As Gradient2Limit, once per window: the short RTT is the window's
// average latency, the long RTT an exponential average of short RTTs over
// Spec.LongWindow windows (a plain mean of the first ten). The gradient
// max(0.5, min(1, Tolerance × long / short)) scales the limit, a queue
// allowance max(4, ⌊√limit⌋) is added, and the result is blended in with
// Spec.Smoothing. It needs no latency threshold: it learns the backend's
// own latency. Its guards come from its known failures. The long RTT
// only learns from windows that met MinSamples, so a quiet spell can
// neither drag it to nothing nor make an empty window's RTT look huge
// (the "empty histogram gives a huge minRTT" outage of Envoy's adaptive
// concurrency); when it is over twice the short RTT it is pulled down by
// 5% a window, so a baseline poisoned by a long overload recovers. Past
// its first ten windows the long RTT learns only from windows that are
// not queueing (short ≤ Tolerance × long) or that find the limit at Min:
// otherwise, under a steady modest overload, it follows the queued RTT up
// and the limit creeps up with it without end (concurrency-limits #134).
// A backend that becomes slower for good still teaches it its new
// latency, from Min, at the pace of the long window. And the queue
// allowance is added only while the gradient is 1: it is headroom to
// probe with while latency is healthy, and added under queueing it holds
// the limit above where the gradient would bring it and blunts a cut.
//
// How fast each falls: a window cuts AIMD's limit by 1 − Backoff (10% by
// default) and Gradient2's by at most Smoothing/2 (10% by default, the
// gradient's floor of 0.5 blended in), so three windows cut at most 27%.
// A backend that needs a deeper cut sooner wants a smaller Backoff or a
// larger Smoothing (the package's simulated backend uses 0.8 and 0.4).
//
// # Failure semantics
//
// Limit is always within [Spec.Min, Spec.Max]. If no sample arrives for
// Spec.FallbackAfter (default ten windows) and Spec.Fallback is set, the
// limit becomes the Fallback until samples come back, and moves from
// there; with no Fallback it holds. A successor continues an owner's
// controller from its State (Resume): the same limit and, fed the same
// samples, the same decisions. What the owner observed after the State
// it last replicated is lost with it, and costs at most that window.
// A State from a peer is clamped into range, never trusted.
//
// # Usage
//
//	c := adaptive.New(spec, now)
//	c.Observe(adaptive.Sample{Outcome: adaptive.OK, Latency: 40 * time.Millisecond, InFlight: 12}, now)
//	if changed, dir := c.Tick(now); changed {
//		metrics.Changes(dir) // the limit moved up (+1) or down (-1)
//	}
//	limit := c.Limit()
package adaptive
