package forward

import (
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/clock"
)

// degrade answers a check whose owner could not be reached, in the check's
// failure mode; live is the number of members on the ring.
func (r *Router) degrade(c *Check, live int, now clock.Instant) Result {
	r.m.degraded[c.Mode].Inc()
	res := Result{Owner: r.cfg.Self, Degraded: true}
	res.Limit = c.Limit.Count()
	switch c.Mode {
	case bucket.FailOpen:
		res.Allowed = true
	case bucket.FailClosed:
		res.RetryAfter = time.Second
	default:
		l := c.Limit
		lim, err := bucket.NewLimit(l.Algorithm(), max(l.Count()/int64(live), 1), l.Per(), max(l.Burst()/int64(live), 1))
		if err != nil || c.Cost > lim.Capacity() {
			res.RetryAfter = l.Per()
			break
		}
		d, err := r.local.Take(c.Key, &lim, now, c.Cost)
		if err != nil {
			res.RetryAfter = l.Per()
			break
		}
		res.Decision = d
		res.Limit = c.Limit.Count()
	}
	return res
}
