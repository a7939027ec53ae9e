package forward

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ringlimit/ringlimit/adaptive"
	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/clock"
	"github.com/ringlimit/ringlimit/internal/peermsg"
)

// Reporter sends a report to a key's owner (peer.Pool).
type Reporter interface {
	// Report asks name to observe q; with q.Final, whatever its ring says.
	Report(ctx context.Context, name string, q peermsg.ReportRequest) (peermsg.ReportAnswer, error)
}

// ReportResult is the answer to a report.
type ReportResult struct {
	// Limit is the key's current limit after the report.
	Limit int64
	// Owner is the node that observed it.
	Owner string
}

// MaxReportLatency bounds a report's latency: longer is read as this.
const MaxReportLatency = time.Hour

// adaptCheck returns c with its Limit at the key's current adaptive limit,
// this node being the key's owner (c itself when it has no adaptive limit).
func (r *Router) adaptCheck(c *Check, now clock.Instant) *Check {
	if c.Adaptive == nil {
		return c
	}
	cc := *c
	cc.Limit = r.adapt.limit(c.Key, c.Adaptive, c.AdaptiveScope, c.Limit, now)
	return &cc
}

// answeredCount is the count a forwarded check was decided under: the
// owner's adaptive limit when it says one.
func answeredCount(c *Check, a *peermsg.Answer) int64 {
	if c.Adaptive != nil && a.Limit > 0 {
		return a.Limit
	}
	return c.Limit.Count()
}

// Report tells the owner of key, under the layer limit l and its adaptive
// spec, how a request it admitted ended: the owner's controller observes
// it (Router.ReportScope with no scope).
func (r *Router) Report(ctx context.Context, key string, l bucket.Limit, spec *adaptive.Spec, o Outcome, latency time.Duration) (ReportResult, error) {
	return r.ReportScope(ctx, "", key, l, spec, o, latency)
}

// ReportScope is Report for the layer named scope. The sample's InFlight,
// for a rate limit, is what the key has spent of its current limit when
// the owner observes the report: for a window algorithm the requests the
// current window admitted, for a bucket the tokens not yet refilled; for
// a concurrency limit, the leases in flight (whose releases are samples
// too: report only what is not released). It
// returns an error wrapping ErrInvalid for a bad key, limit, spec or
// outcome, or one wrapping ErrUnavailable when the owner cannot be reached
// (a lost report costs one sample; it is not retried).
func (r *Router) ReportScope(ctx context.Context, scope, key string, l bucket.Limit, spec *adaptive.Spec, o Outcome, latency time.Duration) (ReportResult, error) {
	res, err := r.report(ctx, scope, key, l, spec, o, latency)
	switch {
	case err == nil:
		r.adapt.m.report(reportObserved)
	case errors.Is(err, ErrInvalid):
		r.adapt.m.report(reportInvalid)
	default:
		r.adapt.m.report(reportUnavailable)
	}
	return res, err
}

func (r *Router) report(ctx context.Context, scope, key string, l bucket.Limit, spec *adaptive.Spec, o Outcome, latency time.Duration) (ReportResult, error) {
	if err := bucket.CheckKey(key); err != nil {
		return ReportResult{}, fmt.Errorf("%w: key: %w", ErrInvalid, err)
	}
	if !l.Valid() {
		return ReportResult{}, fmt.Errorf("%w: limit: missing", ErrInvalid)
	}
	if spec == nil {
		return ReportResult{}, fmt.Errorf("%w: adaptive: missing", ErrInvalid)
	}
	if err := spec.Validate(); err != nil {
		return ReportResult{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if o > OutcomeDropped {
		return ReportResult{}, fmt.Errorf("%w: outcome: want ok, error or dropped, got %d", ErrInvalid, o)
	}
	q := peermsg.ReportRequest{Key: key, Limit: l, Spec: *spec, Scope: scope, Outcome: adaptive.Outcome(o),
		Latency: min(max(latency, 0), MaxReportLatency)}
	v := r.entryView(ctx)
	if v.noOwner() {
		return ReportResult{}, fmt.Errorf("%w: no owner for the key", ErrUnavailable)
	}
	owner := ownerIn(v.ring, r.cfg.Self, key)
	for hop := 0; ; hop++ {
		if owner == r.cfg.Self {
			a := r.observe(&q)
			return ReportResult{Limit: a.Limit, Owner: a.Owner}, nil
		}
		if r.cfg.Reporter == nil {
			return ReportResult{}, fmt.Errorf("%w: %s", ErrUnavailable, owner)
		}
		a, err := r.cfg.Reporter.Report(ctx, owner, q)
		if err != nil {
			if ctx.Err() != nil {
				return ReportResult{}, ctx.Err()
			}
			return ReportResult{}, fmt.Errorf("%w: %s: %w", ErrUnavailable, owner, err)
		}
		if a.Redirect == "" {
			return ReportResult{Limit: a.Limit, Owner: a.Owner}, nil
		}
		if hop >= 1 {
			return ReportResult{}, fmt.Errorf("%w: %s redirected again", ErrUnavailable, owner)
		}
		owner, q.Final = a.Redirect, true
	}
}

// ReportFor implements peer.Reporter: a report another node sent. A
// receiver whose ring names another owner redirects it, unless final. It
// must not trust q: the peer server validated the key, limit and spec.
func (r *Router) ReportFor(ctx context.Context, from string, q peermsg.ReportRequest) peermsg.ReportAnswer {
	v := r.awaitMember(ctx, from)
	if owner := ownerIn(v.ring, r.cfg.Self, q.Key); owner != r.cfg.Self && !q.Final {
		return peermsg.ReportAnswer{Redirect: owner}
	}
	q.Latency = min(max(q.Latency, 0), MaxReportLatency)
	return r.observe(&q)
}

// observe feeds q to the key's controller on this node, its owner.
func (r *Router) observe(q *peermsg.ReportRequest) peermsg.ReportAnswer {
	now := r.cfg.Clock.Now()
	var inFlight int64
	if q.Limit.Algorithm() == bucket.Concurrency {
		inFlight = r.slots.InFlight(q.Key, now)
	} else if _, used, ok := r.cfg.Store.Used(q.Key, now); ok {
		inFlight = max(used, 0)
	}
	limit := r.adapt.observe(q.Key, &q.Spec, q.Scope, q.Limit,
		adaptive.Sample{Outcome: q.Outcome, Latency: q.Latency, InFlight: inFlight}, now)
	return peermsg.ReportAnswer{Limit: limit, Owner: r.cfg.Self}
}

// AdaptiveScopes returns the adaptive scopes of the keys this node owns,
// each with the current limit of its most recently moved key, sorted by
// scope (the status page).
func (r *Router) AdaptiveScopes() []AdaptiveScope { return r.adapt.scopeLimits() }
