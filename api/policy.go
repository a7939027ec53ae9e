package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"

	"github.com/ringlimit/ringlimit/clock"
	"github.com/ringlimit/ringlimit/decide"
	"github.com/ringlimit/ringlimit/policy"
	"github.com/ringlimit/ringlimit/ratelimitheader"
)

// PolicySource is the running policy as the API uses it: the decide
// path resolves requests through it (decide.Policy), and the admin
// endpoints read its overrides and clock (PolicyAdmin). Counting dry-run
// rejections is not its business: see Config.CountDryRun.
// *policy.Manager implements it.
type PolicySource interface {
	decide.Policy
	PolicyAdmin
}

// PolicyAdmin is what GET /v1/policy and the override endpoints read.
type PolicyAdmin interface {
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

// writeHeaders writes the rate-limit headers of an answer: every enforced
// layer in RateLimit-Policy (the inline limit alone for an inline check),
// the one that decided in RateLimit, and Retry-After on a rejection.
func writeHeaders(h http.Header, ans *decide.Answer, priv bool) {
	d := ratelimitheader.Decision{Allowed: ans.Allowed, Scope: ans.Scope, Limit: ans.Limit, Window: ans.Per,
		Remaining: ans.Remaining, Reset: ans.ResetAfter, RetryAfter: ans.RetryAfter}
	var buf [4]ratelimitheader.Policy
	enforced := buf[:0]
	for _, l := range ans.Layers {
		if !l.DryRun {
			name := l.Scope
			if priv {
				name = scopeKind(name)
			}
			enforced = append(enforced, ratelimitheader.Policy{Name: name, Quota: l.Limit.Count(), Window: l.Limit.Window()})
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
