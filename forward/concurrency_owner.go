package forward

import (
	"context"
	"errors"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/internal/peermsg"
)

// The owner's side of concurrency limits: deciding on the lease table,
// waiting for the successor's acknowledgement, and the peer service's
// handlers for operations other nodes forward here.

// leaseAwait waits for a replication round begun after the caller marked
// its key, and reports whether its successors acknowledged it. On a ring
// of one, or with replication off, nothing waits.
func (r *Router) leaseAwait(ctx context.Context, v *view) bool {
	if !r.repl.on() || v.ring == nil || v.ring.Len() < 2 {
		return true
	}
	return r.repl.await(ctx, r.ctx.Done())
}

// acquireLocal decides an acquire of a key this node owns.
func (r *Router) acquireLocal(ctx context.Context, v *view, q *peermsg.AcquireRequest) peermsg.LeaseAnswer {
	now := r.cfg.Clock.Now()
	r.adaptAcquire(q, now)
	g, err := r.slots.Acquire(q.Key, q.Limit, q.TTL, q.RequestID, now)
	if err != nil {
		if !errors.Is(err, bucket.ErrLeasesFull) {
			r.log.Warn("acquire refused", "key", q.Key, "err", err)
		} else {
			r.log.Warn("acquire refused", "key", q.Key, "err", errLeasesFull)
		}
		return peermsg.LeaseAnswer{Status: peermsg.LeaseUnavailable, Owner: r.cfg.Self}
	}
	ans := peermsg.LeaseAnswer{Status: peermsg.LeaseRefused, InFlight: g.InFlight, Limit: q.Limit.Count(),
		RetryAfter: g.RetryAfter, Owner: r.cfg.Self}
	if !g.Granted {
		return ans
	}
	r.repl.leaseChanged(q.Key, q.Limit)
	if !r.leaseAwait(ctx, v) {
		if !g.Repeated { // never a slot its successor does not know
			r.slots.Remove(g.Lease.ID)
			r.repl.leaseChanged(q.Key, q.Limit)
		}
		return peermsg.LeaseAnswer{Status: peermsg.LeaseUnavailable, Owner: r.cfg.Self}
	}
	ans.Status, ans.Lease, ans.RetryAfter = peermsg.LeaseOK, g.Lease.ID, 0
	ans.ExpiresIn = g.Lease.Expires.Sub(now)
	ans.InFlight = r.slots.InFlight(q.Key, now)
	return ans
}

// renewLocal renews a lease of a key this node owns.
func (r *Router) renewLocal(ctx context.Context, v *view, id string, ttl time.Duration) peermsg.LeaseAnswer {
	now := r.cfg.Clock.Now()
	prev, cur, err := r.slots.Renew(id, ttl, now)
	if err != nil {
		return peermsg.LeaseAnswer{Status: peermsg.LeaseNotFound, Owner: r.cfg.Self}
	}
	r.repl.leaseChanged(cur.Key, cur.Limit)
	if !r.leaseAwait(ctx, v) {
		r.slots.Restore(prev)
		r.repl.leaseChanged(cur.Key, cur.Limit)
		return peermsg.LeaseAnswer{Status: peermsg.LeaseUnavailable, Owner: r.cfg.Self}
	}
	return peermsg.LeaseAnswer{Status: peermsg.LeaseOK, Lease: id, InFlight: r.slots.InFlight(cur.Key, now),
		Limit: cur.Limit.Count(), ExpiresIn: ttl, Owner: r.cfg.Self}
}

// releaseLocal releases a lease of a key this node owns. The release
// stands whether or not the successor acknowledges it.
func (r *Router) releaseLocal(ctx context.Context, v *view, key, id string, o Outcome, latency time.Duration) peermsg.LeaseAnswer {
	now := r.cfg.Clock.Now()
	ls, ok := r.slots.Release(id, now)
	if !ok { // released before, expired, or never was: what the key holds
		ans := peermsg.LeaseAnswer{Status: peermsg.LeaseNotFound, Owner: r.cfg.Self}
		if held := r.slots.Held(key, now); len(held) > 0 {
			ans.InFlight, ans.Limit = int64(len(held)), held[0].Limit.Count()
		}
		return ans
	}
	r.repl.leaseChanged(ls.Key, ls.Limit)
	r.leaseAwait(ctx, v)
	if f := r.cfg.OnRelease; f != nil {
		f(ls.Key, ls.Limit, o, latency)
	}
	return peermsg.LeaseAnswer{Status: peermsg.LeaseOK, InFlight: r.slots.InFlight(ls.Key, r.cfg.Clock.Now()),
		Limit: ls.Limit.Count(), Owner: r.cfg.Self}
}

