package forward

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/clock"
	"github.com/ringlimit/ringlimit/internal/peermsg"
)

// A reset puts a key back to full. The key's owner decides it: its store
// forgets the key and records a tombstone (bucket.Store.ResetAt) at its
// clock, then it tells every other live member synchronously (Peer.Reset
// with that instant): each drops its copies of the key (stand-in copy,
// replicas, failure-mode share, the pre-limiter's and the refusal cache's
// memory of it), drops any hot-key lease it holds on the key (the lease's
// tokens were spent before the reset: they are not given back, and not
// admitted after it), and records the same tombstone. Every state that
// then moves between nodes (replicate, handoff, fetch) carries its
// sender's tombstone, and a receiver refuses a state older than its own
// (bucket.Store.Admit): a late replica or handoff does not bring the
// spend back. A member that did not acknowledge within the peer deadline
// is named in ResetResult.Unconfirmed; its copies are dropped when a
// later state from the owner (which carries the tombstone) reaches it.

// Resetter sends resets to other members (peer.Pool).
type Resetter interface {
	// Reset tells name that this node reset key at resetAt (its clock), or,
	// with resetAt 0, asks name, the key's owner, to reset it.
	Reset(ctx context.Context, name, key string, l *bucket.Limit, resetAt int64) (peermsg.ResetAnswer, error)
}

// ResetResult is the answer to a reset.
type ResetResult struct {
	// Previous is what a check of cost 1 found remaining before the reset.
	Previous int64
	// Owner is the node that reset the key (its owner).
	Owner string
	// Unconfirmed names the members that did not acknowledge dropping
	// their copies before their peer deadline.
	Unconfirmed []string
}

// Reset puts key back to full under l on its owner and every live member
// (see above) and returns what it had left. It returns an error wrapping
// ErrInvalid for a bad key or limit, and one wrapping ErrUnavailable,
// having reset nothing, when the owner cannot be reached.
func (r *Router) Reset(ctx context.Context, key string, l bucket.Limit) (ResetResult, error) {
	if err := r.cfg.Store.CheckKey(key); err != nil {
		return ResetResult{}, fmt.Errorf("%w: key: %w", ErrInvalid, err)
	}
	if !l.Valid() {
		return ResetResult{}, fmt.Errorf("%w: limit: missing", ErrInvalid)
	}
	v := r.entryView(ctx)
	if v.noOwner() {
		return ResetResult{}, fmt.Errorf("%w: no owner for %q (this node is in a minority)", ErrUnavailable, key)
	}
	owner := ownerIn(v.ring, r.cfg.Self, key)
	for hop := 0; owner != r.cfg.Self; hop++ {
		if hop == 2 || v.isDown(owner) {
			return ResetResult{}, fmt.Errorf("%w: %s", ErrUnavailable, owner)
		}
		a, err := r.cfg.Peers.Reset(ctx, owner, key, &l, 0)
		if err != nil {
			if ctx.Err() != nil {
				return ResetResult{}, ctx.Err()
			}
			return ResetResult{}, fmt.Errorf("%w: %s: %w", ErrUnavailable, owner, err)
		}
		if a.Redirect == "" {
			return ResetResult{Previous: a.Previous, Owner: a.Owner, Unconfirmed: a.Unconfirmed}, nil
		}
		owner = a.Redirect
	}
	return r.resetOwned(ctx, v, key, l), nil
}

