package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/clock"
	"github.com/ringlimit/ringlimit/decide"
	"github.com/ringlimit/ringlimit/forward"
	"github.com/ringlimit/ringlimit/policy"
)

// decodeBody reads one JSON value of at most MaxBodyBytes into v, refusing
// unknown fields. Every error names the field at fault.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	dec.DisallowUnknownFields()
	tooBig := func(err error) bool {
		var mb *http.MaxBytesError
		return errors.As(err, &mb)
	}
	if err := dec.Decode(v); err != nil {
		if tooBig(err) {
			return fmt.Errorf("body: larger than %d bytes", MaxBodyBytes)
		}
		return jsonError(err, "")
	}
	if _, err := dec.Token(); err != io.EOF {
		if tooBig(err) {
			return fmt.Errorf("body: larger than %d bytes", MaxBodyBytes)
		}
		return errors.New("body: more than one JSON value")
	}
	return nil
}

// parseLeaseTTL parses an acquire's or a renew's ttl (field): "" is 0 (the
// default), else a duration from bucket.MinLeaseTTL to bucket.MaxLeaseTTL.
func parseLeaseTTL(field, s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not a duration such as \"30s\"", field, s)
	}
	return d, bucket.CheckLeaseTTL(field, d)
}

// checkLeaseTTL names field unless d is 0 (the default) or within the
// lease TTL bounds.
func checkLeaseTTL(field string, d time.Duration) error {
	if d == 0 {
		return nil
	}
	return bucket.CheckLeaseTTL(field, d)
}

// checkRequestID names field when id is longer than bucket.MaxRequestIDLen.
func checkRequestID(field, id string) error {
	if len(id) > bucket.MaxRequestIDLen {
		return fmt.Errorf("%s: longer than %d bytes", field, bucket.MaxRequestIDLen)
	}
	return nil
}

// concurrencyAcquire validates an inline concurrency limit (alg as the
// request names it, "" when absent) of key; field prefixes its errors.
func concurrencyAcquire(field, key, alg string, limit int64, mode string) (forward.Acquire, error) {
	if err := validateKey(field+"key", key); err != nil {
		return forward.Acquire{}, err
	}
	if alg != "concurrency" {
		return forward.Acquire{}, fmt.Errorf("%slimit.algorithm: an acquire takes a concurrency limit ({\"algorithm\": \"concurrency\", \"limit\": N}), got %q", field, alg)
	}
	spec := bucket.LimitSpec{Algorithm: alg, Limit: limit, FailureMode: mode}
	set, err := spec.Parse(field + "limit")
	if err != nil {
		return forward.Acquire{}, err
	}
	return forward.Acquire{Key: key, Limit: set.Limit, Mode: set.FailureMode, TTL: bucket.DefaultLeaseTTL}, nil
}

// decodeAcquire reads and validates an acquire into p (OpAcquire). Every
// error names the field at fault, and nothing is planned.
func (a *API) decodeAcquire(w http.ResponseWriter, r *http.Request, p *decide.Plan) error {
	var req AcquireRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	ttl, err := parseLeaseTTL("ttl", req.TTL)
	if err != nil {
		return err
	}
	if err := checkRequestID("request_id", req.RequestID); err != nil {
		return err
	}
	p.LeaseTTL, p.RequestID = ttl, req.RequestID
	if req.Policy != "" || req.APIKey != "" || req.User != "" || req.IP != "" || req.Route != "" || req.Tier != "" {
		if req.Limit != nil || req.Key != "" {
			return errors.New("limit: give either an inline key and limit, or policy fields (policy, api_key, user, ip, route, tier), not both")
		}
		return a.d.AddPolicy(p, "", policy.Request{Policy: req.Policy, APIKey: req.APIKey, User: req.User, IP: req.IP,
			Route: req.Route, Tier: req.Tier})
	}
	if a.noInline {
		return errInlineDisabled
	}
	if req.Limit == nil {
		if err := validateKey("key", req.Key); err != nil {
			return err
		}
		return errors.New(`limit: required ({"algorithm": "concurrency", "limit": N}), or name configured policy: policy, api_key, user, ip, route, tier`)
	}
	acq, err := concurrencyAcquire("", req.Key, req.Limit.Algorithm, req.Limit.Limit, req.Limit.FailureMode)
	if err != nil {
		return err
	}
	if ttl != 0 {
		acq.TTL = ttl
	}
	p.AddAcquire(acq)
	return nil
}

// handleAcquire is POST /v1/acquire: 200 with the lease, 429 when full.
func (a *API) handleAcquire(w http.ResponseWriter, r *http.Request) {
	a.serveOne(w, r, decide.OpAcquire, a.decodeAcquire)
}

// parseOutcome reads an outcome as the JSON spells it ("" is ok).
func parseOutcome(field, s string) (forward.Outcome, error) {
	switch s {
	case "", OutcomeOK:
		return forward.OutcomeOK, nil
	case OutcomeError:
		return forward.OutcomeError, nil
	case OutcomeDropped:
		return forward.OutcomeDropped, nil
	}
	return 0, fmt.Errorf("%s: want ok, error or dropped, got %q", field, s)
}

