package decide

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/forward"
	"github.com/ringlimit/ringlimit/internal/deadline"
	"github.com/ringlimit/ringlimit/internal/discard"
	"github.com/ringlimit/ringlimit/policy"
)

// Checker decides a batch of checks, one Result per check in order. It must
// return an error wrapping forward.ErrInvalid, and apply nothing, when a
// check is invalid. *forward.Router implements it.
type Checker interface {
	Check(ctx context.Context, checks []forward.Check, out []forward.Result) error
}

// Policy is what the decide path asks of the running policy: the layers
// of a request, and the set they came from (for its version).
// *policy.Manager implements it. Implementations must be safe for
// concurrent use.
type Policy interface {
	Resolve(policy.Request) ([]policy.Check, error)
	Current() *policy.Set
}

// Observer is told what the Decider decided, for metrics. Its methods are
// called on the request's goroutine, concurrently for concurrent
// requests, and must not block.
type Observer interface {
	// Checked follows each batch the Checker decided (refunds excluded):
	// the checks, their results (meaningful only when err is nil), how
	// long the Checker took, and its error.
	Checked(surface string, checks []forward.Check, out []forward.Result, took time.Duration, err error)
	// Answered follows each combined answer of an inline or policy unit
	// (RLS units are counted by their adapter, which knows shadow mode).
	Answered(ans *Answer)
}

var (
	_ Checker = (*forward.Router)(nil)
	_ Policy  = (*policy.Manager)(nil)
)

// Config configures a Decider.
type Config struct {
	// Checker decides checks. Required.
	Checker Checker
	// Policy resolves policy requests. Nil: a policy request is refused
	// as bad input.
	Policy Policy
	// CountDryRun is told the scopes of the dry-run layers that would have
	// rejected a request (policy.Manager.CountDryRun counts them in
	// ringlimit_policy_dry_run_rejections_total). Nil: not counted.
	CountDryRun func(scopes []string)
	// Observer is told of each batch and answer. Nil: nobody.
	Observer Observer
	// Logger receives dry-run rejections and failed refunds. Nil discards.
	Logger *slog.Logger
	// CheckTimeout is the Decider's own deadline for one request's checks
	// (the caller's deadline still applies when sooner), rounded up to a
	// 64th of it (see internal/deadline). Zero means none; must not be
	// negative.
	CheckTimeout time.Duration
	// Self is this node's name: a check another node decided counts as
	// forwarded in Activity. Empty: none does.
	Self string
	// Settler settles reservations (Decider.Settle). Nil: a settle fails
	// as unavailable.
	Settler Settler
	// Leaser takes, renews and releases the leases of in-flight limits
	// (OpAcquire, a policy's concurrency layers, Renew, Release). Nil:
	// each fails as unavailable.
	Leaser Leaser
	// Reporter sends reports to adaptive keys' owners (Decider.Report).
	// Nil: a report of a request with an adaptive layer fails as
	// unavailable.
	Reporter Reporter
}

// Decider turns public requests into layer checks, has the Checker decide
// them, and combines each request's layers into one answer. It knows no
// transport. It is safe for concurrent use.
type Decider struct {
	checker   Checker
	policy    Policy
	dryRun    func([]string)
	obs       Observer
	log       *slog.Logger
	deadlines *deadline.Shared // nil: no deadline of the Decider's own
	self      string
	act       activity
	settler   Settler
	leaser    Leaser
	reporter  Reporter
}

// New validates cfg and returns a Decider.
func New(cfg Config) (*Decider, error) {
	if cfg.Checker == nil {
		return nil, errors.New("decide: Checker is required")
	}
	if cfg.CheckTimeout < 0 {
		return nil, fmt.Errorf("decide: CheckTimeout must not be negative, got %v", cfg.CheckTimeout)
	}
	d := &Decider{checker: cfg.Checker, policy: cfg.Policy, dryRun: cfg.CountDryRun, obs: cfg.Observer,
		log: discard.Logger(cfg.Logger), self: cfg.Self, settler: cfg.Settler, leaser: cfg.Leaser,
		reporter: cfg.Reporter}
	if cfg.CheckTimeout > 0 {
		d.deadlines = deadline.New(cfg.CheckTimeout)
	}
	return d, nil
}

// Op is what a plan asks of its checks: check or peek; settle (adjust a
// spend after the fact) and acquire (in-flight limits) join as further
// Ops: each plans its units with the same Add methods and is executed by
// its own branch of Decide, combined by the same rules.
type Op uint8