// resetOwned resets a key this node owns and tells the other live members.
func (r *Router) resetOwned(ctx context.Context, v *view, key string, l bucket.Limit) ResetResult {
	now := r.cfg.Clock.Now()
	// As for a check (decideLocal): a key this node has just come to own
	// may have its state on the previous owner; without it the reset
	// would answer a full bucket as the previous remaining. A reset is no
	// check on a request's path: it waits the whole peer deadline for it.
	// A state that has still not come is refused when it does (admit: it
	// predates the reset).
	if r.mustRecover(v, key, now) {
		r.recoverWithin(ctx, v, key, &l, now, false, r.cfg.PeerTimeout)
	}
	at := max(int64(now), r.cfg.Store.Tombstone(key, now)+1) // later than any tombstone held
	prev, _, _ := r.cfg.Store.ResetAt(key, &l, now, at)
	r.tombs.Store(true)
	r.dropCopies(key, &l, now)
	res := ResetResult{Previous: prev, Owner: r.cfg.Self}
	var members []string
	if v.ring != nil {
		for _, m := range v.ring.Members() {
			if m != r.cfg.Self && !v.isDown(m) {
				members = append(members, m)
			}
		}
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, m := range members {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, r.cfg.PeerTimeout)
			defer cancel()
			if _, err := r.cfg.Peers.Reset(ctx, m, key, &l, at); err != nil {
				r.log.Warn("reset not confirmed", "member", m, "key", key, "err", err)
				mu.Lock()
				res.Unconfirmed = append(res.Unconfirmed, m)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	slices.Sort(res.Unconfirmed)
	return res
}

// dropCopies forgets everything this node keeps about key besides its own
// store: replicas and what it shares with each member, its failure-mode
// share, the pre-limiter's window and rejection, the refusal cache, and a
// stand-in record. It returns the lease tokens it dropped.
func (r *Router) dropCopies(key string, l *bucket.Limit, now clock.Instant) int64 {
	for _, s := range *r.shared.stores.Load() {
		s.Delete(key)
	}
	r.local.Delete(key)
	r.pre.forget(key)
	r.known.forget(key)
	r.standing.Delete(key)
	return r.leases.drop(key)
}

// ResetFrom implements peer.StateStore: the peer side of a reset. A reset
// at or before the tombstone this node holds for key changes nothing: it
// was applied already (a member tells its tombstones again to a member
// that joins, tellJoined), and what the key holds now came after it.
func (r *Router) ResetFrom(ctx context.Context, from, key string, l bucket.Limit, resetAt int64) peermsg.ResetAnswer {
	now := r.cfg.Clock.Now()
	if resetAt == 0 { // the sender asks this node, the key's owner, to reset it
		v := r.view.Load()
		if owner := ownerIn(v.ring, r.cfg.Self, key); owner != r.cfg.Self && v.has(owner) {
			return peermsg.ResetAnswer{Redirect: owner}
		}
		res := r.resetOwned(ctx, v, key, l)
		return peermsg.ResetAnswer{Previous: res.Previous, Owner: res.Owner, Unconfirmed: res.Unconfirmed}
	}
	if resetAt <= r.cfg.Store.Tombstone(key, now) {
		return peermsg.ResetAnswer{} // this reset, or a later one, is already here (a member tells it again: tellJoined)
	}
	r.cfg.Store.ResetAt(key, &l, now, resetAt)
	r.tombs.Store(true)
	n := r.dropCopies(key, &l, now)
	r.m.resetsReceived.Inc()
	return peermsg.ResetAnswer{LeaseDropped: n}
}

// admit reports whether a state of key from another member, carrying its
// sender's tombstone resetAt, may be merged (see bucket.Store.Admit); a
// state that knows of a reset this node missed first drops this node's
// copies of the key. A refused state is counted.
func (r *Router) admit(s *peermsg.State, now clock.Instant) bool {
	if s.ResetAt == 0 && !r.tombs.Load() {
		return true
	}
	ok, reset := r.cfg.Store.Admit(s.Key, &s.Limit, now, s.ResetAt)
	if !ok {
		r.m.statesBeforeReset.Inc()
		return false
	}
	if reset {
		r.tombs.Store(true)
		r.dropCopies(s.Key, &s.Limit, now)
	}
	return true
}

// hasResetAt reports whether a state of states carries a tombstone.
func hasResetAt(states []peermsg.State) bool {
	for i := range states {
		if states[i].ResetAt != 0 {
			return true
		}
	}
	return false
}

// admitAll returns the states admit lets through, in order (in place);
// from, which sent them, is told the reset of each it refused (tell).
func (r *Router) admitAll(from string, states []peermsg.State, now clock.Instant) []peermsg.State {
	kept := states[:0]
	var refused []bucket.Tomb
	for i := range states {
		if r.admit(&states[i], now) {
			kept = append(kept, states[i])
		} else {
			refused = r.appendRefused(refused, &states[i], now)
		}
	}
	if len(refused) > 0 {
		r.tell([]string{from}, refused)
	}
	return kept
}

// appendRefused appends to tombs the tombstone that refused s (its key
// copied: s's may point into a buffer that is reused).
func (r *Router) appendRefused(tombs []bucket.Tomb, s *peermsg.State, now clock.Instant) []bucket.Tomb {
	return append(tombs, bucket.Tomb{Key: strings.Clone(s.Key), Limit: s.Limit, At: r.cfg.Store.Tombstone(s.Key, now)})
}
