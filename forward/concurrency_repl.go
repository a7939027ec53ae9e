package forward

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/clock"
	"github.com/ringlimit/ringlimit/internal/peermsg"
)

// Lease sets travel with replication rounds and handoffs: a key whose
// leases changed on its owner is marked (leaseChanged), and the next round
// carries its absolute set (peermsg.State with LeaseSet) to its
// successors, which replace theirs with it. A resync after a ring change
// sends every owned key's set. A key this node owned before a ring change
// and another member owns now is handed to it once per view, merged there
// by id.

// leaseMarks are the keys whose leases changed, with their limit (a set
// emptied by releases still needs one to travel).
type leaseMarks struct {
	mu   sync.Mutex
	keys map[string]bucket.Limit
}

func (d *leaseMarks) add(key string, l bucket.Limit) {
	d.mu.Lock()
	if d.keys == nil {
		d.keys = map[string]bucket.Limit{}
	}
	if _, ok := d.keys[key]; !ok {
		key = strings.Clone(key)
	}
	d.keys[key] = l
	d.mu.Unlock()
}

func (d *leaseMarks) take() map[string]bucket.Limit {
	d.mu.Lock()
	defer d.mu.Unlock()
	k := d.keys
	d.keys = nil
	return k
}

func (d *leaseMarks) any() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.keys) > 0
}

// leaseChanged marks key's lease set for the next round.
func (p *replicator) leaseChanged(key string, l bucket.Limit) {
	if p.on() {
		p.leaseKeys.add(key, l)
	}
}

// startRound asks for a round now without waiting for it.
func (p *replicator) startRound() {
	if !p.on() {
		return
	}
	select {
	case p.kick <- struct{}{}:
	default: // a round is asked for already
	}
}

// leaseState is key's lease set at now as a state.
func leaseState(slots *bucket.Leases, key string, l bucket.Limit, now clock.Instant) peermsg.State {
	held := slots.Held(key, now)
	st := peermsg.State{Key: key, Limit: l, LeaseSet: true, Leases: make([]peermsg.Lease, len(held))}
	for i, ls := range held {
		st.Leases[i] = peermsg.Lease{ID: ls.ID, RequestID: ls.RequestID, TTL: ls.Expires.Sub(now), MaxTTL: ls.MaxTTL}
		st.Limit = ls.Limit
	}
	return st
}

// addLeases appends to out the lease sets of the keys marked (all: of
// every key this node owns) to their successors. A key with no live
// successor makes the round fail, and stays marked: its changes are not
// acknowledged.
func (p *replicator) addLeases(v *view, out *outbox, all bool) {
	if p.slots == nil || v.ring == nil || v.ring.Len() < 2 {
		return
	}
	keys := p.leaseKeys.take()
	if all {
		now := p.clock.Now()
		for _, key := range p.slots.Keys() {
			if _, ok := keys[key]; !ok {
				if held := p.slots.Held(key, now); len(held) > 0 {
					if keys == nil {
						keys = map[string]bucket.Limit{}
					}
					keys[key] = held[0].Limit
				}
			}
		}
	}
	now := p.clock.Now()
	var buf [4]string
	for key, l := range keys {
		if ownerIn(v.ring, p.self, key) != p.self {
			continue
		}
		st := leaseState(p.slots, key, l, now)
		copies := 0
		for _, succ := range v.ring.AppendSuccessors(buf[:0], key, p.cfg.Factor) {
			if succ != p.self && !v.isDown(succ) {
				out.states[succ] = append(out.states[succ], st)
				out.unacked[succ] = append(out.unacked[succ], 0)
				copies++
			}
		}
		if copies == 0 {
			// No successor took it: the round fails, and the next one,
			// which a change marked just before this round began may
			// await, carries it again.
			out.leaseOrphans = true
			p.leaseKeys.add(key, l)
		}
	}
}

// leaseLost marks again the lease sets of states a successor did not
// acknowledge.
func (p *replicator) leaseLost(states []peermsg.State) {
	for i := range states {
		if states[i].LeaseSet {
			p.leaseKeys.add(states[i].Key, states[i].Limit)
		}
	}
}

