package forward

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/clock"
	"github.com/ringlimit/ringlimit/internal/peermsg"
)

// handoffChunk is the most bucket states one Handoff call carries.
const handoffChunk = 512

// A Handoff call is never larger than a peer accepts (a negative uint
// constant does not compile).
const _ = uint(peermsg.MaxHandoffStates - handoffChunk)

// handoffConfig is what a handoff needs; the Router fills it from its own
// Config.
type handoffConfig struct {
	Self        string
	Grace       time.Duration // how long a pushed key is kept, answering last hops
	PeerTimeout time.Duration // a fetch waits a quarter of it
	Store       *bucket.Store
	Peers       StateMover
	Clock       clock.Clock
	Logger      *slog.Logger
}

// handoff moves what this node spent on keys it does not own to their
// owners, and fetches state from a key's previous owner for a new owner
// that has none. A pass runs after every ring change; while it leaves work
// behind (keys pushed but not yet deleted, pushes that failed) another pass
// follows after Grace. Passes are serialised by mu.
//
// A push carries only the spend the owner has not seen (the copy minus
// what the two share, see shared), and the owner adds it: when both
// copies spent while the ring views differed, neither spend is lost. Once
// a key is pushed, this node redirects that key's checks to the owner
// instead of deciding them (pushed); a last hop it still decides is pushed
// by the next pass, which runs again Grace later before the copy is
// deleted.
type handoff struct {
	cfg    handoffConfig
	ring   func() Owners // the current ring
	shared *shared
	m      *metrics
	wake   chan struct{}
	resv   *bucket.Reservations // a pushed key carries its records (reserve.go)
	adapt  *adaptiveTable       // and its controller (adaptive.go)
	// admit says whether a fetched state may be merged (Router.admit: not
	// one from before a reset); set once by New.
	admit func(*peermsg.State, clock.Instant) bool
	// settle returns once the replication rounds begun before it was
	// called have ended (replicator.settle); set once by New. A pass calls
	// it before its first push.
	settle func(context.Context)
	// background runs f in a goroutine under the Router's lifetime, and
	// reports false (running nothing) once the Router is closing; set once
	// by New.
	background func(f func(context.Context)) bool
	calls      sync.Map // fetchKey → *fetchCall: the fetches in flight (fetch.go)

	mu     sync.Mutex // one pass at a time
	pushed sync.Map   // key → clock.Instant it was first pushed
	// afterRead, when not nil, runs after a pass has read a copy and
	// before it pushes it (tests: what arrives meanwhile).
	afterRead func()

	// foreign is how many keys the store holds that this node does not own
	// (as the last pass counted them, or 1 since a copy may have appeared):
	// when 0, a replica received needs no look at the store. fmu orders
	// its writes; gen counts the copies that may have appeared.
	foreign atomic.Int64
	fmu     sync.Mutex
	gen     uint64
}

// mayHoldForeign records that the store may now hold a key this node does
// not own.
func (h *handoff) mayHoldForeign() {
	h.fmu.Lock()
	h.gen++
	if h.foreign.Load() == 0 {
		h.foreign.Store(1)
	}
	h.fmu.Unlock()
}

// holdsForeign reports whether the store may hold a key this node does not
// own.
func (h *handoff) holdsForeign() bool { return h.foreign.Load() != 0 }

func newHandoff(cfg handoffConfig, ring func() Owners, sh *shared, m *metrics) *handoff {
	return &handoff{cfg: cfg, ring: ring, shared: sh, m: m, wake: make(chan struct{}, 1)}
}

