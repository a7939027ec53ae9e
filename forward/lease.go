package forward

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/clock"
)

// Token leases keep a hot key from making its owner the bottleneck. For a
// check with Lease set on a token bucket owned by another node, the entry
// node asks the owner, with the check, for a lease of a few tokens; the
// owner takes them from the bucket (only what it has) and grants them for
// LeaseConfig.TTL. Until the lease is spent or expires, the entry node
// admits checks on that key locally. Exactness holds by construction:
// leased tokens are already spent at the owner. When a lease expires its
// unused tokens are given back; what a node that crashed held is lost in
// the safe direction (fewer admissions, never more).

// lease is the tokens of one key this node may admit locally.
type lease struct {
	tokens  atomic.Int64
	expires clock.Instant
	limit   bucket.Limit
	resets  uint64 // leases.resets when installed
}

// leases holds this node's leases and the keys with a lease request in
// flight. Safe for concurrent use.
type leases struct {
	cfg      LeaseConfig
	clock    clock.Clock
	m        *metrics
	giveBack func(key string, l bucket.Limit, n int64) // returns unused tokens to the owner

	held    sync.Map // key → *lease
	pending sync.Map // key → struct{}: one lease request in flight per key
	// resets counts the keys reset here: a grant asked for before a reset
	// and answered after it is not installed (its tokens predate it).
	resets atomic.Uint64
}

// drop forgets key's lease without giving its tokens back (the key was
// reset: they were spent before) and returns how many it held; a grant in
// flight for any key is not installed (see resets).
func (ls *leases) drop(key string) int64 {
	ls.resets.Add(1)
	v, ok := ls.held.LoadAndDelete(key)
	if !ok {
		return 0
	}
	return max(v.(*lease).tokens.Swap(0), 0)
}

func newLeases(cfg LeaseConfig, c clock.Clock, m *metrics, giveBack func(string, bucket.Limit, int64)) *leases {
	return &leases{cfg: cfg, clock: c, m: m, giveBack: giveBack}
}

// take admits c from a live lease on its key, if there is one with enough
// tokens.
func (ls *leases) take(c *Check, now clock.Instant) (Result, bool) {
	v, ok := ls.held.Load(c.Key)
	if !ok {
		return Result{}, false
	}
	l := v.(*lease)
	if now >= l.expires || l.limit != c.Limit {
		return Result{}, false
	}
	left := l.tokens.Add(-c.Cost)
	if left < 0 {
		l.tokens.Add(c.Cost)
		return Result{}, false
	}
	ls.m.leasedChecks.Inc()
	return Result{Decision: bucket.Decision{Allowed: true, Limit: c.Limit.Count(), Remaining: left}, Leased: true}, true
}

// ask reports whether this node may ask for a lease on key now (no other
// request for one is in flight); done must follow a true answer.
func (ls *leases) ask(key string) bool {
	if _, busy := ls.pending.Load(key); busy {
		return false
	}
	// The entry outlives the check, whose key may point into a reused
	// buffer: it keeps its own copy.
	_, busy := ls.pending.LoadOrStore(strings.Clone(key), struct{}{})
	return !busy
}

// done ends the lease requests on keys.
func (ls *leases) done(keys []string) {
	for _, k := range keys {
		ls.pending.Delete(k)
	}
}

// size is how many tokens to ask for: what the limit refills in one TTL,
// at most a share of the burst that leaves every member room, at most Max,
// at least 1.
func (ls *leases) size(c *Check, members int) int64 {
	l := &c.Limit
	perTTL := float64(l.Count()) * float64(ls.cfg.TTL) / float64(l.Per())
	n := min(int64(perTTL), l.Burst()/int64(2*max(members, 1)), ls.cfg.Max)
	return max(n, 1)
}

// install records a lease the owner granted, giving back what an older
// lease on the key still held. The grant is capped by this node's own
// LeaseConfig: at most TTL long and Max tokens, so a peer cannot make this
// node hold a lease longer or larger than it would grant itself. Tokens
// granted beyond Max go straight back to the owner.
func (ls *leases) install(c *Check, granted int64, ttl time.Duration, now clock.Instant, resets uint64) {
	if ls.resets.Load() != resets { // asked before a reset, answered after: the grant predates it
		return
	}
	if extra := granted - ls.cfg.Max; extra > 0 {
		granted = ls.cfg.Max
		ls.m.leasesReturned.Add(float64(extra))
		ls.giveBack(c.Key, c.Limit, extra)
	}
	ttl = min(ttl, ls.cfg.TTL)
	if granted <= 0 || ttl <= 0 {
		return
	}
	nl := &lease{expires: now.Add(ttl), limit: c.Limit, resets: resets}
	nl.tokens.Store(granted)
	if old, loaded := ls.held.Swap(c.Key, nl); loaded {
		ls.release(c.Key, old.(*lease))
	}
	ls.m.leasesGranted.Add(float64(granted))
}

func (ls *leases) release(key string, l *lease) {
	if n := l.tokens.Swap(0); n > 0 {
		if ls.resets.Load() != l.resets {
			// A key was reset since: this one's tokens may predate its
			// reset, and giving them back would create capacity.
			return
		}
		ls.m.leasesReturned.Add(float64(n))
		ls.giveBack(key, l.limit, n)
	}
}

// expire gives back the unused tokens of expired leases, every TTL until
// ctx ends.
func (ls *leases) expire(ctx context.Context) {
	tick := ls.clock.NewTicker(ls.cfg.TTL)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C():
		}
		now := ls.clock.Now()
		ls.held.Range(func(k, v any) bool {
			if l := v.(*lease); now >= l.expires && ls.held.CompareAndDelete(k, v) {
				ls.release(k.(string), l)
			}
			return true
		})
	}
}
