package decide

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/forward"
	"github.com/ringlimit/ringlimit/policy"
)

// In-flight (concurrency) limits ride the plan: OpAcquire plans an inline
// acquire with AddAcquire and a policy request with AddPolicy, and any
// plan's policy request whose layers include a concurrency layer (a check
// or a forward-auth request too) acquires that layer after its rate
// layers admitted it. Any refusal refuses all: the rate layers are
// refunded as a refused check's are, and the leases taken are released.
// An admitted answer carries the leases' ids joined by LeaseSep.

// Leaser takes, renews and releases the leases of in-flight limits.
// *forward.Router implements it. Implementations must be safe for
// concurrent use.
type Leaser interface {
	Acquire(ctx context.Context, a forward.Acquire) (forward.LeaseResult, error)
	Renew(ctx context.Context, id string, ttl time.Duration) (forward.LeaseResult, error)
	Release(ctx context.Context, id string, o forward.Outcome, latency time.Duration) (forward.ReleaseResult, error)
}

var _ Leaser = (*forward.Router)(nil)

// OpAcquire acquires: an inline acquire (AddAcquire) takes one lease; a
// policy request (AddPolicy) spends its rate layers as OpCheck does and
// acquires its concurrency layers, for Plan.LeaseTTL (0: each layer's
// lease_ttl) capped by each layer's max_lease_ttl, idempotent by
// Plan.RequestID.
const OpAcquire Op = OpPeek + 1

// LeaseSep joins the lease ids of a request's concurrency layers.
const LeaseSep = ","

// MaxJoinedLeases bounds the ids one joined lease may name (a policy
// request has at most a route, a tier and a global layer).
const MaxJoinedLeases = 4

// ErrNoConcurrencyLayer refuses an acquire of a policy request to which no
// concurrency layer applies.
var ErrNoConcurrencyLayer = fmt.Errorf("%w: no concurrency layer applies to this request: acquire needs one (POST /v1/check spends rate layers)", policy.ErrRequest)

// ConcurrencyKey is the stored key of an inline concurrency limit on key,
// as a request names it: its own namespace, which no check can reach.
func ConcurrencyKey(key string) string { return bucket.NamespaceConcurrency + key }

// AddAcquire adds an inline acquire, validated by the caller, with a.Key
// as the request names it (namespaced here, see ConcurrencyKey).
func (p *Plan) AddAcquire(a forward.Acquire) {
	a.Key = ConcurrencyKey(a.Key)
	n := len(p.checks)
	p.units = append(p.units, unit{kind: kindAcquire, from: n, to: n, acquire: &a})
}

// SplitLeases splits a joined lease id into its ids, naming field in its
// errors: 1 to MaxJoinedLeases ids, each one bucket.ParseLeaseID accepts.
func SplitLeases(field, joined string) ([]string, error) {
	if joined == "" {
		return nil, fmt.Errorf("%s: required", field)
	}
	ids := strings.Split(joined, LeaseSep)
	if len(ids) > MaxJoinedLeases {
		return nil, fmt.Errorf("%s: at most %d ids joined by %q, got %d", field, MaxJoinedLeases, LeaseSep, len(ids))
	}
	for _, id := range ids {
		if _, err := bucket.ParseLeaseID(id); err != nil {
			return nil, fmt.Errorf("%s: %w", field, err)
		}
	}
	return ids, nil
}

// leaseAnswer is the answer of one acquire's result, under scope.
func leaseAnswer(r *forward.LeaseResult, scope string) Answer {
	return Answer{Decision: bucket.Decision{Allowed: r.Allowed, Limit: r.Limit, Remaining: max(r.Limit-r.InFlight, 0), RetryAfter: r.RetryAfter},
		Scope: scope, Owner: r.Owner, OwnerAddr: r.OwnerAddr, Degraded: r.Degraded, Checked: true,
		Lease: r.Lease, InFlight: r.InFlight, ExpiresIn: r.ExpiresIn}
}

