package forward

import (
	"slices"
	"sync"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
)

// The entry-node pre-limiter has two parts, both consulted only for checks
// on keys another node owns, with Check.Prelimit ≥ 1:
//
//   - a sliding window counter at Prelimit × the limit's capacity per Per,
//     counting the checks sent to the owner that it admitted or has not
//     answered yet: it bounds what a flood puts on the network before the
//     owner's first rejection comes back;
//   - a rejection cache: when the owner rejects a check with retry-after R,
//     checks on that key with at least that cost are shed here until R has
//     passed, since the owner said no such check can pass before then.
//
// So a flood costs the owner about one check per retry-after per entry
// node, and a caller who comes back when the owner has tokens again is
// forwarded: the owner stays the authority.

// maxRejected bounds the rejection cache.
const maxRejected = 1 << 16

type rejection struct {
	until int64 // Clock time the owner said to retry at
	cost  int64 // the smallest cost it rejected until then
}

// rejectCache remembers owner rejections by key. Safe for concurrent use.
type rejectCache struct {
	mu sync.Mutex
	m  map[string]rejection
}

func (c *rejectCache) shed(key string, cost, now int64) (retry int64, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, found := c.m[key]
	if !found {
		return 0, false
	}
	if now >= r.until {
		delete(c.m, key)
		return 0, false
	}
	if cost < r.cost {
		return 0, false
	}
	return r.until - now, true
}

func (c *rejectCache) add(key string, cost, until, now int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]rejection{}
	}
	if len(c.m) >= maxRejected {
		for k, r := range c.m {
			if now >= r.until {
				delete(c.m, k)
			}
		}
		if len(c.m) >= maxRejected {
			clear(c.m)
		}
	}
	if r, ok := c.m[key]; ok && r.until >= until && r.cost <= cost {
		return
	}
	c.m[key] = rejection{until: until, cost: cost}
}

// prelimitLimit is the pre-limiter window for c's limit.
func prelimitLimit(c *Check) (bucket.Limit, bool) {
	l := &c.Limit
	count := min(int64(c.Prelimit*float64(max(l.Count(), l.Burst()))+0.999999), bucket.MaxCount)
	lim, err := bucket.NewLimit(bucket.SlidingWindowCounter, count, l.Per(), 0)
	if err != nil || c.Cost > lim.Capacity() {
		return bucket.Limit{}, false
	}
	return lim, true
}

// prelimit runs c through the entry node's pre-limiter and reports whether
// it shed the check.
func (r *Router) prelimit(c *Check, now int64) (Result, bool) {
	shed := func(retry, reset int64) (Result, bool) {
		r.m.shed.Inc()
		return Result{Decision: bucket.Decision{Limit: c.Limit.Count(), RetryAfter: msCeil(retry), ResetAfter: msCeil(reset)},
			Owner: r.cfg.Self, Shed: true}, true
	}
	if retry, ok := r.rejected.shed(c.Key, c.Cost, now); ok {
		return shed(retry, retry)
	}
	lim, ok := prelimitLimit(c)
	if !ok {
		return Result{}, false
	}
	d, err := r.pre.Take(c.Key, &lim, now, c.Cost)
	if err != nil || d.Allowed {
		return Result{}, false
	}
	return shed(int64(d.RetryAfter), int64(d.ResetAfter))
}

// afterOwner updates the pre-limiter with the owner's answer to a forwarded
// check: a rejection gives its window slot back and is remembered until its
// retry-after.
func (r *Router) afterOwner(c *Check, res *Result, now int64) {
	if c.Prelimit == 0 || c.Refund || res.Allowed || res.Degraded {
		return
	}
	r.rejected.add(c.Key, c.Cost, now+int64(res.RetryAfter), now)
	if lim, ok := prelimitLimit(c); ok {
		r.pre.Refund(c.Key, &lim, now, c.Cost)
	}
}

func msCeil(ns int64) time.Duration {
	const ms = int64(time.Millisecond)
	return time.Duration((ns + ms - 1) / ms * ms)
}

// prelimitAll runs the pre-limiter over every check it applies to (remote
// owner, Prelimit set, not a refund) before any check is sent, writes the
// shed ones into out, and returns the Together groups with a shed check.
// A check of such a group that passed its own pre-limiter gives its slot
// back, since it will not be sent.
func (r *Router) prelimitAll(v *view, checks []Check, out []Result, now int64) []int32 {
	clear(out[:len(checks)])
	var shed []int32
	var passed []int // checks of a group that took a window slot
	for i := range checks {
		c := &checks[i]
		if c.Prelimit == 0 || c.Refund || r.ownerIn(v, c.Key) == r.cfg.Self {
			continue
		}
		if c.Together != 0 && slices.Contains(shed, c.Together) {
			continue
		}
		res, isShed := r.prelimit(c, now)
		if !isShed {
			if c.Together != 0 {
				passed = append(passed, i)
			}
			continue
		}
		out[i] = res
		if c.Together != 0 {
			shed = append(shed, c.Together)
		}
	}
	for _, i := range passed {
		c := &checks[i]
		if slices.Contains(shed, c.Together) {
			if lim, ok := prelimitLimit(c); ok {
				r.pre.Refund(c.Key, &lim, now, c.Cost)
			}
		}
	}
	return shed
}
