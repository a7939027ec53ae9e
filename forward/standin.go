package forward

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/clock"
	"github.com/ringlimit/ringlimit/internal/peermsg"
)

// errBackoff fails a call to a member that failed to answer moments ago,
// without waiting on it again.
var errBackoff = errors.New("member did not answer moments ago")

// forwardGroup sends one owner's checks and fills their results. A check
// the owner redirects (its ring names another owner) is sent once more, to
// that member, as a last hop. When the owner cannot be reached, its keys'
// successors decide them from their replicas; when they cannot either (or
// this node is in a minority), the checks' failure modes decide. When the
// owner's queue is full (peermsg.ErrBusy) the owner is alive and holds the
// keys' state: the failure modes decide at once, without a successor.
func (r *Router) forwardGroup(ctx context.Context, v *view, g *group, checks []Check, out []Result, now clock.Instant) error {
	redirects, err := r.ask(ctx, v, g.owner, g.idx, checks, out, false, now)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, peermsg.ErrBusy) {
			r.log.Debug("owner busy", "owner", g.owner, "err", err)
			for _, i := range g.idx {
				out[i] = r.unreachable(v, &checks[i], g.owner, now)
			}
			return nil
		}
		r.log.Debug("owner unreachable", "owner", g.owner, "err", err)
		return r.standIn(ctx, v, g.owner, g.idx, checks, out, now)
	}
	for to, idx := range redirects {
		r.m.redirectsFollowed.Add(float64(len(idx)))
		if err := r.follow(ctx, v, g.owner, to, idx, checks, out, now); err != nil {
			return err
		}
	}
	return nil
}

// follow sends redirected checks to to, the owner the receiver named, as a
// last hop. When to is a member this node's ring has just dropped (it left
// or died), the receiver's ring is the older one: catchUp asks it again
// until it agrees. When to is not a member this node knows yet (the
// receiver's ring is newer), it first waits, at most half the peer
// deadline, for its own ring to change, and routes them by the new ring.
func (r *Router) follow(ctx context.Context, v *view, from, to string, idx []int, checks []Check, out []Result, now clock.Instant) error {
	if to != r.cfg.Self && !v.has(to) {
		if v.prev != nil && v.prev.Has(to) {
			return r.catchUp(ctx, v, from, to, idx, checks, out)
		}
		nv := r.awaitChange(ctx, v)
		if nv == v {
			for _, i := range idx {
				out[i] = r.unreachable(v, &checks[i], to, now)
			}
			return ctx.Err()
		}
		return r.reroute(ctx, nv, from, idx, checks, out, now)
	}
	if to == r.cfg.Self {
		for _, i := range idx {
			out[i] = r.decideFor(ctx, v, ownerIn(v.ring, r.cfg.Self, checks[i].Key), &checks[i], now)
		}
		return nil
	}
	_, err := r.lastHop(ctx, v, to, to, idx, checks, out, now)
	return err
}

// reroute sends checks that from redirected to their owners on v, a newer
// view than the one they were routed by, each as a last hop.
func (r *Router) reroute(ctx context.Context, v *view, from string, idx []int, checks []Check, out []Result, now clock.Instant) error {
	byOwner := map[string][]int{}
	for _, i := range idx {
		o := ownerIn(v.ring, r.cfg.Self, checks[i].Key)
		byOwner[o] = append(byOwner[o], i)
	}
	for o, idx := range byOwner {
		if err := r.follow(ctx, v, from, o, idx, checks, out, now); err != nil {
			return err
		}
	}
	return nil
}

// catchUpPause is the first pause before catchUp asks again; each next one
// is twice as long.
const catchUpPause = 5 * time.Millisecond

// catchUp answers checks that from, their owner on v, redirected to to, a
// member v no longer has: from has not yet seen to leave or die. It asks
// from again after a pause, doubling, until from decides them (its ring
// agrees with v) or names a member v has, for at most half the peer
// deadline; then from decides them as their last hop. From is the keys'
// successor on the ring that still has to, so it holds their replicas
// (with replication on), and what it spends is summed with to's pushes by
// the spend merge. A fresh failure-mode share on this node would know none
// of the spend so far. When v changes meanwhile, the checks go by the
// newer view.
func (r *Router) catchUp(ctx context.Context, v *view, from, to string, idx []int, checks []Check, out []Result) error {
	end := r.cfg.Clock.Now().Add(r.cfg.PeerTimeout / 2)
	for pause := catchUpPause; len(idx) > 0; pause *= 2 {
		now := r.cfg.Clock.Now()
		final := !now.Before(end)
		if !final {
			if !clock.Sleep(r.cfg.Clock, min(pause, end.Sub(now)), ctx.Done()) {
				return ctx.Err()
			}
			now = r.cfg.Clock.Now()
		}
		if nv := r.view.Load(); nv != v {
			return r.reroute(ctx, nv, from, idx, checks, out, now)
		}
		redirects, err := r.ask(ctx, v, from, idx, checks, out, final, now)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return r.standIn(ctx, v, from, idx, checks, out, now)
		}
		idx = redirects[to]
		delete(redirects, to)
		for o, oidx := range redirects {
			if err := r.follow(ctx, v, from, o, oidx, checks, out, now); err != nil {
				return err
			}
		}
	}
	return nil
}

