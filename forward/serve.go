package forward

import (
	"context"
	"fmt"
	"strings"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/clock"
	"github.com/ringlimit/ringlimit/internal/peermsg"
)

// The Router is the peer service's Handler: it decides the batches other
// nodes forward to it, takes their pushes and replicas, and answers
// fetches. A check reaches its decider in at most two hops: a receiver
// whose ring names another owner redirects it (unless it still holds a
// copy of the key it has not pushed), and the sender sends it to that
// owner as a last hop, which decides whatever its ring says.

// Decide implements peer.Decider.
func (r *Router) Decide(ctx context.Context, from string, version uint64, reqs []peermsg.Request, out []peermsg.Answer) {
	v := r.awaitMember(ctx, from)
	now := r.cfg.Clock.Now()
	r.lastPeerCheck.Store(int64(now))
	if version != 0 && version != v.version() {
		r.m.ringDisagreements.Inc()
	}
	hold := false // a local spend waits for its replica before the batch is answered
	c := new(Check)
	for i := range reqs {
		q, a := &reqs[i], &out[i]
		*a = peermsg.Answer{}
		owner := ownerIn(v.ring, r.cfg.Self, q.Key)
		if owner != r.cfg.Self && !q.Final && (!r.cfg.Store.Has(q.Key) || r.handoff.isPushed(q.Key)) {
			a.Redirect = owner
			r.m.redirects.Inc()
			continue
		}
		if q.Refund {
			l := q.Limit
			if q.Adaptive != nil && owner == r.cfg.Self {
				l = r.adapt.limit(q.Key, q.Adaptive, q.AdaptiveScope, q.Limit, now)
			}
			r.cfg.Store.Refund(q.Key, &l, now, q.Cost)
			continue
		}
		// The peer protocol does not carry a check's failure mode: a new
		// key this node has no room for is answered Full (refused, for a
		// sender from before the flag), and the sender decides it in its
		// failure mode (see noRoom). Nothing here decides by Mode.
		// One Check serves the whole batch in turn (nothing keeps it
		// past its request): one allocation a batch, not one a check.
		*c = Check{Key: q.Key, Limit: q.Limit, Cost: q.Cost, Mode: bucket.FailClosed, Sync: q.Sync, Peek: q.Peek, forwarded: true,
			Adaptive: q.Adaptive, AdaptiveScope: q.AdaptiveScope}
		if q.ReserveTTL > 0 && q.Limit.Algorithm() == bucket.TokenBucket && q.ReserveTTL <= bucket.MaxReserveTTL {
			c.Reserve = q.ReserveTTL
		}
		var res Result
		if owner == r.cfg.Self {
			var h bool
			res, h = r.decideLocal(ctx, v, c, now)
			hold = hold || h
		} else {
			res = r.decideFor(ctx, v, owner, c, now)
		}
		a.Reservation = res.Reservation
		if q.Lease > 0 && c.Reserve == 0 && !q.Peek && res.Allowed && q.Limit.Algorithm() == bucket.TokenBucket {
			if a.LeaseGranted = r.cfg.Store.Grant(q.Key, &q.Limit, now, min(q.Lease, q.Limit.Burst())); a.LeaseGranted > 0 {
				a.LeaseTTL = r.cfg.Lease.TTL
				res.Remaining = max(res.Remaining-a.LeaseGranted, 0)
			}
		}
		a.SetDecision(&res.Decision)
		a.Full = res.full
		if q.Adaptive != nil && res.Decision.Limit != q.Limit.Count() {
			a.Limit = res.Decision.Limit
		}
	}
	if hold {
		r.repl.await(ctx, r.ctx.Done())
	}
}

// MayWait implements peer.Decider: a batch may block when its sender is
// not on this node's ring yet, when a ring change is recent enough that
// keys may be fetched from their previous owner, or when answers were held
// for their replica within the last second (replication: sync, or a key
// past the bound in tokens): a held batch must not hold up the others.
func (r *Router) MayWait(from string) bool {
	v := r.view.Load()
	if from != "" && !v.has(from) && v.len() <= 1 {
		return true
	}
	now := r.cfg.Clock.Now()
	return v.inGrace(now, r.cfg.Grace) || r.repl.holding(now)
}

// Merge implements peer.StateStore: each state is spend the sender made on
// its copy that this node has not seen, and is added to this node's copy
// (a negative spend is refused, a spend past the capacity saturates: see
// bucket.Store.Charge).
func (r *Router) Merge(from string, states []peermsg.State) int {
	now := r.cfg.Clock.Now()
	v := r.view.Load()
	merged := 0
	var refused []bucket.Tomb
	defer func() {
		if len(refused) > 0 {
			r.tell([]string{from}, refused)
		}
	}()
	r.importLeases(from, states, now, false)
	for i := range states {
		s := &states[i]
		if s.LeaseSet { // a concurrency key's lease set: importLeases took it
			continue
		}
		if !r.admit(s, now) { // it predates a reset of the key: from is told
			refused = r.appendRefused(refused, s, now)
			continue
		}
		if ownerIn(v.ring, r.cfg.Self, s.Key) != r.cfg.Self {
			r.handoff.mayHoldForeign() // rings disagree: the next pass pushes it on
		}
		r.importState(from, s, now)
		r.adapt.handed(s, now)
		if r.chargeHanded(from, s, now) {
			merged++
		}
	}
	return merged
}

