package forward

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/clock"
	"github.com/ringlimit/ringlimit/peer"
)

// view is one immutable picture of the cluster: the ring, the ring before
// the last change, and the ring without this node.
type view struct {
	ring Owners // nil before the first SetMembers
	prev Owners
	// others is the ring without this node: for a node that just joined,
	// where the keys it now owns were before.
	others  Owners
	changed clock.Instant // when the change that made this view happened
	// fetchDown remembers previous owners a fetch could not reach, so that
	// later checks of this view do not wait on them again.
	fetchDown *sync.Map
}

func (v *view) len() int {
	if v.ring == nil {
		return 0
	}
	return v.ring.Len()
}

func (v *view) has(name string) bool { return v.ring != nil && v.ring.Has(name) }

func (v *view) version() uint64 {
	if v.ring == nil {
		return 0
	}
	return v.ring.Version()
}

// inGrace reports whether keys may still have to be fetched from their
// previous owner at now.
func (v *view) inGrace(now clock.Instant, grace time.Duration) bool {
	return (v.prev != nil || v.others != nil) && now.Sub(v.changed) < grace
}

// ownerIn returns the owner of key on o, or self on an empty ring (nobody
// else can decide).
func ownerIn(o Owners, self, key string) string {
	if o == nil {
		return self
	}
	owner, err := o.Owner(key)
	if err != nil {
		return self
	}
	return owner
}

// Router decides checks: locally for the keys this node owns, through their
// owners otherwise. It is safe for concurrent use.
type Router struct {
	cfg     Config
	log     *slog.Logger
	m       *metrics
	local   *bucket.Store // degraded-mode buckets
	pre     *prelimiter
	leases  *leases
	handoff *handoff

	view atomic.Pointer[view]
	// viewChanged is closed (and replaced) whenever the view changes, so
	// that waiters can block until the next one.
	viewChanged atomic.Pointer[chan struct{}]
	// lastPeerCheck is when the peer service last received a check;
	// Quiesce waits for it to go quiet.
	lastPeerCheck atomic.Int64

	mu      sync.Mutex // serialises SetMembers, Leave and Close
	members []Member
	leaving bool
	closed  bool

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

var _ peer.Handler = (*Router)(nil)

// New validates cfg and returns a Router that owns every key until
// SetMembers says otherwise. Close stops it.
func New(cfg Config) (*Router, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	local, err := bucket.NewStore(bucket.StoreConfig{MaxKeys: cfg.LocalKeys, Shards: 16})
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	pre, err := newPrelimiter(cfg.LocalKeys, m.shed)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Router{cfg: cfg, log: cfg.Logger, m: m, local: local, pre: pre, ctx: ctx, cancel: cancel}
	r.view.Store(&view{fetchDown: &sync.Map{}})
	first := make(chan struct{})
	r.viewChanged.Store(&first)
	r.leases = newLeases(cfg.Lease, cfg.Clock, m, r.refundLease)
	r.handoff = newHandoff(handoffConfig{Self: cfg.Self, Grace: cfg.Grace, PeerTimeout: cfg.PeerTimeout,
		Store: cfg.Store, Peers: cfg.Peers, Clock: cfg.Clock, Logger: cfg.Logger}, r.currentRing, m)
	r.wg.Go(func() { r.handoff.loop(ctx) })
	r.wg.Go(func() { r.leases.expire(ctx) })
	return r, nil
}

// Self returns this node's name.
func (r *Router) Self() string { return r.cfg.Self }

func (r *Router) currentRing() Owners { return r.view.Load().ring }

// SetMembers replaces the ring with one over members (this node included
// unless it is leaving), tells Peers their addresses, and starts handing
// off the keys this node no longer owns. A member list that cannot form a
// ring is logged and ignored.
func (r *Router) SetMembers(members []Member) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	r.members = slices.Clone(members)
	r.rebuildLocked()
}