func (h *handoff) trigger() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// isPushed reports whether key has been handed to its owner.
func (h *handoff) isPushed(key string) bool {
	_, ok := h.pushed.Load(key)
	return ok
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

// pass pushes what this node spent on every key the current ring gives to
// another node, deletes the keys pushed at least Grace ago that are still
// not ours, and reports whether work is left for a later pass and how many
// keys it failed to push.
func (h *handoff) pass(ctx context.Context) (pending bool, failed int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	self := h.cfg.Self
	h.fmu.Lock()
	gen := h.gen
	h.fmu.Unlock()
	rg := h.ring()
	if rg == nil {
		return false, 0
	}
	now := h.cfg.Clock.Now()
	foreign := int64(0)
	out := map[string][]peermsg.State{}
	var stale []string // pushed at least Grace ago and pushed again now: delete after
	settled := h.settle == nil
	flush := func(owner string) {
		states := out[owner]
		delete(out, owner)
		if !settled {
			// A replication round begun while this node still owned a key
			// may be carrying the key's replica to the member it pushes the
			// key to: that replica must arrive first. Arriving after the
			// push, it charged the member's copy a second time with the
			// spend the push carried (what this node had spent beyond the
			// member's last replica: all of it, when that was the first).
			h.settle(ctx)
			settled = true
		}
		if err := h.cfg.Peers.Handoff(ctx, owner, states); err != nil {
			h.cfg.Logger.Warn("handoff failed", "to", owner, "keys", len(states), "err", err)
			h.unshare(owner, states, now)
			pending = true
			failed += len(states)
			return
		}
		for i := range states {
			s := &states[i]
			at, ok := h.pushed.Load(s.Key)
			switch {
			case !ok:
				h.pushed.Store(strings.Clone(s.Key), now)
			case now.Sub(at.(clock.Instant)) >= h.cfg.Grace:
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
				h.pushed.Delete(s.Key)
				continue
			}
			// Push what the owner has not seen of every key we hold but do
			// not own; one pushed at least Grace ago is pushed a last time
			// (what last hops spent on our copy meanwhile) and then deleted.
			push, had, ok := h.share(owner, s, now)
			if !ok {
				continue // deleted since the batch was read
			}
			foreign++
			out[owner] = append(out[owner], peermsg.State{Key: s.Key, Limit: s.Limit, Used: push,
				Reservations: appendRecords(h.resv, nil, s.Key, now, false), ResetAt: s.ResetAt, Adaptive: h.adapt.state(s.Key, now),
				Window: s.Window, Full: had == 0})
			if h.afterRead != nil {
				h.afterRead()
			}
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
		// What this node shares with the owner stays: it is this node's
		// replica of the key when it is the key's successor.
		if ownerIn(cur, self, k) != self && h.cfg.Store.Delete(k) {
			foreign--
		}
		h.pushed.Delete(k)
	}
	h.fmu.Lock()
	if h.gen == gen {
		h.foreign.Store(max(foreign, 0))
	}
	h.fmu.Unlock()
	left := false
	h.pushed.Range(func(k, _ any) bool {
		if !h.cfg.Store.Has(k.(string)) {
			h.pushed.Delete(k)
		} else {
			left = true
		}
		return true
	})
	return pending || left, failed
}

// share reads this node's copy s of a key owner owns afresh and returns
// the spend owner has not seen (push) and what both accounted for before
// (had); the shared entry is raised by push at once: the owner counts a
// push as soon as it arrives, and may replicate the sum back before the
// call returns. ok is false when the copy is gone.
func (h *handoff) share(owner string, s *bucket.Snapshot, now clock.Instant) (push, had int64, ok bool) {
	h.shared.copies.Lock()
	defer h.shared.copies.Unlock()
	fresh, ok := h.cfg.Store.Lookup(s.Key, now)
	if !ok {
		return 0, 0, false
	}
	s.Limit, s.Used, s.ResetAt, s.Window = fresh.Limit, fresh.Used, fresh.ResetAt, fresh.Window
	had, _ = h.shared.used(owner, s.Key, now)
	if push = max(s.Used-had, 0); push > 0 {
		h.shared.set(owner, s.Key, &s.Limit, now, had+push, s.Window)
	}
	return push, had, true
}

// unshare takes back what share added for states, a push that failed:
// the owner did not count it, and the next pass sends it again. Replicas
// that raised the entries since stay counted.
func (h *handoff) unshare(owner string, states []peermsg.State, now clock.Instant) {
	h.shared.copies.Lock()
	defer h.shared.copies.Unlock()
	for i := range states {
		s := &states[i]
		if s.Used == 0 {
			continue
		}
		cur, _ := h.shared.used(owner, s.Key, now)
		h.shared.set(owner, s.Key, &s.Limit, now, max(cur-s.Used, 0), s.Window)
	}
}

// Leave takes this node off its own ring and hands every key it holds to
// the new owners, waiting until that is done or ctx ends. Given a context
// that has already ended it changes nothing and returns ctx's error at
// once: a node stopped with no time left stops as a crashed one would, and
// the members promote their replicas of its keys (taking itself off its
// ring would start a handoff in the background, racing the stop, and a
// member could receive its spend twice: once as a replica, once pushed).
// Call it after the cluster has announced the leave, and keep serving the
// peer service until it returns: new owners may still fetch state from
// this node.
func (r *Router) Leave(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
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
		_, failed := r.handoff.pass(ctx)
		if failed += r.handoffLeases(ctx); failed == 0 || ctx.Err() != nil {
			return ctx.Err()
		}
		if !clock.Sleep(r.cfg.Clock, 100*time.Millisecond, ctx.Done()) {
			return ctx.Err()
		}
	}
}

// Quiesce waits until no peer has sent this node a check for idle, or ctx
// ends, then pushes once more what the checks it still decided meanwhile
// spent. A leaving node calls it after Leave, before it stops serving, so
// that peers whose view still names it as an owner are answered (or
// redirected) rather than failing over while the leave spreads. Given a
// context that has already ended, it returns ctx's error at once.
func (r *Router) Quiesce(ctx context.Context, idle time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	tick := r.cfg.Clock.NewTicker(max(idle/4, time.Millisecond))
	defer tick.Stop()
	for r.cfg.Clock.Now().Sub(clock.Instant(r.lastPeerCheck.Load())) < idle {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C():
		}
	}
	if _, failed := r.handoff.pass(ctx); failed > 0 {
		return fmt.Errorf("forward: %d keys not pushed after quiescing", failed)
	}
	return nil
}
