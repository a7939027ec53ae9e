package forward

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/clock"
)

// degrade answers a check that no member could decide, in the check's
// failure mode. Local splits the limit into v.shares() parts, rounded
// down, so that the parts of every node together never exceed it (a part
// of 0 refuses), and never admits a key this node knows to be exhausted:
// its own copy or replica says so, or its owner refused it moments ago.
func (r *Router) degrade(v *view, c *Check, now clock.Instant) Result {
	r.m.degraded[c.Mode].Inc()
	res := Result{Owner: r.cfg.Self, Degraded: true}
	res.Limit = c.Limit.Count()
	switch c.Mode {
	case bucket.FailOpen:
		res.Allowed = true
		return res
	case bucket.FailClosed:
		res.RetryAfter = time.Second
		return res
	}
	l := c.Limit
	if wait, ok := r.exhausted(v, c, now); ok {
		res.RetryAfter = max(wait, time.Millisecond)
		return res
	}
	n := v.shares()
	lim, err := l.WithCount(l.Count()/n, l.Burst()/n)
	if err != nil || c.Cost > lim.Capacity() {
		res.RetryAfter = l.Per()
		return res
	}
	take := r.local.Take
	if c.Peek {
		take = r.local.Peek
	}
	d, err := take(c.Key, &lim, now, c.Cost)
	if err != nil {
		res.RetryAfter = l.Per()
		return res
	}
	res.Decision = d
	res.Limit = c.Limit.Count()
	return res
}

// noRoom answers a check whose new key the store had no room for (the
// store counted it: Store.Full). A check another node forwarded here is
// answered full, refused for one second, and its sender decides it in its
// failure mode (peermsg.Answer.Full); any other is decided here, in its
// failure mode.
func (r *Router) noRoom(v *view, c *Check, now clock.Instant) Result {
	if !c.forwarded {
		return r.degrade(v, c, now)
	}
	return Result{Decision: bucket.Decision{Limit: c.Limit.Count(), RetryAfter: time.Second},
		Owner: r.cfg.Self, OwnerAddr: r.cfg.SelfAddr, full: true}
}

// exhausted reports whether this node knows that c's key has less than
// c.Cost left, and for about how long.
func (r *Router) exhausted(v *view, c *Check, now clock.Instant) (time.Duration, bool) {
	if wait, ok := r.known.refused(c.Key, now); ok {
		return wait, true
	}
	left := func(l bucket.Limit, used int64) bool { return l.Capacity()-used < c.Cost }
	if l, used, ok := r.cfg.Store.Used(c.Key, now); ok && left(l, used) {
		return l.Per(), true
	}
	owner := ownerIn(v.ring, r.cfg.Self, c.Key)
	if owner == r.cfg.Self { // a replica of the previous owner that the store had no room to promote
		owner = prevOwner(v, r.cfg.Self, c.Key)
	}
	if owner != "" && owner != r.cfg.Self {
		if st, ok := r.shared.state(owner, c.Key, now); ok && left(st.Limit, st.Used) {
			return st.Limit.Per(), true
		}
	}
	return 0, false
}

// refusals remembers the keys their owners refused, until the owner's
// retry-after: a node that then loses its owner does not admit them from
// its failure-mode share. Bounded: a full shard is emptied.
type refusals struct {
	n      atomic.Int64 // keys held, so that admissions skip the locks when 0
	max    int
	shards [16]struct {
		mu    sync.Mutex
		until map[string]clock.Instant
	}
}

func newRefusals(max int) *refusals {
	r := &refusals{max: max/16 + 1}
	for i := range r.shards {
		r.shards[i].until = map[string]clock.Instant{}
	}
	return r
}

// note records an owner's decision on key at now.
func (r *refusals) note(key string, d *bucket.Decision, now clock.Instant) {
	if d.Allowed && r.n.Load() == 0 {
		return
	}
	sh := &r.shards[xxhash.Sum64String(key)&15]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	_, held := sh.until[key]
	switch {
	case d.Allowed && held:
		delete(sh.until, key)
		r.n.Add(-1)
	case !d.Allowed && d.RetryAfter > 0:
		if !held {
			if len(sh.until) >= r.max {
				r.n.Add(-int64(len(sh.until)))
				clear(sh.until)
			}
			r.n.Add(1)
			key = string([]byte(key))
		}
		sh.until[key] = now.Add(d.RetryAfter)
	}
}

// forget drops key (a reset key).
func (r *refusals) forget(key string) {
	if r.n.Load() == 0 {
		return
	}
	sh := &r.shards[xxhash.Sum64String(key)&15]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if _, ok := sh.until[key]; ok {
		delete(sh.until, key)
		r.n.Add(-1)
	}
}

// refused reports whether key's owner refused it and how long until it
// said to retry.
func (r *refusals) refused(key string, now clock.Instant) (time.Duration, bool) {
	if r.n.Load() == 0 {
		return 0, false
	}
	sh := &r.shards[xxhash.Sum64String(key)&15]
	sh.mu.Lock()
	until, ok := sh.until[key]
	sh.mu.Unlock()
	if !ok || !now.Before(until) {
		return 0, false
	}
	return until.Sub(now), true
}
