package forward

import (
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ringlimit/ringlimit/adaptive"
	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/clock"
	"github.com/ringlimit/ringlimit/internal/peermsg"
	"github.com/ringlimit/ringlimit/status"
)

// Adaptive limits: the owner of an adaptive key, and it alone, runs the
// key's controller (adaptive.Controller), created from the check's spec on
// the key's first check or report, and decides the key's checks with the
// controller's current limit in place of the limit's count. Ticks happen
// lazily, on each check and report of the key: no timer per key. The
// controller's State travels with the key's state to its successors (a
// replication round carries the controllers that changed since the last
// one) and with a handoff; a successor keeps the states it is sent and
// resumes the controller from its copy when it becomes the owner, so a
// new owner after a crash continues from the last replicated state (what
// the old owner observed after it is lost, at most a round's worth). A
// successor standing in for an owner it cannot reach decides with its
// copy's limit and runs nothing.

const (
	// maxAdaptive bounds the controllers, and separately the replicated
	// states, one node keeps: a key seen again after its controller was
	// dropped starts from its spec's Initial.
	maxAdaptive = 65_536
	// adaptiveIdle is how long a controller (or a replicated state) of a
	// key not seen since is kept once the table is full.
	adaptiveIdle = time.Hour
	// maxScopes bounds the scopes the adaptive metrics and the status page
	// know (scopes come from policy files; a hostile peer cannot grow it
	// without end), and maxScopeLen a scope's length.
	maxScopes, maxScopeLen = 256, 128
)

// adaptiveTable is a node's controllers and replicated controller states.
// It is safe for concurrent use: one mutex serialises every controller,
// whose calls are short.
type adaptiveTable struct {
	mu       sync.Mutex
	ctl      map[string]*ctlEntry
	replicas map[string]replicaEntry
	dirty    map[string]struct{} // controllers changed since the last replication round
	scopes   map[string]int64    // scope → current limit of its most recently moved key
	m        *adaptiveMetrics
}

type ctlEntry struct {
	key   string // the table's own copy: a check's key may point into a reused buffer
	c     *adaptive.Controller
	spec  adaptive.Spec // as given (Controller.Spec has its defaults filled)
	scope string
	base  bucket.Limit // the layer's limit, whose count the controller replaces
	limit bucket.Limit // base at the controller's current limit
	seen  clock.Instant
}

type replicaEntry struct {
	st   adaptive.State
	from string
	seen clock.Instant
}

func newAdaptiveTable(m *adaptiveMetrics) *adaptiveTable {
	return &adaptiveTable{ctl: map[string]*ctlEntry{}, replicas: map[string]replicaEntry{},
		dirty: map[string]struct{}{}, scopes: map[string]int64{}, m: m}
}

// entry returns key's controller, creating it from spec (resumed from a
// replicated state when this node holds one) on first use, and ticks it.
// Called with t.mu held.
func (t *adaptiveTable) entry(key string, spec *adaptive.Spec, scope string, base bucket.Limit, now clock.Instant) *ctlEntry {
	e := t.ctl[key]
	switch {
	case e == nil:
		if len(t.ctl) >= maxAdaptive {
			evict(t.ctl, now, func(e *ctlEntry) clock.Instant { return e.seen }, func(k string) { delete(t.dirty, k) })
		}
		e = &ctlEntry{key: strings.Clone(key), spec: *spec}
		if r, ok := t.replicas[key]; ok && now.Sub(r.seen) < adaptiveIdle { // an older copy is stale
			e.c = adaptive.Resume(*spec, r.st, now)
		} else {
			e.c = adaptive.New(*spec, now)
		}
		delete(t.replicas, key)
		t.ctl[e.key] = e
		t.dirty[e.key] = struct{}{}
	case e.spec != *spec: // the policy changed: carry the controller over
		e.c, e.spec = adaptive.Resume(*spec, e.c.State(), now), *spec
	}
	if scope != "" && len(scope) <= maxScopeLen {
		e.scope = scope
	}
	e.seen = now
	if changed, dir := e.c.Tick(now); changed {
		t.moved(e, dir)
	}
	if e.base != base || e.limit.Count() != e.c.Limit() {
		e.base, e.limit = base, scaled(base, e.c.Limit())
	}
	return e
}

// moved records that e's limit moved in direction dir. Called with t.mu held.
func (t *adaptiveTable) moved(e *ctlEntry, dir int) {
	t.dirty[e.key] = struct{}{}
	if e.scope == "" {
		return
	}
	if _, ok := t.scopes[e.scope]; ok || len(t.scopes) < maxScopes {
		t.scopes[e.scope] = e.c.Limit()
		t.m.changed(e.scope, dir, e.c.Limit())
	}
}

// limit returns base at key's current limit, as the key's owner decides it.
func (t *adaptiveTable) limit(key string, spec *adaptive.Spec, scope string, base bucket.Limit, now clock.Instant) bucket.Limit {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.entry(key, spec, scope, base, now)
	t.noteScope(e)
	return e.limit
}

// noteScope makes a scope seen for the first time known with its key's
// limit. Called with t.mu held.
func (t *adaptiveTable) noteScope(e *ctlEntry) {
	if e.scope == "" {
		return
	}
	if _, ok := t.scopes[e.scope]; !ok && len(t.scopes) < maxScopes {
		t.scopes[e.scope] = e.c.Limit()
		t.m.set(e.scope, e.c.Limit())
	}
}