func (r *Router) rebuildLocked() {
	old := r.view.Load()
	names := make([]string, 0, len(r.members))
	addrs := make(map[string]string, len(r.members))
	for _, m := range r.members {
		if r.leaving && m.Name == r.cfg.Self {
			continue
		}
		names = append(names, m.Name)
		if m.Name != r.cfg.Self {
			addrs[m.Name] = m.Addr
		}
	}
	rg, err := r.cfg.NewRing(names)
	if err != nil {
		r.log.Error("ring not rebuilt", "members", names, "err", err)
		return
	}
	r.cfg.Peers.SetMembers(addrs)
	if old.ring != nil && rg.Version() == old.ring.Version() {
		return
	}
	var others Owners
	joined := old.len() <= 1 // this node was alone: it has just joined
	if joined && rg.Has(r.cfg.Self) && rg.Len() > 1 {
		rest := slices.DeleteFunc(slices.Clone(names), func(n string) bool { return n == r.cfg.Self })
		if others, err = r.cfg.NewRing(rest); err != nil {
			others = nil
		}
	}
	nv := &view{ring: rg, prev: old.ring, others: others, changed: r.cfg.Clock.Now(), fetchDown: &sync.Map{}}
	r.view.Store(nv)
	next := make(chan struct{})
	close(*r.viewChanged.Swap(&next))
	r.m.ringMembers.Set(float64(rg.Len()))
	r.m.ringChanges.Inc()
	r.log.Info("ring changed", "members", names, "version", rg.Version())
	r.handoff.trigger()
}

// Owner returns the node that owns key in this node's view, and the ring
// version it was read from.
func (r *Router) Owner(key string) (string, uint64) {
	v := r.view.Load()
	return ownerIn(v.ring, r.cfg.Self, key), v.version()
}

// RingVersion returns the version of this node's current ring (0 before
// the first SetMembers).
func (r *Router) RingVersion() uint64 { return r.view.Load().version() }

// RingMembers returns the names on this node's current ring.
func (r *Router) RingMembers() []string {
	if v := r.view.Load(); v.ring != nil {
		return v.ring.Members()
	}
	return nil
}

// PeerKeys asks every peer how many keys it holds and includes this node.
// Peers that do not answer are missing from the map.
func (r *Router) PeerKeys(ctx context.Context) map[string]int64 {
	out := r.cfg.Peers.Keys(ctx)
	out[r.cfg.Self] = int64(r.cfg.Store.Len())
	return out
}

