package forward

import (
	"time"

	"github.com/ringlimit/ringlimit/adaptive"
	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/clock"
	"github.com/ringlimit/ringlimit/internal/peermsg"
)

// Adaptive concurrency limits: the owner of a concurrency key whose acquire
// carries an adaptive spec grants up to the key's controller's current
// limit, and every release it applies is a sample for that controller.

// adaptAcquire puts q's limit at the key's current adaptive limit, this
// node being the key's owner (nothing without a spec).
func (r *Router) adaptAcquire(q *peermsg.AcquireRequest, now clock.Instant) {
	if q.Adaptive != nil {
		q.Limit = r.adapt.limit(q.Key, q.Adaptive, q.AdaptiveScope, q.Limit, now)
	}
}

// observeRelease returns the release hook: a release of a key whose owner
// (this node) runs a controller is a sample, then next is told. The
// sample's InFlight is the key's leases in flight at the release, the
// released one included: what the holder's request ran alongside when it
// ended.
func (r *Router) observeRelease(next func(string, bucket.Limit, Outcome, time.Duration)) func(string, bucket.Limit, Outcome, time.Duration) {
	return func(key string, l bucket.Limit, o Outcome, latency time.Duration) {
		now := r.cfg.Clock.Now()
		s := adaptive.Sample{Outcome: adaptive.Outcome(o), Latency: min(max(latency, 0), MaxReportLatency),
			InFlight: r.slots.InFlight(key, now) + 1}
		r.adapt.observeKnown(key, s, now)
		if next != nil {
			next(key, l, o, latency)
		}
	}
}

// observeKnown feeds key's controller one sample when this node runs one
// (a release names no spec: a key acquired with none has no controller).
func (t *adaptiveTable) observeKnown(key string, s adaptive.Sample, now clock.Instant) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.ctl[key]
	if e == nil {
		return
	}
	e.seen = now
	if changed, dir := e.c.Tick(now); changed {
		t.moved(e, dir)
	}
	e.c.Observe(s, now)
	e.limit = scaled(e.base, e.c.Limit())
	t.dirty[e.key] = struct{}{}
}
