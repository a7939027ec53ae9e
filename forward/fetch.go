package forward

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/clock"
	"github.com/ringlimit/ringlimit/internal/peermsg"
)

// A fetch: a key's new owner, holding no copy of it, asks the previous
// owner for its state before it decides the key's first check.
//
// The previous owner counts what it answers as shared with this node
// (Router.Lookup): its later push carries only what it spends after. An
// answer this node stopped waiting for would take that spend with it, so
// a fetch is never abandoned: it runs in the background until it answers
// or fails under its own peer deadline, and its answer is merged whenever
// it comes. The checks of the key wait on it as long as their own
// deadlines allow. When the previous owner is still a member (a join, or
// any change that moved the key between two live members), a check that
// cannot wait longer is answered in its failure mode, and the store's copy
// stays untouched until the answer is merged: deciding on a full bucket
// meanwhile would admit the key's whole limit again.

// fetchResult is how a fetch ended for the check that waited on it.
type fetchResult int

const (
	fetchPending  fetchResult = iota // still running when the check stopped waiting
	fetchAnswered                    // the previous owner answered (with a state or none)
	fetchFailed                      // it could not be reached, or did not answer in time
)

// fetchCall is one fetch in flight; the checks of its key wait on done.
type fetchCall struct {
	done   chan struct{}
	result fetchResult // set before done is closed
	// rejoin, for a fetch of a node back from a minority, has the answer
	// charged on this node's copy instead of merged (adoptFetched).
	rejoin *rejoin
}

// fetchKey names a fetch: a key, from one previous owner.
type fetchKey struct{ prev, key string }

// fetchMarks is what the fetches of one view learned.
type fetchMarks struct {
	// down is the previous owners, no longer members, that a fetch could
	// not reach: later checks of this view do not wait on them again.
	down sync.Map
	// unsure is the keys whose fetch from a member failed: the member may
	// have answered, counting its answer as shared, and its push of a later
	// spend would then give the key a copy without it. Such a key is
	// fetched again before it is decided, even once a copy is held.
	unsure  sync.Map
	nUnsure atomic.Int64
}

func (f *fetchMarks) isUnsure(key string) bool {
	if f.nUnsure.Load() == 0 {
		return false
	}
	_, ok := f.unsure.Load(key)
	return ok
}

func (f *fetchMarks) markUnsure(key string) {
	if _, loaded := f.unsure.LoadOrStore(key, true); !loaded {
		f.nUnsure.Add(1)
	}
}

func (f *fetchMarks) clearUnsure(key string) {
	if _, ok := f.unsure.LoadAndDelete(key); ok {
		f.nUnsure.Add(-1)
	}
}

// mustRecover reports whether a key this node owns may have state
// elsewhere that its copy lacks. Only after a ring change, while a member
// is down, or after a return from a minority (rejoin.go) can it: no lookup
// otherwise.
func (r *Router) mustRecover(v *view, key string, now clock.Instant) bool {
	if (v.inGrace(now, r.cfg.Grace) || len(v.down) > 0) && (!r.cfg.Store.Has(key) || v.fetches.isUnsure(key)) {
		return true
	}
	rj := r.liveRejoin(now) // back from a minority: see rejoin.go
	return rj != nil && rj.unsure(key)
}

// recover gives this node a copy of a key it now owns and holds none of,
// waiting for the previous owner's state (fetchWait). It reports false
// when the key must not be decided yet: its state is on a previous owner
// that is still a member, and has not come.
func (r *Router) recover(ctx context.Context, v *view, key string, l *bucket.Limit, now clock.Instant, forwarded bool) bool {
	return r.recoverWithin(ctx, v, key, l, now, forwarded, 0)
}

// fetchWait is how long a check waits for its key's state from prev, its
// previous owner: up to the whole peer deadline (the fetch's own), and at
// most half of what its context leaves, so that a forwarded check's answer
// still reaches the entry node in time. A forwarded check whose previous
// owner is no member waits only a quarter of the peer deadline: the key is
// then decided on its replica here, and the entry node must not give up on
// this node meanwhile.
func (r *Router) fetchWait(ctx context.Context, v *view, prev string, forwarded bool) time.Duration {
	least := r.cfg.PeerTimeout / 4
	if forwarded && !v.has(prev) {
		return least
	}
	wait := r.cfg.PeerTimeout
	if dl, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(dl)/2)
	}
	return max(wait, least)
}

// recoverWithin is recover waiting up to wait for the previous owner (0:
// fetchWait's).
func (r *Router) recoverWithin(ctx context.Context, v *view, key string, l *bucket.Limit, now clock.Instant, forwarded bool, wait time.Duration) (decided bool) {
	prev := prevOwner(v, r.cfg.Self, key)
	fetching, rejoining := v.inGrace(now, r.cfg.Grace), false
	rj := r.liveRejoin(now)
	if rj != nil {
		// Once the key may be decided, the return from the minority has
		// nothing more to bring it.
		defer func() {
			if decided {
				rj.markSure(key)
			}
		}()
		if rj.unsure(key) && rj.gave(v, prev, fetching) {
			// The member that decided it during the cut has its state.
			if prev = rj.prev(v, r.cfg.Self, key); prev == r.cfg.Self {
				return true
			}
			fetching, rejoining = true, true
		}
	}
	if prev == "" {
		return true
	}
	if v.isDown(prev) {
		if st, ok := r.shared.state(prev, key, now); ok {
			if r.cfg.Store.SetWindow(key, &st.Limit, now, st.Used, st.Window) != nil {
				return true // no room: the replica stays, and answers for the key (see exhausted)
			}
			r.shared.forget(prev, key)
			r.m.promoted.Inc()
			return true
		}
	}
	if fetching {
		if wait == 0 {
			wait = r.fetchWait(ctx, v, prev, forwarded)
		}
		var charge *rejoin // the answer is added to the copy, not merged
		if rejoining {
			charge = rj
		}
		switch r.handoff.fetch(ctx, v, prev, key, l, wait, charge) {
		case fetchAnswered:
			return true
		case fetchPending, fetchFailed:
			if v.has(prev) && !v.isDown(prev) {
				return false // a member holds the key's state: it comes with the fetch or the push
			}
		}
	}
	// The previous owner did not answer (it has left or is cut off): its
	// replica, if this node holds one, is the best state there is.
	if st, ok := r.shared.state(prev, key, now); ok {
		r.cfg.Store.MergeWindow(key, &st.Limit, now, st.Used, st.Window)
	}
	return true
}