// importLeases takes the lease sets states carry: a replica's replaces
// this node's copy, a handoff's is merged by id (and replicated on, when
// this node owns the key).
func (r *Router) importLeases(from string, states []peermsg.State, now clock.Instant, replace bool) {
	v := r.view.Load()
	from = strings.Clone(from) // one copy, named by every lease it brings (Lease.From)
	for i := range states {
		s := &states[i]
		if !s.LeaseSet || s.Limit.Algorithm() != bucket.Concurrency {
			continue
		}
		set := make([]bucket.Lease, 0, len(s.Leases))
		for _, m := range s.Leases {
			k, err := bucket.ParseLeaseID(m.ID)
			if err != nil || k != s.Key || m.TTL <= 0 || m.TTL > bucket.MaxLeaseTTL {
				continue // hostile or broken: a lease must name its key
			}
			set = append(set, bucket.Lease{ID: m.ID, Key: s.Key, Limit: s.Limit, Expires: now.Add(m.TTL), RequestID: m.RequestID,
				MaxTTL: leaseMaxTTL(m.MaxTTL), From: from})
		}
		if replace && ownerIn(v.ring, r.cfg.Self, s.Key) != r.cfg.Self {
			r.slots.Replace(s.Key, set, now)
			continue
		}
		// A replica of a key this node owns comes from a member whose ring
		// named itself the owner (one rejoining after a partition): its set
		// may lack leases this node granted, so it is merged, never put in
		// their place (a lease too many under-admits until its TTL).
		if replace {
			r.slots.Merge(s.Key, set, now)
			continue
		}
		r.slots.Merge(s.Key, set, now)
		if ownerIn(v.ring, r.cfg.Self, s.Key) == r.cfg.Self {
			r.leasesReceived.Store(strings.Clone(s.Key), received{at: now, version: s.RingVersion})
			r.leasesArrived.fire()
			r.repl.leaseChanged(s.Key, s.Limit)
		}
	}
}

// A replica replaces the successor's set of a key with the owner's, which
// drops the leases the owner does not name. Those the owner released went
// with its replicas; but one this node granted while its ring gave it the
// key, or one another member's replica or handoff brought, may be one the
// owner never counted: an owner whose ring never changed while the others
// declared it dead and decided its keys (a stalled process, on resuming,
// decides before it learns it was declared dead) grants from a set that
// lacks them. So a replica whose set lacks such live leases
// (bucket.Leases.Unknown) is refused, which undoes what it acknowledges
// on the owner; this node keeps both sets and hands their union to the
// owner (pushUnknownLeases), whose next replica then names them.

// unknownLeases returns the keys, among the lease sets in states (a replica
// from from) of keys this node does not own, of which this node holds live
// leases that from's set lacks and from did not bring.
func (r *Router) unknownLeases(from string, states []peermsg.State, now clock.Instant) []string {
	if r.slots.Empty() {
		return nil
	}
	v := r.view.Load()
	var keys []string
	var set []bucket.Lease
	for i := range states {
		s := &states[i]
		if !s.LeaseSet || s.Limit.Algorithm() != bucket.Concurrency || ownerIn(v.ring, r.cfg.Self, s.Key) == r.cfg.Self {
			continue
		}
		set = set[:0]
		for _, m := range s.Leases {
			set = append(set, bucket.Lease{ID: m.ID})
		}
		if r.slots.Unknown(s.Key, set, from, now) > 0 {
			keys = append(keys, s.Key)
		}
	}
	return keys
}

// pushUnknownLeases hands from the lease sets of keys (after a replica
// from it was refused for them), one push to a member at a time; a
// refusal while one runs is answered by the next.
func (r *Router) pushUnknownLeases(from string, keys []string) {
	if _, busy := r.unknownPushes.LoadOrStore(from, true); busy {
		return
	}
	from = strings.Clone(from)
	keys = slices.Clone(keys)
	for i := range keys {
		keys[i] = strings.Clone(keys[i])
	}
	if !r.handoff.background(func(ctx context.Context) {
		defer r.unknownPushes.Delete(from)
		now := r.cfg.Clock.Now()
		version := r.view.Load().version()
		var states []peermsg.State
		for _, key := range keys {
			if held := r.slots.Held(key, now); len(held) > 0 {
				st := leaseState(r.slots, key, held[0].Limit, now)
				st.RingVersion = version
				states = append(states, st)
			}
		}
		if len(states) == 0 {
			return
		}
		ctx, cancel := context.WithTimeout(ctx, r.cfg.PeerTimeout)
		defer cancel()
		if err := r.cfg.Peers.Handoff(ctx, from, states); err != nil {
			r.log.Warn("lease sets the owner lacks not handed over", "to", from, "keys", len(states), "err", err)
		}
	}) {
		r.unknownPushes.Delete(from)
	}
}