// observe feeds key's controller one sample and returns its limit after.
func (t *adaptiveTable) observe(key string, spec *adaptive.Spec, scope string, base bucket.Limit, s adaptive.Sample, now clock.Instant) int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.entry(key, spec, scope, base, now)
	t.noteScope(e)
	e.c.Observe(s, now)
	t.dirty[e.key] = struct{}{}
	return e.c.Limit()
}

// standIn returns base at the limit of this node's replicated copy of
// key's controller, or base when it holds none: a successor standing in
// for an owner it cannot reach runs no controller.
func (t *adaptiveTable) standIn(key string, spec *adaptive.Spec, base bucket.Limit, now clock.Instant) bucket.Limit {
	t.mu.Lock()
	r, ok := t.replicas[key]
	t.mu.Unlock()
	if !ok {
		return base
	}
	return scaled(base, adaptive.Resume(*spec, r.st, now).Limit())
}

// state returns key's controller as it travels, or nil when this node runs
// none for it.
func (t *adaptiveTable) state(key string, now clock.Instant) *peermsg.AdaptiveState {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e := t.ctl[key]; e != nil {
		st := peermsg.FromAdaptive(e.c.State(), now)
		return &st
	}
	return nil
}

// replica keeps the controller state from, the key's owner, sent with its
// state. A controller this node ran for the key is dropped: it is from a
// time it owned the key, and would otherwise outlive the owner's.
func (t *adaptiveTable) replica(from string, s *peermsg.State, now clock.Instant) {
	if s.Adaptive == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.ctl, s.Key)
	delete(t.dirty, s.Key)
	if _, ok := t.replicas[s.Key]; !ok && len(t.replicas) >= maxAdaptive {
		evict(t.replicas, now, func(r replicaEntry) clock.Instant { return r.seen }, nil)
	}
	t.replicas[strings.Clone(s.Key)] = replicaEntry{st: s.Adaptive.At(now), from: from, seen: now}
}

// handed takes the controller state a previous owner handed off with the
// key: this node, the new owner, continues from it (a controller it
// started meanwhile, from Initial, gives way).
func (t *adaptiveTable) handed(s *peermsg.State, now clock.Instant) {
	if s.Adaptive == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if e := t.ctl[s.Key]; e != nil {
		e.c = adaptive.Resume(e.spec, s.Adaptive.At(now), now)
		e.limit = scaled(e.base, e.c.Limit())
		t.dirty[e.key] = struct{}{}
		return
	}
	if _, ok := t.replicas[s.Key]; !ok && len(t.replicas) >= maxAdaptive {
		evict(t.replicas, now, func(r replicaEntry) clock.Instant { return r.seen }, nil)
	}
	t.replicas[strings.Clone(s.Key)] = replicaEntry{st: s.Adaptive.At(now), seen: now}
}

// takeDirty returns the keys whose controllers changed since the last
// call (all of them with all), with their states and limits.
func (t *adaptiveTable) takeDirty(now clock.Instant, all bool) []peermsg.State {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []peermsg.State
	add := func(key string, e *ctlEntry) {
		st := peermsg.FromAdaptive(e.c.State(), now)
		out = append(out, peermsg.State{Key: key, Limit: e.limit, Adaptive: &st})
	}
	if all {
		for key, e := range t.ctl {
			add(key, e)
		}
	} else {
		for key := range t.dirty {
			if e := t.ctl[key]; e != nil {
				add(key, e)
			}
		}
	}
	clear(t.dirty)
	return out
}

// pending reports whether a controller changed since the last round.
func (t *adaptiveTable) pending() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.dirty) > 0
}

// forget drops key's controller and replicated state (the key was reset).
func (t *adaptiveTable) forget(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.ctl, key)
	delete(t.replicas, key)
	delete(t.dirty, key)
}

// AdaptiveScope is one adaptive scope of the keys a node owns: the current
// limit of its most recently moved (or first seen) key.
type AdaptiveScope = status.AdaptiveScope

// scopeLimits returns the scopes this node knows, sorted.
func (t *adaptiveTable) scopeLimits() []AdaptiveScope {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]AdaptiveScope, 0, len(t.scopes))
	for s, l := range t.scopes {
		out = append(out, AdaptiveScope{Scope: s, Limit: l})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Scope < out[j].Scope })
	return out
}

// evict makes room in a full table: of up to 64 entries looked at (in
// the map's random order), those not seen for adaptiveIdle go, and if the
// table is still full the least recently seen of them. gone, when not
// nil, is told of each key dropped.
func evict[V any](m map[string]V, now clock.Instant, seen func(V) clock.Instant, gone func(string)) {
	drop := func(k string) {
		delete(m, k)
		if gone != nil {
			gone(k)
		}
	}
	var oldest string
	var at clock.Instant
	n := 0
	for k, v := range m {
		if n++; n > 64 {
			break
		}
		s := seen(v)
		if now.Sub(s) >= adaptiveIdle {
			drop(k)
			continue
		}
		if oldest == "" || s < at {
			oldest, at = k, s
		}
	}
	if len(m) >= maxAdaptive && oldest != "" {
		drop(oldest)
	}
}

// scaled returns base with count n: the same algorithm and period, and a
// burst scaled with the count (base's own burst when it was its count).
// A count base's algorithm cannot take leaves base.
func scaled(base bucket.Limit, n int64) bucket.Limit {
	if n == base.Count() || n < 1 {
		return base
	}
	var burst int64
	if base.Burst() != base.Count() {
		burst = max(int64(float64(base.Burst())*float64(n)/float64(base.Count())), 1)
	}
	l, err := base.WithCount(n, burst)
	if err != nil {
		return base
	}
	return l
}