// Check decides checks and writes one Result per check into out, which
// must be at least as long as checks. If any check is invalid it returns an
// error wrapping ErrInvalid and applies none of them. It returns the
// context's error if ctx ends before every owner answered.
func (r *Router) Check(ctx context.Context, checks []Check, out []Result) error {
	if len(out) < len(checks) {
		return fmt.Errorf("forward: %d results for %d checks", len(out), len(checks))
	}
	if err := ValidateChecks(checks); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	v := r.view.Load()
	now := r.cfg.Clock.Now()
	remote := func(c *Check) bool { return ownerIn(v.ring, r.cfg.Self, c.Key) != r.cfg.Self }
	shedGroups := r.pre.all(r.cfg.Self, checks, out, remote, now)
	var groups []*group // one per remote owner, in order of first appearance
	for i := range checks {
		c := &checks[i]
		if out[i].Shed {
			continue
		}
		if c.Together != 0 && slices.Contains(shedGroups, c.Together) {
			out[i] = Result{Owner: r.cfg.Self, Skipped: true}
			continue
		}
		owner := ownerIn(v.ring, r.cfg.Self, c.Key)
		if c.Lease && !c.Refund && owner != r.cfg.Self {
			if res, ok := r.leases.take(c, now); ok {
				res.Owner = r.cfg.Self
				out[i] = res
				continue
			}
		}
		if owner == r.cfg.Self {
			if c.Refund {
				r.cfg.Store.Refund(c.Key, &c.Limit, now, c.Cost)
				out[i] = Result{Owner: r.cfg.Self}
				continue
			}
			out[i] = r.decideLocal(ctx, v, c.Key, &c.Limit, c.Cost, now)
			continue
		}
		g := findGroup(groups, owner)
		if g == nil {
			g = &group{owner: owner}
			groups = append(groups, g)
		}
		g.idx = append(g.idx, i)
	}
	if len(groups) == 0 {
		return nil
	}
	if len(groups) == 1 {
		return r.forwardGroup(ctx, v, groups[0], checks, out, now)
	}
	errs := make([]error, len(groups))
	var wg sync.WaitGroup
	for gi, g := range groups {
		wg.Go(func() { errs[gi] = r.forwardGroup(ctx, v, g, checks, out, now) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// group is the checks of one request bound for one owner.
type group struct {
	owner string
	idx   []int
}

func findGroup(groups []*group, owner string) *group {
	for _, g := range groups {
		if g.owner == owner {
			return g
		}
	}
	return nil
}

// forwardGroup sends one owner's checks and fills their results, applying
// the failure mode when the owner cannot answer.
func (r *Router) forwardGroup(ctx context.Context, v *view, g *group, checks []Check, out []Result, now clock.Instant) error {
	reqs := make([]peer.Request, len(g.idx))
	answers := make([]peer.Answer, len(g.idx))
	var asked []string // keys this call asks a lease for
	for j, i := range g.idx {
		c := &checks[i]
		reqs[j] = peer.Request{Key: c.Key, Limit: c.Limit, Cost: c.Cost, Refund: c.Refund}
		if c.Lease && !c.Refund && r.leases.ask(c.Key) {
			reqs[j].Lease = r.leases.size(c, v.len())
			asked = append(asked, c.Key)
		}
	}
	defer r.leases.done(asked)
	decider, err := r.cfg.Peers.Check(ctx, g.owner, reqs, answers)
	if err == nil {
		addr := r.cfg.Peers.Addr(g.owner)
		for j, i := range g.idx {
			c, a := &checks[i], &answers[j]
			if a.LeaseGranted > 0 {
				r.leases.install(c, a.LeaseGranted, a.LeaseTTL, r.cfg.Clock.Now())
			}
			out[i] = Result{Decision: a.Decision(c.Limit.Count()), Owner: decider, OwnerAddr: addr}
			r.pre.after(c, &out[i], now)
		}
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	r.log.Debug("owner unreachable", "owner", g.owner, "err", err)
	live := max(v.len(), 1)
	for _, i := range g.idx {
		if checks[i].Refund {
			out[i] = Result{Owner: g.owner}
			continue
		}
		out[i] = r.degrade(&checks[i], live, now)
	}
	return nil
}

// decideLocal decides a check on this node's store. During the grace
// period after a ring change, a key this node has no state for is first
// fetched from its previous owner.
func (r *Router) decideLocal(ctx context.Context, v *view, key string, l *bucket.Limit, cost int64, now clock.Instant) Result {
	if v.inGrace(now, r.cfg.Grace) && !r.cfg.Store.Has(key) {
		r.handoff.fetch(ctx, v, key, l, now)
	}
	d, err := r.cfg.Store.Take(key, l, now, cost)
	if err != nil { // the caller validated; a bad peer request lands here
		r.log.Error("local check failed", "key", key, "err", err)
	}
	return Result{Decision: d, Owner: r.cfg.Self, OwnerAddr: r.cfg.SelfAddr}
}

// refundLease gives a lease's unused tokens back to the key's owner, in
// the background.
func (r *Router) refundLease(key string, l bucket.Limit, n int64) {
	r.wg.Go(func() {
		ctx, cancel := context.WithTimeout(r.ctx, r.cfg.PeerTimeout)
		defer cancel()
		out := make([]Result, 1)
		r.Check(ctx, []Check{{Key: key, Limit: l, Cost: n, Refund: true}}, out)
	})
}

// Close stops background work. It does not close Peers, whose owner
// closes it after the Router. Safe to call more than once.
func (r *Router) Close(ctx context.Context) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	r.mu.Unlock()
	r.cancel()
	done := make(chan struct{})
	go func() {
		r.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("forward: close: %w", ctx.Err())
	}
}
