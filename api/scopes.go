package api

import (
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// The results of ringlimit_decisions_total.
const (
	decisionAllowed = iota
	decisionRejected
	decisionDegraded
	decisionDryRun
	numDecisionResults
)

var decisionResultNames = [numDecisionResults]string{"allowed", "rejected", "degraded", "dry_run"}

// maxScopes is how many distinct scopes ringlimit_decisions_total labels;
// the answers of any later scope are counted under scopeOther. Scopes come
// from the policy file (its tiers, routes and layers), incident overrides
// and the RLS configuration's domains, so a node normally sees far fewer;
// the cap only bounds the series a policy reload after reload could add.
const maxScopes = 100

// scopeOther is the scope label of the answers of scopes past maxScopes.
const scopeOther = "other"

// scopeCounters caches ringlimit_decisions_total's counters by scope, for
// at most limit scopes (then scopeOther). A scope seen once is looked up
// without a lock: the map is copied on write (scopes are few and stable).
// It is safe for concurrent use.
type scopeCounters struct {
	vec   *prometheus.CounterVec
	limit int
	by    atomic.Pointer[map[string]*[numDecisionResults]prometheus.Counter]
	mu    sync.Mutex // serialises writers of by
	other *[numDecisionResults]prometheus.Counter
	// inline are ScopeInline's counters, the scope of every inline check,
	// kept apart so that the commonest answer looks up no map.
	inline *[numDecisionResults]prometheus.Counter
}

func newScopeCounters(vec *prometheus.CounterVec, limit int) *scopeCounters {
	s := &scopeCounters{vec: vec, limit: limit}
	s.by.Store(&map[string]*[numDecisionResults]prometheus.Counter{})
	s.other = s.counters(scopeOther)
	// The inline scope is there from the start, with every result at 0,
	// so that a dashboard or an alert on degraded answers has a series to
	// read before the first one happens.
	s.inline = s.lookup(ScopeInline)
	return s
}

func (s *scopeCounters) counters(scope string) *[numDecisionResults]prometheus.Counter {
	var c [numDecisionResults]prometheus.Counter
	for r := range c {
		c[r] = s.vec.WithLabelValues(scope, decisionResultNames[r])
	}
	return &c
}

// lookup returns scope's counters, creating them while fewer than limit
// scopes have been seen, and the counters of scopeOther after that.
func (s *scopeCounters) lookup(scope string) *[numDecisionResults]prometheus.Counter {
	if c, ok := (*s.by.Load())[scope]; ok {
		return c
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old := *s.by.Load()
	if c, ok := old[scope]; ok {
		return c
	}
	if len(old) >= s.limit {
		return s.other
	}
	c := s.counters(scope)
	next := make(map[string]*[numDecisionResults]prometheus.Counter, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	next[scope] = c
	s.by.Store(&next)
	return c
}

// count adds one answer of scope with result (decisionAllowed, ...).
func (s *scopeCounters) count(scope string, result int) {
	if scope == ScopeInline {
		s.inline[result].Inc()
		return
	}
	s.lookup(scope)[result].Inc()
}