const (
	// OpCheck spends each request's cost when all its layers admit it;
	// layers that admitted a request another refused are refunded.
	OpCheck Op = iota
	// OpPeek answers what OpCheck would answer now and spends nothing:
	// every check is a peek (forward.Check.Peek), a policy request's
	// layers are combined as a check's (nothing to refund), and its
	// dry-run layers are reported in WouldReject but not counted as
	// dry-run rejections.
	OpPeek
)

// ScopeInline is the scope of a limit given inline in the request.
const ScopeInline = "inline"

// RLSScopePrefix prefixes the domain of an RLS descriptor a rule matched,
// as the scope of its answer.
const RLSScopePrefix = "rls:"

// kind is what a unit came from.
type kind uint8

const (
	kindInline kind = iota
	kindPolicy
	kindRLS
	kindAcquire // an inline acquire (acquire.go): no check
)

// unit is one public request: an inline limit (one check), a policy
// request (one check per layer) or an RLS descriptor (one check, or none
// when it is decided without one), occupying checks[from:to].
type unit struct {
	kind     kind
	from, to int
	per      time.Duration  // inline: the limit's period
	layers   []policy.Check // policy: the layers, in order
	version  string         // policy: the version that resolved it
	scope    string         // rls: RLSScopePrefix + domain
	over     bool           // rls without a check: refused outright
	peek     bool           // rls: a descriptor's hits 0, a peek of cost 1; policy: a peek (PeekLast)
	// conc are a policy request's concurrency layers, acquired after its
	// rate layers (layers) admitted it; all are its layers in order. Nil
	// when it has none.
	conc, all []policy.Check
	acquire   *forward.Acquire // kindAcquire: the acquire, its key namespaced
}

// Answer is one unit's combined decision.
type Answer struct {
	bucket.Decision
	// Per is the period of the limit that decided.
	Per       time.Duration
	Scope     string
	Owner     string
	OwnerAddr string
	// Degraded: an enforced layer was answered by its failure mode.
	Degraded bool
	// WouldReject are the dry-run layers that would have rejected.
	WouldReject []string
	// Version is the policy version that resolved a policy request.
	Version string
	// Layers are a policy request's layers, in order (nil otherwise).
	Layers []policy.Check
	// Checked is false for an RLS descriptor decided without a check:
	// more than its limit can hold.
	Checked bool
	// Reservation is the id an admitted inline check with Reserve got.
	Reservation string
	// Peek: nothing was spent (OpPeek, or an RLS descriptor's hits 0).
	Peek bool
	// Lease is the lease an admitted acquire holds (several concurrency
	// layers': their ids joined by LeaseSep); InFlight the leases of the
	// deciding concurrency layer's key after the answer, ExpiresIn the
	// lease's time to live. Zero without a concurrency layer.
	Lease     string
	InFlight  int64
	ExpiresIn time.Duration
}

// Bound returns ctx under the Decider's own deadline for one request's
// checks (Config.CheckTimeout), unless ctx already ends by then, as a call
// from Envoy (whose rate limit filter sets a timeout) does. The deadline is
// shared with the requests that start within the same tick (a 64th of
// CheckTimeout, see internal/deadline): no request has a timer of its own.
func (d *Decider) Bound(ctx context.Context) context.Context {
	if d.deadlines == nil {
		return ctx
	}
	return d.deadlines.Bound(ctx)
}

// Batch has the Checker decide checks, tells the Observer and counts the
// results in Activity. The latency is read from the runtime's monotonic
// clock, not a clock.Clock: it measures how long the checker took and
// decides nothing, and a fake clock in a test would only make it read zero.
func (d *Decider) Batch(ctx context.Context, surface string, checks []forward.Check, out []forward.Result) error {
	start := time.Now()
	err := d.checker.Check(ctx, checks, out)
	if d.obs != nil {
		d.obs.Checked(surface, checks, out, time.Since(start), err)
	}
	if err != nil {
		return err
	}
	d.act.note(d.self, checks, out[:len(checks)])
	return nil
}

// Decide executes p under the Decider's deadline and answers each unit, in
// order. The answers live in p until it is released.
func (d *Decider) Decide(ctx context.Context, surface string, p *Plan) ([]Answer, error) {
	switch p.Op {
	case OpCheck:
		return d.check(d.Bound(ctx), surface, p)
	case OpPeek:
		for i := range p.checks {
			p.checks[i].Peek = true
		}
		for i := range p.units {
			if p.units[i].kind == kindPolicy {
				p.units[i].peek = true
			}
		}
		return d.check(d.Bound(ctx), surface, p)
	case OpAcquire:
		return d.check(d.Bound(ctx), surface, p)
	}
	return nil, fmt.Errorf("decide: unknown op %d", p.Op)
}