// latencyOf checks a latency_ms field and returns it as a duration.
func latencyOf(field string, ms int64) (time.Duration, error) {
	if ms < 0 || ms > maxLatencyMs {
		return 0, fmt.Errorf("%s: must be between 0 and %d, got %d", field, int64(maxLatencyMs), ms)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// maxLatencyMs is the longest latency a release or a report may give: a
// day, in milliseconds.
const maxLatencyMs = 24 * 3600 * 1000

// writeLeaseError writes the answer to a renew or release that failed
// with err: 404 LEASE_NOT_FOUND, or as a check's error.
func (a *API) writeLeaseError(w http.ResponseWriter, err error, priv bool) {
	if errors.Is(err, forward.ErrLeaseNotFound) {
		writeError(w, http.StatusNotFound, CodeLeaseNotFound, "lease: not found (unknown, released, or expired: its slot is free)")
		return
	}
	a.writeCheckError(w, err, priv)
}

// handleRenew is POST /v1/renew.
func (a *API) handleRenew(w http.ResponseWriter, r *http.Request) {
	priv := a.private(r.Header.Get("Authorization"))
	var req RenewRequest
	err := decodeBody(w, r, &req)
	var ttl time.Duration
	if err == nil {
		_, err = decide.SplitLeases("lease", req.Lease)
	}
	if err == nil {
		ttl, err = parseLeaseTTL("ttl", req.TTL)
	}
	if err != nil {
		a.m.invalid.WithLabelValues("http").Inc()
		writeError(w, http.StatusBadRequest, CodeInvalidArgument, a.message(err, priv))
		return
	}
	res, err := a.d.Renew(r.Context(), req.Lease, ttl)
	if err != nil {
		a.writeLeaseError(w, err, priv)
		return
	}
	resp := RenewResponse{Renewed: true, ExpiresInMs: clock.Millis(res.ExpiresIn), InFlight: res.InFlight, Limit: res.Limit, Owner: res.Owner}
	if priv {
		resp.Owner = ""
	}
	writeJSON(w, http.StatusOK, &resp)
}

// handleRelease is POST /v1/release.
func (a *API) handleRelease(w http.ResponseWriter, r *http.Request) {
	priv := a.private(r.Header.Get("Authorization"))
	var req ReleaseRequest
	err := decodeBody(w, r, &req)
	var o forward.Outcome
	var latency time.Duration
	if err == nil {
		_, err = decide.SplitLeases("lease", req.Lease)
	}
	if err == nil {
		o, err = parseOutcome("outcome", req.Outcome)
	}
	if err == nil {
		latency, err = latencyOf("latency_ms", req.LatencyMs)
	}
	if err != nil {
		a.m.invalid.WithLabelValues("http").Inc()
		writeError(w, http.StatusBadRequest, CodeInvalidArgument, a.message(err, priv))
		return
	}
	res, err := a.d.Release(r.Context(), req.Lease, o, latency)
	if err != nil {
		a.writeLeaseError(w, err, priv)
		return
	}
	resp := ReleaseResponse{Released: res.Released, InFlight: res.InFlight, Limit: res.Limit, Owner: res.Owner}
	if priv {
		resp.Owner = ""
	}
	writeJSON(w, http.StatusOK, &resp)
}

// handleReport is POST /v1/report.
func (a *API) handleReport(w http.ResponseWriter, r *http.Request) {
	priv := a.private(r.Header.Get("Authorization"))
	var req ReportRequest
	err := decodeBody(w, r, &req)
	var o forward.Outcome
	var latency time.Duration
	if err == nil {
		o, err = parseOutcome("outcome", req.Outcome)
	}
	if err == nil {
		latency, err = latencyOf("latency_ms", req.LatencyMs)
	}
	var res decide.ReportResult
	if err == nil {
		res, err = a.d.Report(r.Context(), policy.Request{Policy: req.Policy, APIKey: req.APIKey, User: req.User, IP: req.IP,
			Route: req.Route, Tier: req.Tier}, o, latency)
	}
	switch {
	case err == nil:
	case errors.Is(err, forward.ErrUnavailable):
		a.m.reports.WithLabelValues("error").Inc()
		a.writeCheckError(w, err, priv)
		return
	default: // a request the policy refused, or a bad field
		a.m.invalid.WithLabelValues("http").Inc()
		a.m.reports.WithLabelValues("invalid").Inc()
		writeError(w, http.StatusBadRequest, CodeInvalidArgument, a.message(err, priv))
		return
	}
	a.m.reports.WithLabelValues("ok").Inc()
	resp := ReportResponse{Reported: res.Reported, Limit: res.Limit, Owner: res.Owner}
	if priv {
		resp.Owner = ""
	}
	writeJSON(w, http.StatusOK, &resp)
}

// notConcurrency refuses a concurrency limit l where a check names it
// (field): such a limit is acquired at use instead.
func notConcurrency(field string, l *bucket.Limit, use string) error {
	if l.Algorithm() == bucket.Concurrency {
		return fmt.Errorf("%s: a concurrency limit is acquired (%s), not checked", field, use)
	}
	return nil
}