// prevOwner returns the member key belonged to before the last ring
// change, or "" when that was this node (or nobody). For a node that just
// joined, that is where the ring without this node puts the key.
func prevOwner(v *view, self, key string) string {
	prev := ownerIn(v.prev, self, key)
	if v.prev == nil || prev == self {
		if prev = ownerIn(v.others, self, key); v.others == nil || prev == self {
			return ""
		}
	}
	return prev
}

// fetch asks prev, key's previous owner, for its state, merging the
// answer when it comes, and waits for it up to wait (or until ctx ends).
// The checks of a key share one fetch from prev.
func (h *handoff) fetch(ctx context.Context, v *view, prev, key string, l *bucket.Limit, wait time.Duration, rj *rejoin) fetchResult {
	if _, down := v.fetches.down.Load(prev); down {
		h.m.fetches[fetchUnreachable].Inc()
		return fetchFailed
	}
	// The call outlives the check, whose key may point into a buffer that
	// is reused for the next message: the call and its map entry keep
	// their own copy.
	fk := fetchKey{prev, strings.Clone(key)}
	call := &fetchCall{done: make(chan struct{}), rejoin: rj}
	if c, loaded := h.calls.LoadOrStore(fk, call); loaded {
		call = c.(*fetchCall)
	} else {
		lim := *l
		if !h.background(func(ctx context.Context) { h.runFetch(ctx, v, fk, &lim, call) }) {
			h.calls.Delete(fk)
			return fetchFailed // the router is closing
		}
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-call.done:
		return call.result
	case <-timer.C:
	case <-ctx.Done():
	}
	return fetchPending
}

// runFetch makes call: one Fetch under the peer deadline, its answer
// merged into this node's copy of the key.
func (h *handoff) runFetch(ctx context.Context, v *view, fk fetchKey, l *bucket.Limit, call *fetchCall) {
	defer func() {
		h.calls.Delete(fk)
		close(call.done)
	}()
	prev, key := fk.prev, fk.key
	ctx, cancel := context.WithTimeout(ctx, h.cfg.PeerTimeout)
	defer cancel()
	st, found, err := h.cfg.Peers.Fetch(ctx, prev, key, l)
	now := h.cfg.Clock.Now()
	switch {
	case err != nil:
		h.m.fetches[fetchUnreachable].Inc()
		if v.has(prev) {
			v.fetches.markUnsure(key)
		} else {
			// It left or is cut off: do not wait on it again for this view.
			v.fetches.down.Store(prev, true)
		}
		call.result = fetchFailed
		return
	case !found:
		h.m.fetches[fetchMissing].Inc()
	default:
		h.m.fetches[fetchFound].Inc()
		// Not one from before a reset of the key.
		if h.admit == nil || h.admit(&st, now) {
			importRecords(h.resv, &st, now)
			h.adoptFetched(prev, key, &st, now, call.rejoin)
			if ownerIn(h.ring(), h.cfg.Self, key) != h.cfg.Self {
				// The ring moved the key on meanwhile: the next pass pushes it.
				h.mayHoldForeign()
				h.trigger()
			}
		}
	}
	v.fetches.clearUnsure(key)
	call.result = fetchAnswered
}

// adoptFetched merges the state prev answered a fetch of key with into
// this node's copy. prev answered with st.Used: its later push is only what it
// spends after this, and a push of its whole copy crossing this fetch is
// charged only beyond it (Router.chargeHanded), so the copy and what the
// two share change together. The copy holds no spend of this node's own
// (nothing decides a key while its fetch from a member runs), or, when
// the previous owner has left, the merge never lowers it.
//
// With rj (this node is back from a minority), the answer is charged on
// the copy instead: this node decided its own keys during the cut, and
// prev, which decided them on the other side, answers with what it spent
// there on top of its replica of this node's copy. The sum may count that
// replica twice (admitting less, never more), as a push of prev's whole
// copy would; a push that came first (chargeHanded) is not added to again.
func (h *handoff) adoptFetched(prev, key string, st *peermsg.State, now clock.Instant, rj *rejoin) {
	h.shared.copies.Lock()
	defer h.shared.copies.Unlock()
	switch {
	case rj == nil:
		h.cfg.Store.MergeWindow(key, &st.Limit, now, st.Used, st.Window)
	case rj.unsure(key):
		h.cfg.Store.Charge(key, &st.Limit, now, st.Used)
		rj.markSure(key)
	}
	h.shared.set(prev, key, &st.Limit, now, st.Used, st.Window)
}