// lastHop asks name to decide the checks idx whatever its ring says; when
// it cannot be reached they are answered as unreachable checks of owner.
// It reports whether name decided them, or ctx's error.
func (r *Router) lastHop(ctx context.Context, v *view, name, owner string, idx []int, checks []Check, out []Result, now clock.Instant) (bool, error) {
	if _, err := r.ask(ctx, v, name, idx, checks, out, true, now); err != nil {
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		for _, i := range idx {
			out[i] = r.unreachable(v, &checks[i], owner, now)
		}
		return false, nil
	}
	return true, nil
}

// awaitChange waits, at most half the peer deadline, for a view newer than
// v, and returns it (v itself when none came).
func (r *Router) awaitChange(ctx context.Context, v *view) *view {
	changed := *r.viewChanged.Load()
	if nv := r.view.Load(); nv != v {
		return nv
	}
	timer := r.cfg.Clock.NewTimer(r.cfg.PeerTimeout / 2)
	defer timer.Stop()
	select {
	case <-changed:
	case <-timer.C():
	case <-ctx.Done():
	}
	return r.view.Load()
}

// ask sends the checks idx to the member name and fills their results.
// With final set, name decides them whatever its ring says. It returns the
// checks name redirected, by the member it named, or an error when name
// could not be reached (no result is filled then). A check whose new key
// name's store had no room for (peermsg.Answer.Full: nothing spent) is decided
// here in its failure mode, as for an unreachable owner. A member whose
// queue is full (peermsg.ErrBusy) is not backed off from: it is slow, not
// known down.
func (r *Router) ask(ctx context.Context, v *view, name string, idx []int, checks []Check, out []Result, final bool, now clock.Instant) (map[string][]int, error) {
	if v.isDown(name) || r.reach.failedRecently(name, now) {
		return nil, errBackoff
	}
	sc := takeAskScratch(len(idx))
	defer sc.give()
	reqs, answers := sc.reqs, sc.answers
	var asked []string // keys this call asks a lease for
	for j, i := range idx {
		c := &checks[i]
		reqs[j] = peermsg.Request{Key: c.Key, Limit: c.Limit, Cost: c.Cost, Refund: c.Refund, Final: final, Sync: c.Sync, Peek: c.Peek,
			ReserveTTL: reserveTTL(c), Adaptive: c.Adaptive, AdaptiveScope: c.AdaptiveScope}
		if !final && c.Lease && !c.Refund && c.Reserve == 0 && !c.Peek && r.leases.ask(c.Key) {
			reqs[j].Lease = r.leases.size(c, v.len())
			asked = append(asked, c.Key)
		}
	}
	defer r.leases.done(asked)
	resets := r.leases.resets.Load()
	var span trace.Span
	if r.tracer != nil {
		ctx, span = r.startForward(ctx, name, len(idx), final)
	}
	decider, err := r.cfg.Peers.Check(ctx, name, reqs, answers)
	if span != nil {
		endForward(span, decider, err)
	}
	if err != nil {
		if ctx.Err() == nil && !errors.Is(err, peermsg.ErrBusy) {
			r.reach.failed(name, r.cfg.Clock.Now().Add(r.cfg.PeerTimeout))
		}
		return nil, err
	}
	r.reach.answered(name)
	addr := r.apiAddr(name)
	var redirects map[string][]int
	for j, i := range idx {
		c, a := &checks[i], &answers[j]
		if a.Redirect != "" && !final {
			if redirects == nil {
				redirects = map[string][]int{}
			}
			redirects[a.Redirect] = append(redirects[a.Redirect], i)
			continue
		}
		if a.Full { // the decider had no room for the new key and spent nothing
			out[i] = r.degrade(v, c, now)
			continue
		}
		if a.LeaseGranted > 0 {
			r.leases.install(c, a.LeaseGranted, a.LeaseTTL, r.cfg.Clock.Now(), resets)
		}
		out[i] = Result{Decision: a.Decision(answeredCount(c, a)), Owner: decider, OwnerAddr: addr, Reservation: a.Reservation}
		r.known.note(c.Key, &out[i].Decision, now)
		r.pre.after(c, &out[i], now)
	}
	return redirects, nil
}