// leaseHandoffLoop runs handoffLeases after every view change, and again
// a grace period after a pass that left sets unpushed. It runs apart from
// the key states' handoff, which it never holds up.
func (r *Router) leaseHandoffLoop(ctx context.Context) {
	for {
		changed := *r.viewChanged.Load()
		var retry <-chan time.Time
		var timer clock.Timer
		if r.handoffLeases(ctx) > 0 {
			timer = r.cfg.Clock.NewTimer(r.cfg.Grace)
			retry = timer.C()
		}
		select {
		case <-ctx.Done():
		case <-changed:
		case <-retry:
		}
		if timer != nil {
			timer.Stop()
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// handoffLeases hands the lease set of every key this node owned before
// the last ring change, and another member owns now, to that member, once
// per view. It returns how many sets it failed to push (a later pass
// retries). A new owner that needs a set before it arrives fetches it
// (fetchLeases).
func (r *Router) handoffLeases(ctx context.Context) (failed int) {
	v := r.view.Load()
	if v.ring == nil || v.prev == nil || r.slots.Empty() {
		return 0
	}
	now := r.cfg.Clock.Now()
	out := map[string][]peermsg.State{}
	for _, key := range r.slots.Keys() {
		owner := ownerIn(v.ring, r.cfg.Self, key)
		if owner == r.cfg.Self || ownerIn(v.prev, r.cfg.Self, key) != r.cfg.Self {
			continue
		}
		if at, ok := r.leasesPushed.Load(key); ok && at.(uint64) == v.version() {
			continue
		}
		held := r.slots.Held(key, now)
		if len(held) == 0 {
			continue
		}
		st := leaseState(r.slots, key, held[0].Limit, now)
		st.RingVersion = v.version()
		st.Adaptive = r.adapt.state(key, now)
		out[owner] = append(out[owner], st)
	}
	for owner, states := range out {
		for off := 0; off < len(states); off += handoffChunk {
			chunk := states[off:min(off+handoffChunk, len(states))]
			if err := r.cfg.Peers.Handoff(ctx, owner, chunk); err != nil {
				r.log.Warn("lease handoff failed", "to", owner, "keys", len(chunk), "err", err)
				failed += len(chunk)
				continue
			}
			for i := range chunk {
				r.leasesPushed.Store(strings.Clone(chunk[i].Key), v.version())
			}
		}
	}
	return failed
}

// fetchLeases asks prev, the previous owner of key, for its lease set and
// merges it; it reports whether prev answered. A prev that holds nothing
// of key (a policy layer's key, which has no namespace telling that it is
// a concurrency key, with no live lease there) answered an empty set.
func (r *Router) fetchLeases(ctx context.Context, v *view, prev, key string) bool {
	ctx, cancel := context.WithTimeout(ctx, max(r.cfg.PeerTimeout/4, time.Millisecond))
	defer cancel()
	st, ok, err := r.cfg.Peers.Fetch(ctx, prev, key, &fetchLimit)
	if err == nil && !ok {
		st = peermsg.State{Key: key, Limit: fetchLimit, LeaseSet: true}
	}
	if err != nil || !st.LeaseSet || st.Key != key {
		return false
	}
	st.RingVersion = v.version()
	r.importLeases(prev, []peermsg.State{st}, r.cfg.Clock.Now(), false)
	return true
}

// fetchLimit is the limit a fetch of a concurrency key names (the answer
// carries the key's own).
var fetchLimit = bucket.MustLimit(bucket.Concurrency, 1, 0, 0)

// lookupLeases is a fetch's answer for a concurrency key: its lease set
// here, possibly empty; or, while this node's own ring still gives it the
// key, no set at all (LeaseSet false). Its ring has not yet seen the
// change that moved the key to from, so it may still grant leases after
// answering: handing the set over now would let both count from it. The
// asker waits instead for the set this node hands off once its ring
// moves the key, answering unavailable until then.
func (r *Router) lookupLeases(from, key string) peermsg.State {
	if from != r.cfg.Self && ownerIn(r.view.Load().ring, r.cfg.Self, key) == r.cfg.Self {
		return peermsg.State{Key: key}
	}
	now := r.cfg.Clock.Now()
	l := fetchLimit
	if held := r.slots.Held(key, now); len(held) > 0 {
		l = held[0].Limit
	}
	return leaseState(r.slots, key, l, now)
}

// leaseMaxTTL is a lease's renewal cap as a peer sent it: one out of
// range (hostile or broken) is bucket.MaxLeaseTTL's (0).
func leaseMaxTTL(d time.Duration) time.Duration {
	if d < bucket.MinLeaseTTL || d > bucket.MaxLeaseTTL { // as CheckLeaseTTL, without building its error for every lease
		return 0
	}
	return d
}
