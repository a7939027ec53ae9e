package forward

import (
	"context"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/peer"
)

// The Router is the peer service's Handler: it decides the batches other
// nodes forward to it (hop limit 1: on this node's store, whatever this
// node's ring says, so ring views that are still converging cannot make a
// check loop), merges handoffs and answers fetches.

// Decide implements peer.Handler.
func (r *Router) Decide(ctx context.Context, from string, reqs []peer.Request, out []peer.Answer) {
	v := r.awaitMember(ctx, from)
	now := r.cfg.Clock.Now()
	r.lastPeerCheck.Store(int64(now))
	for i := range reqs {
		q, a := &reqs[i], &out[i]
		if q.Refund {
			r.cfg.Store.Refund(q.Key, &q.Limit, now, q.Cost)
			*a = peer.Answer{}
			continue
		}
		res := r.decideLocal(ctx, v, q.Key, &q.Limit, q.Cost, now)
		*a = peer.Answer{}
		if q.Lease > 0 && res.Allowed && q.Limit.Algorithm() == bucket.TokenBucket {
			if a.LeaseGranted = r.cfg.Store.Grant(q.Key, &q.Limit, now, min(q.Lease, q.Limit.Burst())); a.LeaseGranted > 0 {
				a.LeaseTTL = r.cfg.Lease.TTL
				res.Remaining = max(res.Remaining-a.LeaseGranted, 0)
			}
		}
		a.SetDecision(&res.Decision)
	}
}

// MayWait implements peer.Handler: a batch may block when its sender is
// not on this node's ring yet, or when a ring change is recent enough that
// keys may be fetched from their previous owner.
func (r *Router) MayWait(from string) bool {
	v := r.view.Load()
	if from != "" && !v.has(from) && v.len() <= 1 {
		return true
	}
	return v.inGrace(r.cfg.Clock.Now(), r.cfg.Grace)
}

// Merge implements peer.Handler: the more spent side wins.
func (r *Router) Merge(from string, states []peer.State) int {
	now := r.cfg.Clock.Now()
	merged := 0
	for i := range states {
		s := &states[i]
		if r.cfg.Store.Merge(s.Key, &s.Limit, now, s.Used) == nil {
			merged++
		}
	}
	return merged
}

// Lookup implements peer.Handler.
func (r *Router) Lookup(key string) (peer.State, bool) {
	l, used, ok := r.cfg.Store.Used(key, r.cfg.Clock.Now())
	return peer.State{Key: key, Limit: l, Used: used}, ok
}

// Keys implements peer.Handler.
func (r *Router) Keys() int64 { return int64(r.cfg.Store.Len()) }

// awaitMember returns the current view. A node whose ring is still only
// itself (it has just joined) first waits, at most half the peer deadline,
// for its ring to include from: it hears from members that already see it
// before its own ring knows them, and deciding then would start keys full
// instead of fetching them from their previous owners.
func (r *Router) awaitMember(ctx context.Context, from string) *view {
	v := r.view.Load()
	if from == "" || v.has(from) || v.len() > 1 {
		return v
	}
	timer := r.cfg.Clock.NewTimer(r.cfg.PeerTimeout / 2)
	defer timer.Stop()
	for {
		changed := *r.viewChanged.Load()
		if v = r.view.Load(); v.has(from) {
			return v
		}
		select {
		case <-changed:
		case <-timer.C():
			return r.view.Load()
		case <-ctx.Done():
			return r.view.Load()
		}
	}
}