// standIn decides the checks of an owner that cannot be reached: each on
// the key's successor, which holds its replica (this node, or another
// member asked as a last hop), or in its failure mode when the successor
// cannot be reached either, this node is in a minority, or nothing is
// replicated.
func (r *Router) standIn(ctx context.Context, v *view, owner string, idx []int, checks []Check, out []Result, now clock.Instant) error {
	bySucc := map[string][]int{}
	for _, i := range idx {
		c := &checks[i]
		var succ string
		if !v.minority && !c.Refund && v.ring != nil && r.repl.on() {
			var buf [1]string
			if s := v.ring.AppendSuccessors(buf[:0], c.Key, 1); len(s) > 0 {
				succ = s[0]
			}
		}
		switch succ {
		case "":
			out[i] = r.unreachable(v, c, owner, now)
		case r.cfg.Self:
			out[i] = r.decideFor(ctx, v, owner, c, now)
		default:
			bySucc[succ] = append(bySucc[succ], i)
		}
	}
	for succ, idx := range bySucc {
		decided, err := r.lastHop(ctx, v, succ, owner, idx, checks, out, now)
		if err != nil {
			return err
		}
		if decided {
			r.m.standInForwarded.Add(float64(len(idx)))
		}
	}
	return nil
}

// unreachable answers a check that no member could decide: a refund is
// dropped (best effort), a check is decided by its failure mode.
func (r *Router) unreachable(v *view, c *Check, owner string, now clock.Instant) Result {
	if c.Refund {
		return Result{Owner: owner}
	}
	return r.degrade(v, c, now)
}

// decideFor decides a check on this node's store for a key owner owns on
// this node's ring: as owner's successor while owner cannot be reached,
// or as the last hop of a redirected check. A key this node holds no copy
// of starts from its replica of owner's state; what is spent on it here is
// pushed to owner once it answers again (the handoff).
func (r *Router) decideFor(ctx context.Context, v *view, owner string, c *Check, now clock.Instant) Result {
	if c.Refund {
		r.cfg.Store.Refund(c.Key, &c.Limit, now, c.Cost)
		return Result{Owner: r.cfg.Self}
	}
	if owner == r.cfg.Self {
		res, hold := r.decideLocal(ctx, v, c, now)
		if hold {
			r.repl.await(ctx, r.ctx.Done())
		}
		return res
	}
	if c.Peek {
		return r.peekFor(owner, c, now)
	}
	if c.Adaptive != nil {
		cc := *c
		cc.Limit = r.adapt.standIn(c.Key, c.Adaptive, c.Limit, now)
		c = &cc
	}
	r.handoff.mayHoldForeign()
	r.adopt(owner, c.Key, now)
	d, _, id, err := r.takeReserved(c, now)
	if errors.Is(err, bucket.ErrFull) {
		return r.noRoom(v, c, now)
	}
	if err != nil {
		r.log.Error("stand-in check failed", "key", c.Key, "err", err)
	}
	r.m.standInChecks.Inc()
	if o, ok := r.standing.Load(c.Key); !ok || o != owner {
		r.standing.Store(strings.Clone(c.Key), owner) // c.Key may point into a reused buffer
	}
	r.handoff.trigger()
	return Result{Decision: d, Owner: r.cfg.Self, OwnerAddr: r.cfg.SelfAddr, Reservation: id}
}

// adopt gives this node a copy of key from its replica of owner's state,
// if it has none yet.
func (r *Router) adopt(owner, key string, now clock.Instant) {
	if r.cfg.Store.Has(key) {
		return
	}
	r.shared.copies.Lock() // see shared
	defer r.shared.copies.Unlock()
	if r.cfg.Store.Has(key) {
		return
	}
	if st, ok := r.shared.state(owner, key, now); ok {
		r.cfg.Store.SetWindow(key, &st.Limit, now, st.Used, st.Window)
	}
}

// promote makes this node's replicas of a member that died its own copies
// of the keys it now owns, and forgets what it shared with that member (a
// restarted member knows nothing of it).
func (r *Router) promote(v *view, member string) {
	now := r.cfg.Clock.Now()
	var drop []string
	n := 0
	r.shared.each(member, now, func(st *bucket.Snapshot) {
		key := st.Key
		if ownerIn(v.ring, r.cfg.Self, key) == r.cfg.Self && !r.cfg.Store.Has(key) {
			if r.cfg.Store.SetWindow(key, &st.Limit, now, st.Used, st.Window) != nil {
				return // no room even over the allowance: the replica stays, counted by the store
			}
			n++
		}
		drop = append(drop, key)
	})
	for _, k := range drop {
		r.shared.forget(member, k)
	}
	r.m.promoted.Add(float64(n))
	if n > 0 {
		r.log.Info("replicas promoted", "from", member, "keys", n)
	}
}

// reach remembers the members that failed to answer, until when checks go
// straight to their keys' successors instead of waiting on them again.
type reach struct{ until sync.Map } // name → clock.Instant

func (r *reach) failed(name string, until clock.Instant) { r.until.Store(name, until) }

func (r *reach) answered(name string) {
	if _, ok := r.until.Load(name); ok {
		r.until.Delete(name)
	}
}

func (r *reach) failedRecently(name string, now clock.Instant) bool {
	u, ok := r.until.Load(name)
	return ok && now.Before(u.(clock.Instant))
}
