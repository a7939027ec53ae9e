package forward

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	peerv1 "github.com/ringlimit/ringlimit/proto/peerv1"
)

// handoffChunk is the most bucket states one Handoff RPC carries.
const handoffChunk = 512

// handoff moves the state of keys this node no longer owns to their owners.
// A pass runs after every ring change; while it leaves work behind (keys
// pushed but not yet deleted, pushes that failed) another pass follows after
// Grace. Passes are serialised by mu.
type handoff struct {
	r    *Router
	wake chan struct{}

	mu     sync.Mutex       // one pass at a time
	pushed map[string]int64 // key → Clock time it was pushed; guarded by mu
}

func newHandoff(r *Router) *handoff {
	return &handoff{r: r, wake: make(chan struct{}, 1), pushed: map[string]int64{}}
}

func (h *handoff) trigger() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

func (h *handoff) loop(ctx context.Context) {
	var again <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.wake:
		case <-again:
		}
		again = nil
		if pending, _ := h.pass(ctx); pending {
			again = time.After(h.r.cfg.Grace)
		}
	}
}

// pass pushes every key the current ring gives to another node, deletes
// the keys pushed at least Grace ago that are still not ours, and reports
// whether work is left for a later pass and how many keys it failed to push.
func (h *handoff) pass(ctx context.Context) (pending bool, failed int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.r
	v := r.view.Load()
	if v.ring == nil {
		return false, 0
	}
	now := r.cfg.Clock.Now()
	out := map[string][]*peerv1.BucketState{}
	var stale []string // pushed at least Grace ago and pushed again now: delete after
	flush := func(owner string) {
		states := out[owner]
		delete(out, owner)
		if err := h.push(ctx, v, owner, states); err != nil {
			r.log.Warn("handoff failed", "to", owner, "keys", len(states), "err", err)
			pending = true
			failed += len(states)
			return
		}
		for _, s := range states {
			at, ok := h.pushed[s.Key]
			switch {
			case !ok:
				h.pushed[s.Key] = now
			case now-at >= int64(r.cfg.Grace):
				stale = append(stale, s.Key)
			}
		}
		pending = true // pushed keys are deleted by a later pass
	}
	r.cfg.Store.Range(now, func(batch []bucket.Snapshot) bool {
		for i := range batch {
			s := &batch[i]
			owner := r.ownerIn(v, s.Key)
			if owner == r.cfg.Self {
				delete(h.pushed, s.Key)
				continue
			}
			// Push every key we hold but do not own; one that was pushed at
			// least Grace ago is pushed a last time (what stale peers spent
			// on our copy meanwhile) and then deleted.
			w := limitToWire(&s.Limit)
			out[owner] = append(out[owner], &peerv1.BucketState{Key: s.Key, Limit: &w, Used: s.Used})
			if len(out[owner]) >= handoffChunk {
				flush(owner)
			}
		}
		return ctx.Err() == nil
	})
	for owner := range out {
		flush(owner)
	}
	// Delete what was handed off for good, unless the ring gave it back to
	// us meanwhile.
	cur := r.view.Load()
	for _, k := range stale {
		if r.ownerIn(cur, k) != r.cfg.Self {
			r.cfg.Store.Delete(k)
		}
		delete(h.pushed, k)
	}
	for k := range h.pushed {
		if !r.cfg.Store.Has(k) {
			delete(h.pushed, k)
		}
	}
	return pending || len(h.pushed) > 0, failed
}

// push sends states to owner in one Handoff RPC.
func (h *handoff) push(ctx context.Context, v *view, owner string, states []*peerv1.BucketState) error {
	p := v.peers[owner]
	if p == nil {
		return errors.New("no connection")
	}
	ctx, cancel := context.WithTimeout(ctx, h.r.cfg.PeerTimeout*4)
	defer cancel()
	_, err := p.client.Handoff(ctx, &peerv1.HandoffRequest{From: h.r.cfg.Self, Buckets: states})
	if err == nil {
		h.r.m.handoffSent.Add(float64(len(states)))
	}
	return err
}

// fetchPrevious asks key's previous owner for its state and merges it, so
// that a key whose handoff has not arrived yet does not start full.
func (r *Router) fetchPrevious(ctx context.Context, v *view, key string, l *bucket.Limit, now int64) {
	// The previous ring says who owned the key; if that was this node (or
	// there was none: it just joined), the key came from wherever the ring
	// without this node puts it.
	prev, err := v.prev.Owner(key)
	if err != nil || prev == r.cfg.Self {
		if prev, err = v.others.Owner(key); err != nil || prev == r.cfg.Self {
			return
		}
	}
	p := v.peers[prev]
	if p == nil {
		p = r.retiredPeer(prev)
	}
	if _, down := v.fetchDown.Load(prev); p == nil || down {
		r.m.fetches[fetchUnreachable].Inc()
		return
	}
	// A quarter of the peer deadline: the check that waits on this fetch
	// may itself be a forwarded one, under the entry node's PeerTimeout.
	w := limitToWire(l)
	ctx, cancel := context.WithTimeout(ctx, r.cfg.PeerTimeout/4)
	defer cancel()
	resp, err := p.client.Fetch(ctx, &peerv1.FetchRequest{From: r.cfg.Self, Key: key, Limit: &w})
	switch {
	case err != nil:
		// Do not wait on it again for this view: it crashed or is gone.
		v.fetchDown.Store(prev, true)
		r.m.fetches[fetchUnreachable].Inc()
		return
	case !resp.GetFound():
		r.m.fetches[fetchMissing].Inc()
		return
	}
	r.m.fetches[fetchFound].Inc()
	st := resp.GetState()
	sl, err := limitFromWire(st.GetLimit())
	if err != nil {
		return
	}
	r.cfg.Store.Merge(key, &sl, now, st.GetUsed())
}

// retiredPeer finds a peer that left the ring less than Grace ago.
func (r *Router) retiredPeer(name string) *peer {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.retired {
		if p.name == name {
			return p
		}
	}
	return nil
}

// Leave takes this node off its own ring and hands every key it holds to
// the new owners, waiting until that is done or ctx ends. Call it after the
// cluster has announced the leave, and keep serving the peer service until
// it returns: new owners may still fetch state from this node.
func (r *Router) Leave(ctx context.Context) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.leaving = true
	r.rebuildLocked()
	r.mu.Unlock()
	v := r.view.Load()
	if v.ring == nil || v.ring.Len() == 0 {
		return nil // nobody to hand off to
	}
	for {
		if _, failed := r.handoff.pass(ctx); failed == 0 || ctx.Err() != nil {
			return ctx.Err()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Quiesce waits until no peer has sent this node a check for idle, or ctx
// ends. A leaving node calls it after Leave, before it stops serving, so that
// peers whose view still names it as an owner are answered rather than
// failing over while the leave spreads.
func (r *Router) Quiesce(ctx context.Context, idle time.Duration) error {
	tick := time.NewTicker(idle / 4)
	defer tick.Stop()
	for {
		if int64(time.Since(r.started))-r.lastPeerCheck.Load() >= int64(idle) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}
