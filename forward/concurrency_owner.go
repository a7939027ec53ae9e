package forward

import (
	"context"
	"sync"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/clock"
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

// awaitingLeases reports whether key is one this node took over in the
// last ring change from a previous owner that is not down, whose lease set
// has not arrived (pushed by handoffLeases or fetched): until it does, or
// the grace period ends, what this node holds of the key may lack leases
// the previous owner granted, and the key's operations are answered as
// unavailable.
func (r *Router) awaitingLeases(v *view, key string, now clock.Instant) bool {
	prev, since := r.leasePrevOwner(v, key, now)
	if prev == "" || v.isDown(prev) {
		return false
	}
	got, ok := r.leasesReceived.Load(key)
	return !ok || got.(received).version != v.version() || got.(received).at < since
}

// received is when a key's lease set last came from its previous owner,
// and under which ring.
type received struct {
	at      clock.Instant
	version uint64
}

// leasePrevOwner is who decided key before this node owned it, and since
// when this node owns it: its previous owner after a ring change, or,
// within the grace period after this node came back from a minority, the
// member that owned it meanwhile. "" when that is nobody else.
func (r *Router) leasePrevOwner(v *view, key string, now clock.Instant) (string, clock.Instant) {
	var prev string
	var since clock.Instant
	inGrace := v.inGrace(now, r.cfg.Grace)
	if inGrace {
		prev, since = prevOwner(v, r.cfg.Self, key), v.changed
	}
	if rj := r.liveRejoin(now); rj != nil && rj.gave(v, prev, inGrace) {
		if p := rj.prev(v, r.cfg.Self, key); p != r.cfg.Self {
			return p, rj.at
		}
		return "", 0
	}
	return prev, since
}

// waitLeases is awaitingLeases once it asked the previous owner for the
// key's set, or, when that one does not answer, waited at most half the
// peer deadline for the set to arrive.
func (r *Router) waitLeases(ctx context.Context, v *view, key string) bool {
	if !r.awaitingLeases(v, key, r.cfg.Clock.Now()) {
		return false
	}
	if prev, _ := r.leasePrevOwner(v, key, r.cfg.Clock.Now()); r.fetchLeases(ctx, v, prev, key) {
		return false
	}
	timer := r.cfg.Clock.NewTimer(r.cfg.PeerTimeout / 2)
	defer timer.Stop()
	for {
		arrived := r.leasesArrived.wait()
		if !r.awaitingLeases(v, key, r.cfg.Clock.Now()) {
			return false
		}
		select {
		case <-arrived:
		case <-timer.C():
			return r.awaitingLeases(v, key, r.cfg.Clock.Now())
		case <-ctx.Done():
			return true
		}
	}
}

// signal wakes its waiters each time it fires. The zero value is ready to
// use; it is safe for concurrent use.
type signal struct {
	mu sync.Mutex // guards ch
	ch chan struct{}
}

// wait returns a channel closed at the next fire.
func (s *signal) wait() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.ch
}

func (s *signal) fire() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
}

// stillOwner reports whether this node still owns key once its change
// was acknowledged: a round begun after the ring moved the key elsewhere
// does not carry it, and the new owner may already count the set without
// it.
func (r *Router) stillOwner(key string) bool {
	return ownerIn(r.view.Load().ring, r.cfg.Self, key) == r.cfg.Self
}

// acquireLocal decides an acquire of a key this node owns.
func (r *Router) acquireLocal(ctx context.Context, v *view, q *peermsg.AcquireRequest) peermsg.LeaseAnswer {
	now := r.cfg.Clock.Now()
	if r.waitLeases(ctx, v, q.Key) {
		return peermsg.LeaseAnswer{Status: peermsg.LeaseUnavailable, Owner: r.cfg.Self}
	}
	r.adaptAcquire(q, now)
	g, err := r.slots.AcquireCapped(q.Key, q.Limit, q.TTL, q.MaxTTL, q.RequestID, now)
	if err != nil { // a full table (bucket.ErrLeasesFull), or a bad request from a peer
		r.log.Warn("acquire not decided", "key", q.Key, "err", err)
		return peermsg.LeaseAnswer{Status: peermsg.LeaseUnavailable, Owner: r.cfg.Self}
	}
	ans := peermsg.LeaseAnswer{Status: peermsg.LeaseRefused, InFlight: g.InFlight, Limit: q.Limit.Count(),
		RetryAfter: g.RetryAfter, Owner: r.cfg.Self}
	if !g.Granted {
		return ans
	}
	r.repl.leaseChanged(q.Key, q.Limit)
	if !r.leaseAwait(ctx, v) || !r.stillOwner(q.Key) {
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
		if key, _ := bucket.ParseLeaseID(id); v.minority || r.waitLeases(ctx, v, key) {
			return peermsg.LeaseAnswer{Status: peermsg.LeaseUnavailable, Owner: r.cfg.Self}
		}
		return peermsg.LeaseAnswer{Status: peermsg.LeaseNotFound, Owner: r.cfg.Self}
	}
	r.repl.leaseChanged(cur.Key, cur.Limit)
	if !r.leaseAwait(ctx, v) || !r.stillOwner(cur.Key) {
		r.slots.Restore(prev)
		r.repl.leaseChanged(cur.Key, cur.Limit)
		return peermsg.LeaseAnswer{Status: peermsg.LeaseUnavailable, Owner: r.cfg.Self}
	}
	return peermsg.LeaseAnswer{Status: peermsg.LeaseOK, Lease: id, InFlight: r.slots.InFlight(cur.Key, now),
		Limit: cur.Limit.Count(), ExpiresIn: cur.Expires.Sub(now), Owner: r.cfg.Self}
}