// chargeHanded charges this node's copy of a key with what from handed it,
// and reports whether the store took it. A push carries what from spent
// since it last pushed, but Full, its whole copy: part of that copy may be
// here already, restored from this node's state file (restored), or
// fetched from from, or pushed back to it (what the two share, as far as
// this node's copy still holds it): only the rest is charged. What the two
// share is left as it is (from drops its copy once it has handed it, and a
// push back must then carry everything). Without this, a fetch of the key
// answered while from read its copy for the push was counted twice
// (TestRingJoinExactWithRoomLeft admitted 52 of 100 on a key whose
// previous owner had spent 51).
func (r *Router) chargeHanded(from string, s *peermsg.State, now clock.Instant) bool {
	r.shared.copies.Lock() // see shared
	defer r.shared.copies.Unlock()
	// What from decided during this node's cut is here: a fetch answered
	// later adds nothing (adoptFetched, rejoin.go).
	if v := r.view.Load(); v.minority {
		r.pushedInMinority.Store(strings.Clone(s.Key), true)
	} else if rj := r.liveRejoin(now); rj != nil && rj.prev(v, r.cfg.Self, s.Key) == from {
		rj.markSure(s.Key)
	}
	if !s.Full {
		return r.cfg.Store.Charge(s.Key, &s.Limit, now, s.Used) == nil
	}
	used := r.restored.take(s.Key, s.Used, now)
	if had, ok := r.shared.used(from, s.Key, now); ok {
		// Only what this node's copy still holds: a copy handed to its
		// owner and deleted after Grace holds nothing the two share.
		_, held, _ := r.cfg.Store.Used(s.Key, now)
		used = min(used, max(s.Used-min(had, held), 0))
	}
	return r.cfg.Store.Charge(s.Key, &s.Limit, now, used) == nil
}

// Replicate implements peer.StateStore: from, the owner of the keys, keeps
// their state here, its successor. A key this node also holds a copy of
// (it stood in for from) gets what from spent since its last replica.
func (r *Router) Replicate(from string, states []peermsg.State) (int, error) {
	v := r.view.Load()
	if !v.has(from) {
		r.m.replicasRefused.Add(float64(len(states)))
		return 0, fmt.Errorf("forward: %s is not a member of %s's ring", from, r.cfg.Self)
	}
	now := r.cfg.Clock.Now()
	if r.tombs.Load() || hasResetAt(states) {
		states = r.admitAll(from, states, now)
	}
	if keys := r.unknownLeases(from, states, now); len(keys) > 0 {
		// Kept beside this node's, and the union handed to from.
		r.importLeases(from, states, now, false)
		r.m.replicasRefused.Add(float64(len(states)))
		r.pushUnknownLeases(from, keys)
		return 0, fmt.Errorf("forward: %s holds leases of %d key(s) that %s's set lacks (handed to it)", r.cfg.Self, len(keys), from)
	}
	r.importLeases(from, states, now, true)
	for i := range states {
		r.importState(from, &states[i], now)
		r.adapt.replica(from, &states[i], now)
	}
	r.shared.copies.Lock() // see shared
	defer r.shared.copies.Unlock()
	if !r.handoff.holdsForeign() { // no local copy to charge: the replicas alone
		r.shared.raiseAll(from, now, states)
		return len(states), nil
	}
	for i := range states {
		s := &states[i]
		if s.Used < 0 { // never from a sound peer; the store counts it
			r.shared.raise(from, s.Key, &s.Limit, now, s.Used, s.Window)
			continue
		}
		if r.cfg.Store.Has(s.Key) {
			if seen, _ := r.shared.used(from, s.Key, now); s.Used > seen {
				spend := s.Used - seen
				if seen == 0 {
					// The first replica seen is from's whole copy: a key
					// restored here (each node kept a copy in its state
					// file) holds part of it already.
					spend = r.restored.take(s.Key, s.Used, now)
				}
				if spend > 0 {
					r.cfg.Store.Charge(s.Key, &s.Limit, now, spend)
				}
			}
		}
		// Never lower: a replica sent before a push of this node's spend
		// may arrive after it (refunds at the owner are then not seen, in
		// the safe direction).
		r.shared.raise(from, s.Key, &s.Limit, now, s.Used, s.Window)
	}
	return len(states), nil
}

// Lookup implements peer.StateStore. The state given to from is what from
// and this node now share: this node's later push is only what it spends
// after.
func (r *Router) Lookup(from, key string, named *bucket.Limit) (peermsg.State, bool) {
	// A concurrency key is named by its limit: a policy layer's lives in
	// the policy namespace, an inline one in its own.
	if strings.HasPrefix(key, bucket.NamespaceConcurrency) || (named != nil && named.Algorithm() == bucket.Concurrency) {
		return r.lookupLeases(from, key), true // a concurrency key's lease set, possibly none
	}
	now := r.cfg.Clock.Now()
	r.shared.copies.Lock() // see shared
	snap, ok := r.cfg.Store.Lookup(key, now)
	if ok && from != "" {
		r.shared.set(from, key, &snap.Limit, now, snap.Used, snap.Window)
		if !r.view.Load().has(from) { // a member joining: see forgetJoined
			r.shared.noteEarly(from, key)
		}
	}
	r.shared.copies.Unlock()
	return peermsg.State{Key: key, Limit: snap.Limit, Used: snap.Used, Reservations: r.appendRecords(nil, key, now), ResetAt: snap.ResetAt,
		Window: snap.Window}, ok
}

// Keys implements peer.StatsSource (with RingVersion).
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
	return r.awaitView(ctx, func(v *view) bool { return v.has(from) })
}

// awaitView returns the view once ready says it is, or, when half the peer
// deadline has passed or ctx ends first, the view then.
func (r *Router) awaitView(ctx context.Context, ready func(*view) bool) *view {
	timer := r.cfg.Clock.NewTimer(r.cfg.PeerTimeout / 2)
	defer timer.Stop()
	for {
		changed := *r.viewChanged.Load()
		if v := r.view.Load(); ready(v) {
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