// check runs a plan's checks and combines each unit's decisions: an
// inline check and an RLS descriptor are their own answer; a policy
// request's layers are combined by policy.Combine (any rejection rejects,
// the rejecting layer names the scope), and the layers that admitted a
// request another layer rejected are refunded.
func (d *Decider) check(ctx context.Context, surface string, p *Plan) ([]Answer, error) {
	p.out = slices.Grow(p.out[:0], len(p.checks))[:len(p.checks)]
	out := p.out
	if len(p.checks) > 0 {
		if err := d.Batch(ctx, surface, p.checks, out); err != nil {
			return nil, err
		}
	}
	p.answers = slices.Grow(p.answers[:0], len(p.units))[:len(p.units)]
	answers := p.answers
	var refunds []forward.Check
	for i := range p.units {
		u := &p.units[i]
		switch u.kind {
		case kindInline:
			r := &out[u.from]
			answers[i] = Answer{Decision: r.Decision, Per: u.per, Scope: ScopeInline, Owner: r.Owner, OwnerAddr: r.OwnerAddr, Degraded: r.Degraded, Checked: true,
				Reservation: r.Reservation, Peek: p.checks[u.from].Peek}
		case kindRLS:
			if u.to > u.from {
				r := &out[u.from]
				answers[i] = Answer{Decision: r.Decision, Per: u.per, Scope: u.scope, Owner: r.Owner, OwnerAddr: r.OwnerAddr, Degraded: r.Degraded, Checked: true,
					Peek: p.checks[u.from].Peek}
				if u.peek && r.Allowed {
					// A descriptor's hits 0 peeks at one unit: what
					// remains now is that unit and what it leaves.
					answers[i].Remaining++
				}
			} else {
				answers[i] = Answer{Decision: bucket.Decision{Allowed: !u.over}, Scope: u.scope}
			}
			continue // counted by the adapter
		case kindPolicy:
			answers[i] = d.combine(u, p.checks, out, &refunds)
			if u.conc != nil {
				if err := d.acquireLayers(ctx, p, u, &answers[i], p.checks, out, &refunds); err != nil {
					return nil, d.rollback(ctx, p, i, refunds, err)
				}
			}
		case kindAcquire:
			ans, err := d.acquireInline(ctx, p, u)
			if err != nil {
				return nil, d.rollback(ctx, p, i, refunds, err)
			}
			answers[i] = ans
		}
		if d.obs != nil {
			d.obs.Answered(&answers[i])
		}
	}
	if len(refunds) > 0 {
		rout := make([]forward.Result, len(refunds))
		if err := d.checker.Check(ctx, refunds, rout); err != nil {
			d.log.Warn("refund failed", "checks", len(refunds), "err", err)
		}
	}
	return answers, nil
}

// combine answers one policy unit and appends the refunds it needs.
func (d *Decider) combine(u *unit, checks []forward.Check, out []forward.Result, refunds *[]forward.Check) Answer {
	decisions := make([]bucket.Decision, len(u.layers))
	for j := range decisions {
		decisions[j] = out[u.from+j].Decision
		if out[u.from+j].Skipped {
			// Not decided (another layer was shed): it neither limits
			// nor needs a refund.
			decisions[j] = bucket.Decision{Allowed: true, Remaining: math.MaxInt64}
		}
	}
	o := policy.Combine(u.layers, decisions)
	peek := u.peek || u.to > u.from && checks[u.from].Peek // u.peek: a policy unit without rate layers
	ans := Answer{
		Peek:        peek,
		Decision:    bucket.Decision{Allowed: o.Allowed, Limit: o.Limit, Remaining: o.Remaining, RetryAfter: o.RetryAfter, ResetAfter: o.ResetAfter, Delay: o.Delay},
		Per:         o.Per,
		Scope:       o.Scope,
		WouldReject: o.WouldReject,
		Version:     u.version,
		Layers:      u.layers,
		Checked:     true,
	}
	for j, l := range u.layers {
		r := &out[u.from+j]
		if l.Scope == o.Scope {
			ans.Owner = r.Owner
		}
		if !l.DryRun && r.Degraded {
			ans.Degraded = true
		}
	}
	if peek { // nothing was spent: nothing to refund, no dry-run rejection to count
		return ans
	}
	for _, j := range o.Refund {
		if out[u.from+j].Skipped {
			continue
		}
		c := checks[u.from+j]
		c.Refund = true
		*refunds = append(*refunds, c)
	}
	if len(o.WouldReject) > 0 {
		if d.dryRun != nil {
			d.dryRun(o.WouldReject)
		}
		d.log.Info("dry-run layer would have rejected", "scopes", o.WouldReject, "key", u.layers[0].Key)
	}
	return ans
}
