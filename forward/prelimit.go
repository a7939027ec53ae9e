package forward

import (
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/clock"
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
	until clock.Instant // when the owner said to retry
	cost  int64         // the smallest cost it rejected until then
}

// rejectCache remembers owner rejections by key. Safe for concurrent use.
type rejectCache struct {
	mu sync.Mutex
	m  map[string]rejection
}

func (c *rejectCache) shed(key string, cost int64, now clock.Instant) (retry time.Duration, ok bool) {
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
	return r.until.Sub(now), true
}

func (c *rejectCache) add(key string, cost int64, until, now clock.Instant) {
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

// forget drops key's rejection.
func (c *rejectCache) forget(key string) {
	c.mu.Lock()
	delete(c.m, key)
	c.mu.Unlock()
}

// forget drops what the pre-limiter remembers of key (a reset key).
func (p *prelimiter) forget(key string) {
	p.rejected.forget(key)
	p.windows.Delete(key)
}

// prelimiter is the entry node's pre-limiter: its windows and its
// rejection cache. Safe for concurrent use.
type prelimiter struct {
	windows  *bucket.Store
	rejected rejectCache
	shedded  prometheus.Counter
}

func newPrelimiter(keys int, shed prometheus.Counter) (*prelimiter, error) {
	w, err := bucket.NewStore(bucket.StoreConfig{MaxKeys: keys, Shards: 16})
	if err != nil {
		return nil, err
	}
	return &prelimiter{windows: w, shedded: shed}, nil
}

// window is the pre-limiter window for c's limit.
func window(c *Check) (bucket.Limit, bool) {
	l := &c.Limit
	count := min(int64(c.Prelimit*float64(max(l.Count(), l.Burst()))+0.999999), bucket.MaxCount)
	lim, err := bucket.NewLimit(bucket.SlidingWindowCounter, count, l.Per(), 0)
	if err != nil || c.Cost > lim.Capacity() {
		return bucket.Limit{}, false
	}
	return lim, true
}

// shed runs c through the pre-limiter and reports whether it shed it.
func (p *prelimiter) shed(self string, c *Check, now clock.Instant) (Result, bool) {
	shed := func(retry, reset time.Duration) (Result, bool) {
		p.shedded.Inc()
		return Result{Decision: bucket.Decision{Limit: c.Limit.Count(), RetryAfter: clock.CeilMillis(retry), ResetAfter: clock.CeilMillis(reset)},
			Owner: self, Shed: true}, true
	}
	if retry, ok := p.rejected.shed(c.Key, c.Cost, now); ok {
		return shed(retry, retry)
	}
	lim, ok := window(c)
	if !ok {
		return Result{}, false
	}
	d, err := p.windows.Take(c.Key, &lim, now, c.Cost)
	if err != nil || d.Allowed {
		return Result{}, false
	}
	return shed(d.RetryAfter, d.ResetAfter)
}

// giveBack returns c's window slot: c was not sent after all, or its owner
// rejected it.
func (p *prelimiter) giveBack(c *Check, now clock.Instant) {
	if lim, ok := window(c); ok {
		p.windows.Refund(c.Key, &lim, now, c.Cost)
	}
}

// after updates the pre-limiter with the owner's answer to a forwarded
// check: a rejection gives its window slot back and is remembered until its
// retry-after.
func (p *prelimiter) after(c *Check, res *Result, now clock.Instant) {
	if c.Prelimit == 0 || c.Refund || c.Peek || res.Allowed || res.Degraded {
		return
	}
	p.rejected.add(c.Key, c.Cost, now.Add(res.RetryAfter), now)
	p.giveBack(c, now)
}

// all runs the pre-limiter over every check it applies to (remote owner,
// Prelimit set, not a refund) before any check is sent, writes the shed
// ones into out, and returns the Together groups with a shed check. A
// check of such a group that passed its own pre-limiter gives its slot
// back, since it will not be sent.
func (p *prelimiter) all(self string, checks []Check, out []Result, remote func(*Check) bool, now clock.Instant) []int32 {
	clear(out[:len(checks)])
	var shed []int32
	var passed []int // checks of a group that took a window slot
	for i := range checks {
		c := &checks[i]
		if c.Prelimit == 0 || c.Refund || c.Peek || !remote(c) {
			continue
		}
		if c.Together != 0 && slices.Contains(shed, c.Together) {
			continue
		}
		res, isShed := p.shed(self, c, now)
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
		if c := &checks[i]; slices.Contains(shed, c.Together) {
			p.giveBack(c, now)
		}
	}
	return shed
}