// acquireInline answers an inline acquire unit.
func (d *Decider) acquireInline(ctx context.Context, p *Plan, u *unit) (Answer, error) {
	a := *u.acquire
	a.RequestID = p.RequestID
	if a.TTL == 0 {
		a.TTL = p.LeaseTTL
	}
	if d.leaser == nil {
		return Answer{}, fmt.Errorf("%w: this node holds no leases", forward.ErrUnavailable)
	}
	r, err := d.leaser.Acquire(ctx, a)
	if err != nil {
		return Answer{}, err
	}
	return leaseAnswer(&r, ScopeInline), nil
}

// acquireLayers acquires the concurrency layers of policy unit u, whose
// rate layers' combined answer is ans, and completes ans: on a refusal
// by an enforced layer it refuses, appends the rate layers' refunds and
// releases the leases taken; else it names the leases and the tightest
// concurrency layer (scope, limit, remaining, in flight, expiry). A dry-run
// layer's refusal only adds to WouldReject. The error of an acquire that
// failed is returned after the leases taken are released.
func (d *Decider) acquireLayers(ctx context.Context, p *Plan, u *unit, ans *Answer, checks []forward.Check, out []forward.Result, refunds *[]forward.Check) error {
	ans.Layers = u.all
	if !ans.Allowed || ans.Peek { // a peek takes no lease
		return nil
	}
	if d.leaser == nil {
		d.refundUnit(u, checks, out, refunds)
		return fmt.Errorf("%w: this node holds no leases", forward.ErrUnavailable)
	}
	var ids []string
	tight := -1
	var tightAns Answer
	for j := range u.conc {
		l := &u.conc[j]
		r, err := d.leaser.Acquire(ctx, forward.Acquire{Key: l.Key, Limit: l.Limit, Mode: l.FailureMode,
			TTL: l.LeaseTTLFor(p.LeaseTTL), RequestID: p.RequestID, Adaptive: l.Adaptive, AdaptiveScope: adaptiveScope(l),
			MaxTTL: l.MaxLeaseTTL})
		if err != nil {
			d.releaseAll(ids)
			d.refundUnit(u, checks, out, refunds)
			return err
		}
		la := leaseAnswer(&r, l.Scope)
		switch {
		case !r.Allowed && l.DryRun:
			ans.WouldReject = append(ans.WouldReject, l.Scope)
		case !r.Allowed:
			d.releaseAll(ids)
			d.refundUnit(u, checks, out, refunds)
			owner := ans.Owner
			*ans = Answer{Decision: la.Decision, Scope: l.Scope, Owner: r.Owner, OwnerAddr: r.OwnerAddr, Degraded: ans.Degraded || r.Degraded,
				WouldReject: ans.WouldReject, Version: ans.Version, Layers: u.all, Checked: true, InFlight: r.InFlight}
			if r.Owner == "" {
				ans.Owner = owner
			}
			return nil
		}
		if r.Lease != "" {
			ids = append(ids, r.Lease)
		}
		if !l.DryRun && (tight < 0 || la.Remaining < tightAns.Remaining) {
			tight, tightAns = j, la
		}
		if !l.DryRun && r.Degraded {
			ans.Degraded = true
		}
	}
	ans.Lease = strings.Join(ids, LeaseSep)
	if tight >= 0 {
		ans.Scope, ans.Limit, ans.Remaining = tightAns.Scope, tightAns.Limit, tightAns.Remaining
		ans.Owner, ans.OwnerAddr = tightAns.Owner, tightAns.OwnerAddr
		ans.InFlight, ans.ExpiresIn = tightAns.InFlight, tightAns.ExpiresIn
		ans.Per, ans.ResetAfter = 0, 0
	}
	return nil
}

// refundUnit appends the refunds of every rate layer of u that spent.
func (d *Decider) refundUnit(u *unit, checks []forward.Check, out []forward.Result, refunds *[]forward.Check) {
	for i := u.from; i < u.to; i++ {
		if out[i].Allowed && !out[i].Skipped && !checks[i].Peek {
			c := checks[i]
			c.Refund = true
			*refunds = append(*refunds, c)
		}
	}
}

// releaseAll gives back the leases ids of an acquire that did not
// complete, as dropped (they covered no work), on a context of its own:
// the request's may be what ended.
func (d *Decider) releaseAll(ids []string) {
	if len(ids) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	for _, id := range ids {
		if _, err := d.leaser.Release(ctx, id, forward.OutcomeDropped, 0); err != nil {
			d.log.Warn("release of a lease not granted failed; it frees at its TTL", "err", err)
		}
	}
}