// AcquireFor implements peer.Leaser: an acquire another node sent. A
// receiver whose ring names another owner redirects it, unless final.
func (r *Router) AcquireFor(ctx context.Context, from string, q peermsg.AcquireRequest) peermsg.LeaseAnswer {
	a := Acquire{Key: q.Key, Limit: q.Limit, Mode: bucket.FailClosed, TTL: q.TTL, RequestID: q.RequestID}
	if r.validAcquire(&a) != nil {
		return peermsg.LeaseAnswer{Status: peermsg.LeaseUnavailable, Owner: r.cfg.Self}
	}
	v := r.awaitMember(ctx, from)
	if owner := ownerIn(v.ring, r.cfg.Self, q.Key); owner != r.cfg.Self && !q.Final {
		r.m.redirects.Inc()
		return peermsg.LeaseAnswer{Status: peermsg.LeaseRedirect, Redirect: owner}
	}
	if v.minority && ownerIn(v.ring, r.cfg.Self, q.Key) != r.cfg.Self {
		return peermsg.LeaseAnswer{Status: peermsg.LeaseUnavailable, Owner: r.cfg.Self}
	}
	return r.acquireLocal(ctx, v, &q)
}

// RenewFor implements peer.Leaser: a renew another node sent.
func (r *Router) RenewFor(ctx context.Context, from, id string, ttl time.Duration, final bool) peermsg.LeaseAnswer {
	key, err := bucket.ParseLeaseID(id)
	if err != nil || bucket.CheckLeaseTTL("ttl", ttl) != nil {
		return peermsg.LeaseAnswer{Status: peermsg.LeaseNotFound, Owner: r.cfg.Self}
	}
	v := r.awaitMember(ctx, from)
	if owner := ownerIn(v.ring, r.cfg.Self, key); owner != r.cfg.Self && !final {
		r.m.redirects.Inc()
		return peermsg.LeaseAnswer{Status: peermsg.LeaseRedirect, Redirect: owner}
	}
	return r.renewLocal(ctx, v, id, ttl)
}

// ReleaseFor implements peer.Leaser: a release another node sent.
func (r *Router) ReleaseFor(ctx context.Context, from, id string, outcome uint8, latency time.Duration, final bool) peermsg.LeaseAnswer {
	key, err := bucket.ParseLeaseID(id)
	if err != nil || Outcome(outcome) > OutcomeDropped {
		return peermsg.LeaseAnswer{Status: peermsg.LeaseNotFound, Owner: r.cfg.Self}
	}
	v := r.awaitMember(ctx, from)
	if owner := ownerIn(v.ring, r.cfg.Self, key); owner != r.cfg.Self && !final {
		r.m.redirects.Inc()
		return peermsg.LeaseAnswer{Status: peermsg.LeaseRedirect, Redirect: owner}
	}
	return r.releaseLocal(ctx, v, key, id, Outcome(outcome), max(latency, 0))
}

// InFlight returns the live leases of key as this node's table holds them.
func (r *Router) InFlight(key string) int64 {
	return r.slots.InFlight(key, r.cfg.Clock.Now())
}

// ownedInFlight is the live leases on keys this node owns (the gauge
// ringlimit_leases_in_flight).
func (r *Router) ownedInFlight() int64 {
	v := r.view.Load()
	now := r.cfg.Clock.Now()
	n := int64(0)
	for _, key := range r.slots.Keys() {
		if ownerIn(v.ring, r.cfg.Self, key) == r.cfg.Self {
			n += r.slots.InFlight(key, now)
		}
	}
	return n
}