// releaseLocal releases a lease of a key this node owns. The release
// stands whether or not the successor acknowledges it, so it is answered
// at once: a round started now carries the key's set (until it is
// acknowledged, a crash of this node leaves the successor counting the
// lease until its TTL: under-admission only).
func (r *Router) releaseLocal(ctx context.Context, v *view, key, id string, o Outcome, latency time.Duration) peermsg.LeaseAnswer {
	now := r.cfg.Clock.Now()
	ls, ok := r.slots.Release(id, now)
	if !ok && (v.minority || r.waitLeases(ctx, v, key)) { // a minority's "not found" proves nothing
		return peermsg.LeaseAnswer{Status: peermsg.LeaseUnavailable, Owner: r.cfg.Self}
	}
	if !ok { // released before, expired, or never was: what the key holds
		ans := peermsg.LeaseAnswer{Status: peermsg.LeaseNotFound, Owner: r.cfg.Self}
		if held := r.slots.Held(key, now); len(held) > 0 {
			ans.InFlight, ans.Limit = int64(len(held)), held[0].Limit.Count()
		}
		return ans
	}
	r.repl.leaseChanged(ls.Key, ls.Limit)
	r.repl.startRound() // the release stands: its round is not awaited
	if f := r.cfg.OnRelease; f != nil {
		f(ls.Key, ls.Limit, o, latency)
	}
	return peermsg.LeaseAnswer{Status: peermsg.LeaseOK, InFlight: r.slots.InFlight(ls.Key, r.cfg.Clock.Now()),
		Limit: ls.Limit.Count(), Owner: r.cfg.Self}
}

// AcquireFor implements peer.Leaser: an acquire another node sent. A
// receiver whose ring names another owner redirects it, unless final.
func (r *Router) AcquireFor(ctx context.Context, from string, q peermsg.AcquireRequest) peermsg.LeaseAnswer {
	a := Acquire{Key: q.Key, Limit: q.Limit, Mode: bucket.FailClosed, TTL: q.TTL, RequestID: q.RequestID,
		Adaptive: q.Adaptive, AdaptiveScope: q.AdaptiveScope, MaxTTL: q.MaxTTL}
	if r.validAcquire(&a) != nil {
		return peermsg.LeaseAnswer{Status: peermsg.LeaseUnavailable, Owner: r.cfg.Self}
	}
	v := r.awaitMember(ctx, from)
	if ans, elsewhere := r.notOwner(v, q.Key, q.Final); elsewhere {
		return ans
	}
	return r.acquireLocal(ctx, v, &q)
}

// notOwner answers an operation forwarded here for key when this node's
// ring names another owner: a redirect to it, or, for a last hop (final),
// unavailable, since only the key's owner, whose replication rounds carry
// the key, may change its leases (nothing stands in for it).
func (r *Router) notOwner(v *view, key string, final bool) (peermsg.LeaseAnswer, bool) {
	owner := ownerIn(v.ring, r.cfg.Self, key)
	switch {
	case owner == r.cfg.Self:
		return peermsg.LeaseAnswer{}, false
	case final:
		return peermsg.LeaseAnswer{Status: peermsg.LeaseUnavailable, Owner: r.cfg.Self}, true
	}
	r.m.redirects.Inc()
	return peermsg.LeaseAnswer{Status: peermsg.LeaseRedirect, Redirect: owner}, true
}

// RenewFor implements peer.Leaser: a renew another node sent.
func (r *Router) RenewFor(ctx context.Context, from, id string, ttl time.Duration, final bool) peermsg.LeaseAnswer {
	key, err := bucket.ParseLeaseID(id)
	if err != nil || bucket.CheckLeaseTTL("ttl", ttl) != nil {
		return peermsg.LeaseAnswer{Status: peermsg.LeaseNotFound, Owner: r.cfg.Self}
	}
	v := r.awaitMember(ctx, from)
	if ans, elsewhere := r.notOwner(v, key, final); elsewhere {
		return ans
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
	if ans, elsewhere := r.notOwner(v, key, final); elsewhere {
		return ans
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