// releaseTimeout bounds releaseAll.
const releaseTimeout = 5 * time.Second

// Renew extends each lease of a joined id by ttl from now (0:
// bucket.DefaultLeaseTTL), under the Decider's deadline. It tries every id and
// returns forward.ErrLeaseNotFound when any is gone; the result is the
// first id's, with the soonest expiry.
func (d *Decider) Renew(ctx context.Context, joined string, ttl time.Duration) (forward.LeaseResult, error) {
	ids, err := SplitLeases("lease", joined)
	if err != nil {
		return forward.LeaseResult{}, fmt.Errorf("%w: %w", forward.ErrInvalid, err)
	}
	if d.leaser == nil {
		return forward.LeaseResult{}, fmt.Errorf("%w: this node holds no leases", forward.ErrUnavailable)
	}
	if ttl == 0 {
		ttl = bucket.DefaultLeaseTTL
	}
	ctx = d.Bound(ctx)
	var first forward.LeaseResult
	var errs []error
	got := false
	for _, id := range ids {
		r, err := d.leaser.Renew(ctx, id, ttl)
		switch {
		case err != nil:
			errs = append(errs, err)
		case !got:
			first, got = r, true
		default:
			first.ExpiresIn = min(first.ExpiresIn, r.ExpiresIn)
		}
	}
	for _, err := range errs {
		if errors.Is(err, forward.ErrLeaseNotFound) {
			return forward.LeaseResult{}, err
		}
	}
	if len(errs) > 0 {
		return forward.LeaseResult{}, errs[0]
	}
	first.Lease = joined
	return first, nil
}

// Release gives back each lease of a joined id with the outcome and
// latency of its work, under the Decider's deadline. Released is true
// when any was released by this call; the counts are the first id's.
// Idempotent.
func (d *Decider) Release(ctx context.Context, joined string, o forward.Outcome, latency time.Duration) (forward.ReleaseResult, error) {
	ids, err := SplitLeases("lease", joined)
	if err != nil {
		return forward.ReleaseResult{}, fmt.Errorf("%w: %w", forward.ErrInvalid, err)
	}
	if d.leaser == nil {
		return forward.ReleaseResult{}, fmt.Errorf("%w: this node holds no leases", forward.ErrUnavailable)
	}
	ctx = d.Bound(ctx)
	var res forward.ReleaseResult
	var errs []error
	for i, id := range ids {
		r, err := d.leaser.Release(ctx, id, o, latency)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if i == 0 {
			res = r
		}
		res.Released = res.Released || r.Released
	}
	if len(errs) > 0 {
		return forward.ReleaseResult{}, errors.Join(errs...)
	}
	return res, nil
}

// concurrencyLayers counts the concurrency layers of layers.
func concurrencyLayers(layers []policy.Check) int {
	n := 0
	for i := range layers {
		if layers[i].IsConcurrency() {
			n++
		}
	}
	return n
}

// rollback undoes what a plan did before unit i's acquire failed with
// err: the rate layers of the units answered before it are refunded and
// their leases released (unit i's were by acquireLayers), so that a
// failed plan changes no state; it returns err.
func (d *Decider) rollback(ctx context.Context, p *Plan, i int, refunds []forward.Check, err error) error {
	var ids []string
	for j := range i {
		u, ans := &p.units[j], &p.answers[j]
		if !ans.Allowed || ans.Peek {
			continue
		}
		if ans.Lease != "" {
			ids = append(ids, strings.Split(ans.Lease, LeaseSep)...)
		}
		for k := u.from; k < u.to; k++ {
			if c := p.checks[k]; p.out[k].Allowed && !p.out[k].Skipped && !c.Peek && c.Reserve == 0 {
				c.Refund = true
				refunds = append(refunds, c)
			}
		}
	}
	d.releaseAll(ids)
	if len(refunds) > 0 {
		rout := make([]forward.Result, len(refunds))
		if rerr := d.checker.Check(context.WithoutCancel(ctx), refunds, rout); rerr != nil {
			d.log.Warn("refund failed", "checks", len(refunds), "err", rerr)
		}
	}
	return err
}
