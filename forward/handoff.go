package forward

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/clock"
	"github.com/ringlimit/ringlimit/peer"
)

// handoffChunk is the most bucket states one Handoff call carries.
const handoffChunk = 512

// handoffConfig is what a handoff needs; the Router fills it from its own
// Config.
type handoffConfig struct {
	Self        string
	Grace       time.Duration // how long a pushed key is kept, answering stale peers
	PeerTimeout time.Duration // a fetch waits a quarter of it
	Store       *bucket.Store
	Peers       Peers
	Clock       clock.Clock
	Logger      *slog.Logger
}

// handoff moves the state of keys this node no longer owns to their owners,
// and fetches state from a key's previous owner for a new owner that has
// none. A pass runs after every ring change; while it leaves work behind
// (keys pushed but not yet deleted, pushes that failed) another pass
// follows after Grace. Passes are serialised by mu.
type handoff struct {
	cfg  handoffConfig
	ring func() Owners // the current ring
	m    *metrics
	wake chan struct{}

	mu     sync.Mutex               // one pass at a time
	pushed map[string]clock.Instant // key → when it was pushed; guarded by mu
}

func newHandoff(cfg handoffConfig, ring func() Owners, m *metrics) *handoff {
	return &handoff{cfg: cfg, ring: ring, m: m, wake: make(chan struct{}, 1), pushed: map[string]clock.Instant{}}
}

func (h *handoff) trigger() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

func (h *handoff) loop(ctx context.Context) {
	again := h.cfg.Clock.NewTimer(h.cfg.Grace)
	again.Stop()
	defer again.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.wake:
		case <-again.C():
		}
		again.Stop()
		if pending, _ := h.pass(ctx); pending {
			again.Reset(h.cfg.Grace)
		}
	}
}

// pass pushes every key the current ring gives to another node, deletes
// the keys pushed at least Grace ago that are still not ours, and reports
// whether work is left for a later pass and how many keys it failed to push.
func (h *handoff) pass(ctx context.Context) (pending bool, failed int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	self := h.cfg.Self
	rg := h.ring()
	if rg == nil {
		return false, 0
	}
	now := h.cfg.Clock.Now()
	out := map[string][]peer.State{}
	var stale []string // pushed at least Grace ago and pushed again now: delete after
	flush := func(owner string) {
		states := out[owner]
		delete(out, owner)
		if err := h.cfg.Peers.Handoff(ctx, owner, states); err != nil {
			h.cfg.Logger.Warn("handoff failed", "to", owner, "keys", len(states), "err", err)
			pending = true
			failed += len(states)
			return
		}
		for _, s := range states {
			at, ok := h.pushed[s.Key]
			switch {
			case !ok:
				h.pushed[s.Key] = now
			case now.Sub(at) >= h.cfg.Grace:
				stale = append(stale, s.Key)
			}
		}
		pending = true // pushed keys are deleted by a later pass
	}
	h.cfg.Store.Range(now, func(batch []bucket.Snapshot) bool {
		for i := range batch {
			s := &batch[i]
			owner := ownerIn(rg, self, s.Key)
			if owner == self {
				delete(h.pushed, s.Key)
				continue
			}
			// Push every key we hold but do not own; one that was pushed at
			// least Grace ago is pushed a last time (what stale peers spent
			// on our copy meanwhile) and then deleted.
			out[owner] = append(out[owner], peer.State{Key: s.Key, Limit: s.Limit, Used: s.Used})
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
	cur := h.ring()
	for _, k := range stale {
		if ownerIn(cur, self, k) != self {
			h.cfg.Store.Delete(k)
		}
		delete(h.pushed, k)
	}
	for k := range h.pushed {
		if !h.cfg.Store.Has(k) {
			delete(h.pushed, k)
		}
	}
	return pending || len(h.pushed) > 0, failed
}

// fetch asks key's previous owner for its state and merges it, so that a
// key whose handoff has not arrived yet does not start full.
func (h *handoff) fetch(ctx context.Context, v *view, key string, l *bucket.Limit, now clock.Instant) {
	// The previous ring says who owned the key; if that was this node (or
	// there was none: it just joined), the key came from wherever the ring
	// without this node puts it.
	prev := ownerIn(v.prev, h.cfg.Self, key)
	if v.prev == nil || prev == h.cfg.Self {
		if prev = ownerIn(v.others, h.cfg.Self, key); v.others == nil || prev == h.cfg.Self {
			return
		}
	}
	if _, down := v.fetchDown.Load(prev); down {
		h.m.fetches[fetchUnreachable].Inc()
		return
	}
	// A quarter of the peer deadline: the check that waits on this fetch
	// may itself be a forwarded one, under the entry node's deadline.
	ctx, cancel := context.WithTimeout(ctx, h.cfg.PeerTimeout/4)
	defer cancel()
	st, found, err := h.cfg.Peers.Fetch(ctx, prev, key, l)
	switch {
	case err != nil:
		// Do not wait on it again for this view: it crashed or is gone.
		v.fetchDown.Store(prev, true)
		h.m.fetches[fetchUnreachable].Inc()
		return
	case !found:
		h.m.fetches[fetchMissing].Inc()
		return
	}
	h.m.fetches[fetchFound].Inc()
	h.cfg.Store.Merge(key, &st.Limit, now, st.Used)
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
	if r.view.Load().len() == 0 {
		return nil // nobody to hand off to
	}
	for {
		if _, failed := r.handoff.pass(ctx); failed == 0 || ctx.Err() != nil {
			return ctx.Err()
		}
		if !clock.Sleep(r.cfg.Clock, 100*time.Millisecond, ctx.Done()) {
			return ctx.Err()
		}
	}
}

// Quiesce waits until no peer has sent this node a check for idle, or ctx
// ends. A leaving node calls it after Leave, before it stops serving, so that
// peers whose view still names it as an owner are answered rather than
// failing over while the leave spreads.
func (r *Router) Quiesce(ctx context.Context, idle time.Duration) error {
	tick := r.cfg.Clock.NewTicker(max(idle/4, time.Millisecond))
	defer tick.Stop()
	for {
		if r.cfg.Clock.Now().Sub(clock.Instant(r.lastPeerCheck.Load())) >= idle {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C():
		}
	}
}
