package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/clock"
	"github.com/ringlimit/ringlimit/forward"
	"github.com/ringlimit/ringlimit/policy"
	"github.com/ringlimit/ringlimit/ratelimitheader"
)

// PolicySource is the running policy. *policy.Manager implements it.
type PolicySource interface {
	Resolve(policy.Request) ([]policy.Check, error)
	CountDryRun(scopes []string)
	Current() *policy.Set
	Overrides() []policy.Override
	// Now reads the clock override expiries are compared with: an override
	// that lasts d is stamped to expire at Now().Add(d).
	Now() clock.Instant
}

var _ PolicySource = (*policy.Manager)(nil)

// OverrideFunc installs an incident override across the cluster and
// returns it as installed.
type OverrideFunc func(ctx context.Context, o policy.Override) (policy.Override, error)

// RevokeFunc revokes the incident override with the given ID across the
// cluster, audited as revoked by actor, and returns it. It returns an
// error wrapping policy.ErrNoOverride when no override in force has that ID.
type RevokeFunc func(ctx context.Context, id, actor string) (policy.Override, error)

// unit is one public check: an inline limit (one forward check) or a policy
// request (one forward check per layer), occupying checks[from:to] of the
// flattened batch.
type unit struct {
	from, to int
	per      time.Duration  // inline: the limit's period
	layers   []policy.Check // policy: the layers, in order
	version  string         // policy: the version that resolved it
}

// answer is one public check's combined decision.
type answer struct {
	bucket.Decision
	Per         time.Duration
	Scope       string
	Owner       string
	OwnerAddr   string
	Degraded    bool
	WouldReject []string
	Version     string
	layers      []policy.Check
	private     bool // hidden (hide): the headers name scopes by kind
}

// plan accumulates the forward checks of a batch of public checks, and
// holds their results. Plans are pooled: a handler takes one with getPlan
// and gives it back with release once it has written its answer.
type plan struct {
	units   []unit
	checks  []forward.Check
	out     []forward.Result
	answers []answer
}

var planPool = sync.Pool{New: func() any { return new(plan) }}

func getPlan() *plan { return planPool.Get().(*plan) }

// release empties p (dropping what it refers to) and returns it to the pool.
func (p *plan) release() {
	clear(p.units)
	clear(p.checks)
	clear(p.out)
	clear(p.answers)
	p.units, p.checks, p.out, p.answers = p.units[:0], p.checks[:0], p.out[:0], p.answers[:0]
	planPool.Put(p)
}

func (p *plan) addInline(c forward.Check) {
	n := len(p.checks)
	p.checks = append(p.checks, c)
	p.units = append(p.units, unit{from: n, to: n + 1, per: c.Limit.Per()})
}

// addPolicy resolves req against the running policy.
func (a *API) addPolicy(p *plan, field string, req policy.Request) error {
	if a.policy == nil {
		return fmt.Errorf("%spolicy: this node runs no policy file (start it with --policy); give an inline limit", field)
	}
	version := a.policy.Current().Version
	layers, err := a.policy.Resolve(req)
	if err != nil {
		return fmt.Errorf("%s%w", field, err)
	}
	n := len(p.checks)
	together := int32(len(p.units) + 1) // the request's layers stand or fall together at the pre-limiter
	for _, l := range layers {
		p.checks = append(p.checks, forward.Check{Key: l.Key, Limit: l.Limit, Cost: l.Cost, Mode: l.FailureMode,
			Prelimit: l.Prelimit, Together: together, Lease: l.Lease, Sync: l.Sync})
	}
	p.units = append(p.units, unit{from: n, to: len(p.checks), layers: layers, version: version})
	return nil
}

