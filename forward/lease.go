package forward

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
)

// Token leases keep a hot key from making its owner the bottleneck. For a
// check with Lease set on a token bucket owned by another node, the entry
// node asks the owner, with the check, for a lease of a few tokens; the
// owner takes them from the bucket (only what it has) and grants them for
// LeaseTTL. Until the lease is spent or expires, the entry node admits
// checks on that key locally. Exactness holds by construction: leased
// tokens are already spent at the owner. When a lease expires its unused
// tokens are given back; what a node that crashed held is lost in the safe
// direction (fewer admissions, never more).

// lease is the tokens of one key this node may admit locally.
type lease struct {
	tokens  atomic.Int64
	expires int64 // Clock time
	limit   bucket.Limit
}

// leases holds this node's leases and the keys with a lease request in
// flight. Safe for concurrent use.
type leases struct {
	m       sync.Map // key → *lease
	pending sync.Map // key → struct{}: one lease request in flight per key
}

// take admits c from a live lease on its key, if there is one with enough
// tokens.
func (ls *leases) take(c *Check, now int64) (Result, bool) {
	v, ok := ls.m.Load(c.Key)
	if !ok {
		return Result{}, false
	}
	l := v.(*lease)
	if now >= l.expires || l.limit != c.Limit {
		return Result{}, false
	}
	left := l.tokens.Add(-c.Cost)
	if left < 0 {
		l.tokens.Add(c.Cost)
		return Result{}, false
	}
	return Result{Decision: bucket.Decision{Allowed: true, Limit: c.Limit.Count(), Remaining: left}, Leased: true}, true
}

// leaseSize is how many tokens to ask for: what the limit refills in one
// TTL, at most a share of the burst that leaves every member room, at most
// LeaseMax, at least 1.
func (r *Router) leaseSize(c *Check, members int) int64 {
	l := &c.Limit
	perTTL := float64(l.Count()) * float64(r.cfg.LeaseTTL) / float64(l.Per())
	n := min(int64(perTTL), l.Burst()/int64(2*max(members, 1)), r.cfg.LeaseMax)
	return max(n, 1)
}

// install records a lease the owner granted, giving back what an older
// lease on the key still held.
func (r *Router) install(c *Check, granted int64, ttl time.Duration, now int64) {
	nl := &lease{expires: now + int64(ttl), limit: c.Limit}
	nl.tokens.Store(granted)
	if old, loaded := r.leases.m.Swap(c.Key, nl); loaded {
		r.giveBack(c.Key, old.(*lease))
	}
	r.m.leasesGranted.Add(float64(granted))
}

// giveBack returns a lease's unused tokens to the key's owner, in the
// background.
func (r *Router) giveBack(key string, l *lease) {
	n := l.tokens.Swap(0)
	if n <= 0 {
		return
	}
	r.m.leasesReturned.Add(float64(n))
	r.wg.Go(func() {
		ctx, cancel := context.WithTimeout(r.ctx, r.cfg.PeerTimeout)
		defer cancel()
		out := make([]Result, 1)
		r.Check(ctx, []Check{{Key: key, Limit: l.limit, Cost: n, Refund: true}}, out)
	})
}

// expireLeases gives back the unused tokens of expired leases, every
// LeaseTTL until ctx ends.
func (r *Router) expireLeases(ctx context.Context) {
	tick := time.NewTicker(r.cfg.LeaseTTL)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now := r.cfg.Clock.Now()
		r.leases.m.Range(func(k, v any) bool {
			if l := v.(*lease); now >= l.expires && r.leases.m.CompareAndDelete(k, v) {
				r.giveBack(k.(string), l)
			}
			return true
		})
	}
}
