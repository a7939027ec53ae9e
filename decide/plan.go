package decide

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/forward"
	"github.com/ringlimit/ringlimit/policy"
	"github.com/ringlimit/ringlimit/rls"
)

// Plan accumulates the checks of a batch of public requests, and holds
// their results. Plans are pooled: take one with GetPlan, give it back
// with Release once its answers are written. A Plan is used by one
// goroutine at a time.
type Plan struct {
	// Op is what Decide does with the plan's checks (OpCheck).
	Op Op
	// LeaseTTL and RequestID are what an acquire asks (OpAcquire, or a
	// policy request with a concurrency layer): the leases' TTL (0: the
	// default, or each layer's lease_ttl) and the id that makes it
	// idempotent ("" none).
	LeaseTTL  time.Duration
	RequestID string

	units   []unit
	checks  []forward.Check
	out     []forward.Result
	answers []Answer
	// rlsScope is the scope of the last RLS domain added, kept from use
	// to use of the pooled plan: the descriptors of one request, and the
	// requests of one domain, share one scope string.
	rlsScope string
}

var planPool = sync.Pool{New: func() any { return new(Plan) }}

// GetPlan returns an empty plan for op from the pool.
func GetPlan(op Op) *Plan {
	p := planPool.Get().(*Plan)
	p.Op = op
	return p
}

// Release empties p (dropping what it refers to, but the scope string of
// its last RLS domain) and returns it to the pool. The answers Decide
// returned for p are invalid afterwards.
func (p *Plan) Release() {
	clear(p.units)
	clear(p.checks)
	clear(p.out)
	clear(p.answers)
	p.units, p.checks, p.out, p.answers = p.units[:0], p.checks[:0], p.out[:0], p.answers[:0]
	p.Op = OpCheck
	p.LeaseTTL, p.RequestID = 0, ""
	planPool.Put(p)
}

// RLSScope is the scope of the RLS descriptors AddRLS added last:
// RLSScopePrefix and their domain.
func (p *Plan) RLSScope() string { return p.rlsScope }

// Grow makes room for n more units of one check each.
func (p *Plan) Grow(n int) {
	p.checks = slices.Grow(p.checks, n)
	p.units = slices.Grow(p.units, n)
}

// Len is the number of units planned.
func (p *Plan) Len() int { return len(p.units) }

// Key is the key of unit i's first check, or "" when it has none.
func (p *Plan) Key(i int) string {
	if u := &p.units[i]; u.to > u.from {
		return p.checks[u.from].Key
	}
	return ""
}

// AddInline adds an inline check, validated by the caller (its key in the
// inline namespace, see bucket.InlineKey).
func (p *Plan) AddInline(c forward.Check) {
	n := len(p.checks)
	p.checks = append(p.checks, c)
	p.units = append(p.units, unit{kind: kindInline, from: n, to: n + 1, per: c.Limit.Window()})
}

// ErrNoPolicy refuses a policy request on a Decider without a Policy.
var ErrNoPolicy = errors.New("policy: this node runs no policy file (start it with --policy); give an inline limit")

// AddPolicy resolves req against the running policy and adds its layers.
// field prefixes the field names of its errors.
func (d *Decider) AddPolicy(p *Plan, field string, req policy.Request) error {
	if d.policy == nil {
		return fmt.Errorf("%s%w", field, ErrNoPolicy)
	}
	version := d.policy.Current().Version
	layers, err := d.policy.Resolve(req)
	if err != nil {
		return fmt.Errorf("%s%w", field, err)
	}
	n := len(p.checks)
	together := int32(len(p.units) + 1) // the request's layers stand or fall together at the pre-limiter
	u := unit{kind: kindPolicy, from: n, layers: layers, version: version}
	if conc := concurrencyLayers(layers); conc > 0 {
		// Concurrency layers are acquired after the rate layers admitted
		// the request (acquire.go), not checked.
		u.all, u.layers = layers, make([]policy.Check, 0, len(layers)-conc)
		for _, l := range layers {
			if l.IsConcurrency() {
				u.conc = append(u.conc, l)
			} else {
				u.layers = append(u.layers, l)
			}
		}
	} else if p.Op == OpAcquire {
		return fmt.Errorf("%s%w", field, ErrNoConcurrencyLayer)
	}
	for _, l := range u.layers {
		p.checks = append(p.checks, forward.Check{Key: l.Key, Limit: l.Limit, Cost: l.Cost, Mode: l.FailureMode,
			Prelimit: l.Prelimit, Together: together, Lease: l.Lease, Sync: l.Sync, Adaptive: l.Adaptive, AdaptiveScope: adaptiveScope(&l)})
	}
	u.to = len(p.checks)
	p.units = append(p.units, u)
	return nil
}

// AddRLS adds an Envoy RLS descriptor of domain that rule matched, with
// its hits. Hits 0 is a peek of cost 1 (as envoyproxy/ratelimit's
// check-only descriptors): OK while at least one unit remains, OVER_LIMIT
// once none does, nothing spent, and the answer's remaining is what
// remains now; hits the rule's limit can never hold (or a rule of 0
// requests per unit) are refused without a check; the others are one
// check of the rule's key, failing closed. Each descriptor is its own answer: none refunds
// another (as envoyproxy/ratelimit). The error, for a rule whose key is
// not a valid key, names no field.
func (p *Plan) AddRLS(domain string, rule *rls.Rule, hits uint64) error {
	n := len(p.checks)
	if len(p.rlsScope) != len(RLSScopePrefix)+len(domain) || p.rlsScope[len(RLSScopePrefix):] != domain {
		p.rlsScope = RLSScopePrefix + domain
	}
	u := unit{kind: kindRLS, from: n, to: n, scope: p.rlsScope}
	cost, peek := int64(min(hits, math.MaxInt64)), hits == 0
	if peek {
		cost = 1
	}
	switch {
	case rule.RequestsPerUnit == 0 || rule.Limit.CheckCost(cost) != nil:
		u.over = true
	default:
		if err := bucket.CheckKey(rule.Key); err != nil {
			return err
		}
		u.peek = peek
		p.checks = append(p.checks, forward.Check{Key: rule.Key, Limit: rule.Limit, Cost: cost, Mode: bucket.FailClosed, Peek: peek})
		u.to = n + 1
		u.per = rule.Limit.Window()
	}
	p.units = append(p.units, u)
	return nil
}

// PeekLast makes the last unit added a peek (see OpPeek), in a plan whose
// other units may be checks (a gRPC batch mixes them).
func (p *Plan) PeekLast() {
	if len(p.units) == 0 {
		return
	}
	u := &p.units[len(p.units)-1]
	if u.kind == kindPolicy {
		u.peek = true // no lease is taken for it either
	}
	for i := u.from; i < u.to; i++ {
		p.checks[i].Peek = true
	}
}