// decide runs a plan and combines each unit's decisions. Layers that
// admitted a request another layer rejected are refunded.
func (a *API) decide(ctx context.Context, surface string, p *plan) ([]answer, error) {
	ctx = a.bounded(ctx)
	p.out = slices.Grow(p.out[:0], len(p.checks))[:len(p.checks)]
	out := p.out
	if err := a.check(ctx, surface, p.checks, out); err != nil {
		return nil, err
	}
	p.answers = slices.Grow(p.answers[:0], len(p.units))[:len(p.units)]
	answers := p.answers
	var refunds []forward.Check
	for i, u := range p.units {
		if u.layers == nil {
			r := &out[u.from]
			answers[i] = answer{Decision: r.Decision, Per: u.per, Scope: ScopeInline, Owner: r.Owner, OwnerAddr: r.OwnerAddr, Degraded: r.Degraded}
			a.m.countAnswer(&answers[i])
			continue
		}
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
		ans := answer{
			Decision:    bucket.Decision{Allowed: o.Allowed, Limit: o.Limit, Remaining: o.Remaining, RetryAfter: o.RetryAfter, ResetAfter: o.ResetAfter, Delay: o.Delay},
			Per:         o.Per,
			Scope:       o.Scope,
			WouldReject: o.WouldReject,
			Version:     u.version,
			layers:      u.layers,
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
		for _, j := range o.Refund {
			if out[u.from+j].Skipped {
				continue
			}
			c := p.checks[u.from+j]
			c.Refund = true
			refunds = append(refunds, c)
		}
		if len(o.WouldReject) > 0 {
			a.policy.CountDryRun(o.WouldReject)
			a.log.Info("dry-run layer would have rejected", "scopes", o.WouldReject, "key", u.layers[0].Key)
		}
		answers[i] = ans
		a.m.countAnswer(&answers[i])
	}
	if len(refunds) > 0 {
		rout := make([]forward.Result, len(refunds))
		if err := a.checker.Check(ctx, refunds, rout); err != nil {
			a.log.Warn("refund failed", "checks", len(refunds), "err", err)
		}
	}
	return answers, nil
}

// writeHeaders writes the rate-limit headers of an answer: every enforced
// layer in RateLimit-Policy (the inline limit alone for an inline check),
// the one that decided in RateLimit, and Retry-After on a rejection.
func writeHeaders(h http.Header, ans *answer) {
	d := ratelimitheader.Decision{Allowed: ans.Allowed, Scope: ans.Scope, Limit: ans.Limit, Window: ans.Per,
		Remaining: ans.Remaining, Reset: ans.ResetAfter, RetryAfter: ans.RetryAfter}
	var buf [4]ratelimitheader.Policy
	enforced := buf[:0]
	for _, l := range ans.layers {
		if !l.DryRun {
			name := l.Scope
			if ans.private {
				name = scopeKind(name)
			}
			enforced = append(enforced, ratelimitheader.Policy{Name: name, Quota: l.Limit.Count(), Window: l.Limit.Per()})
		}
	}
	ratelimitheader.Write(h, &d, enforced...)
}

// PolicyStatus is the body of GET /v1/policy.
type PolicyStatus struct {
	Version   string            `json:"version"`
	Source    string            `json:"source"`
	Default   string            `json:"default"`
	Policies  []string          `json:"policies"`
	Overrides []policy.Override `json:"overrides"`
}

// OverrideRequest is the body of POST /v1/overrides.
type OverrideRequest struct {
	// Actor is accepted for compatibility and ignored: the override, and
	// its audit line, name the admin token the request authenticated with.
	Actor     string           `json:"actor,omitempty"`
	Reason    string           `json:"reason"`
	Policy    string           `json:"policy,omitempty"`
	APIKey    string           `json:"api_key,omitempty"`
	User      string           `json:"user,omitempty"`
	Tier      string           `json:"tier,omitempty"`
	Limit     *policy.LimitArg `json:"limit,omitempty"`
	ExpiresIn string           `json:"expires_in"`
}

// MaxOverride is the longest an incident override may last.
const MaxOverride = policy.MaxOverrideTTL

func (a *API) handlePolicy(w http.ResponseWriter, _ *http.Request) {
	set := a.policy.Current()
	st := PolicyStatus{Version: set.Version, Source: set.Source, Default: set.Default, Overrides: a.policy.Overrides()}
	for name := range set.Policies {
		st.Policies = append(st.Policies, name)
	}
	slices.Sort(st.Policies)
	writeJSON(w, http.StatusOK, &st)
}

func (a *API) handleAddOverride(w http.ResponseWriter, r *http.Request) {
	var req OverrideRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, CodeInvalidArgument, jsonError(err, "").Error())
		return
	}
	if _, err := dec.Token(); err != io.EOF {
		writeError(w, http.StatusBadRequest, CodeInvalidArgument, "body: more than one JSON value")
		return
	}
	d, err := time.ParseDuration(req.ExpiresIn)
	if err != nil || d < time.Second || d > MaxOverride {
		writeError(w, http.StatusBadRequest, CodeInvalidArgument, fmt.Sprintf("expires_in: a Go duration between 1s and %v, got %q", MaxOverride, req.ExpiresIn))
		return
	}
	o, err := a.addOverride(r.Context(), policy.Override{Actor: AdminName(r.Context()), Reason: req.Reason, Policy: req.Policy,
		APIKey: req.APIKey, User: req.User, Tier: req.Tier, Limit: req.Limit, Expires: a.policy.Now().Add(d).Time()})
	if err != nil {
		if errors.Is(err, policy.ErrRequest) {
			writeError(w, http.StatusBadRequest, CodeInvalidArgument, err.Error())
			return
		}
		// Installed here but not everywhere: say so, the caller may retry.
		writeError(w, http.StatusServiceUnavailable, CodeUnavailable, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, &o)
}

func (a *API) handleRevokeOverride(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	o, err := a.revoke(r.Context(), id, AdminName(r.Context()))
	if err != nil {
		if errors.Is(err, policy.ErrNoOverride) {
			writeError(w, http.StatusNotFound, CodeNotFound, fmt.Sprintf("no override in force has id %q", id))
			return
		}
		// Revoked here but not everywhere: say so, the caller may retry.
		writeError(w, http.StatusServiceUnavailable, CodeUnavailable, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, &o)
}
