package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/clock"
	"github.com/ringlimit/ringlimit/decide"
	"github.com/ringlimit/ringlimit/forward"
	"github.com/ringlimit/ringlimit/policy"
)

// Error codes in JSON error bodies.
const (
	CodeInvalidArgument = "INVALID_ARGUMENT"
	CodeRateLimited     = "RATE_LIMITED"
	CodeUnavailable     = "UNAVAILABLE"
	CodeInternal        = "INTERNAL"
	CodeNotFound        = "NOT_FOUND"
	// CodeInlineLimitsDisabled refuses an inline limit on a node started
	// with --inline-limits=false (Config.DisableInlineLimits).
	CodeInlineLimitsDisabled = "INLINE_LIMITS_DISABLED"
	// CodeKeyTooLong: a key longer than the node's --max-key-bytes (400).
	CodeKeyTooLong = "KEY_TOO_LONG"
)

// ScopeInline is the scope of a limit given inline in the request.
const ScopeInline = decide.ScopeInline

// CheckRequest is the body of POST /v1/check: an inline limit (key, limit)
// or a policy request (policy, api_key / user / ip, route, tier).
type CheckRequest struct {
	Key string `json:"key,omitempty"`
	// Cost defaults to 1 (or the route's cost) when absent; an explicit 0 or
	// less is invalid.
	Cost  *int64     `json:"cost,omitempty"`
	Limit *LimitJSON `json:"limit,omitempty"`

	Policy string `json:"policy,omitempty"`
	APIKey string `json:"api_key,omitempty"`
	User   string `json:"user,omitempty"`
	IP     string `json:"ip,omitempty"`
	Route  string `json:"route,omitempty"`
	Tier   string `json:"tier,omitempty"`

	// Reserve makes an admitted check answer a reservation id, which POST
	// /v1/settle turns into the true cost (inline token buckets only).
	Reserve bool `json:"reserve,omitempty"`
	// ReserveTTL is how long the reservation can be settled, a Go
	// duration from 1s to 24h; default 5m.
	ReserveTTL string `json:"reserve_ttl,omitempty"`
	// Peek asks what the check would answer now, spending nothing (POST
	// /v1/check only).
	Peek bool `json:"peek,omitempty"`
}

func (req *CheckRequest) isPolicy() bool {
	return req.Policy != "" || req.APIKey != "" || req.User != "" || req.IP != "" || req.Route != "" || req.Tier != ""
}

// CheckResponse is the body of an answer to POST /v1/check (200 or 429).
type CheckResponse struct {
	Allowed      bool   `json:"allowed"`
	Limit        int64  `json:"limit"`
	Remaining    int64  `json:"remaining"`
	RetryAfterMs int64  `json:"retry_after_ms"`
	ResetAfterMs int64  `json:"reset_after_ms"`
	DelayMs      int64  `json:"delay_ms"`
	Scope        string `json:"scope"`
	Owner        string `json:"owner"`
	Degraded     bool   `json:"degraded,omitempty"`
	Code         string `json:"code,omitempty"`
	// WouldReject lists the dry-run layers that would have rejected.
	WouldReject []string `json:"would_reject,omitempty"`
	// PolicyVersion is the policy that decided a policy request.
	PolicyVersion string `json:"policy_version,omitempty"`
	// Reservation is the id of an admitted check with reserve.
	Reservation string `json:"reservation,omitempty"`
	// Lease is the lease an admitted acquire (or a check through a policy
	// with a concurrency layer) holds; several layers' ids are joined by
	// commas. InFlight and ExpiresInMs are the concurrency layer's leases
	// in flight after the answer and the lease's time to live.
	Lease       string `json:"lease,omitempty"`
	InFlight    int64  `json:"in_flight,omitempty"`
	ExpiresInMs int64  `json:"expires_in_ms,omitempty"`
}

// OwnerResponse is the body of GET /v1/owner?key=K.
type OwnerResponse struct {
	Key         string `json:"key"`
	Owner       string `json:"owner"`
	RingVersion uint64 `json:"ring_version"`
}

// ErrorResponse is the body of a 4xx/5xx answer.
type ErrorResponse struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Handler returns the HTTP surface: POST /v1/check, /v1/authz (any
// method; see handleAuthz), GET /healthz, GET /readyz and GET /metrics; with
// an RLS configuration, POST /json (see handleRLSJSON); with a policy, GET /v1/policy, GET /v1/overrides and the
// state-changing POST /v1/overrides and DELETE /v1/overrides/{id}, which
// require an admin token (RequireAdmin), as the read-only ones do with
// Config.PrivateReads. extra, if not nil, is consulted for every other path (the
// cluster endpoints register there).
func (a *API) Handler(extra http.Handler) http.Handler {
	mux := http.NewServeMux()
	read := func(h http.Handler) http.Handler { // a read-only endpoint
		if a.privReads {
			return RequireAdmin(a.admin, h)
		}
		return h
	}
	mux.HandleFunc("POST /v1/check", a.handleCheck)
	mux.HandleFunc("OPTIONS /v1/check", func(w http.ResponseWriter, _ *http.Request) { // a preflight: see crossSite
		w.Header().Set("Allow", "OPTIONS, POST")
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /v1/settle", a.handleSettle)
	mux.HandleFunc("POST /v1/acquire", a.handleAcquire) // in-flight limits: lease_http.go
	mux.HandleFunc("POST /v1/renew", a.handleRenew)
	mux.HandleFunc("POST /v1/release", a.handleRelease)
	mux.HandleFunc("POST /v1/report", a.handleReport)
	mux.HandleFunc("/v1/authz", a.handleAuthz) // any method: gateways send their client's
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", a.handleReady)
	if a.rls != nil {
		mux.HandleFunc("POST /json", a.handleRLSJSON) // envoyproxy/ratelimit's HTTP form of ShouldRateLimit
	}
	if a.cluster != nil {
		mux.Handle("GET /v1/cluster", read(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			st := a.cluster.Status(r.Context())
			writeJSON(w, http.StatusOK, &st)
		})))
		mux.Handle("GET /v1/ring", read(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			st := NewRingStatus(a.cluster.Partitions())
			writeJSON(w, http.StatusOK, &st)
		})))
		mux.Handle("GET /v1/owner", read(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// key is an inline key as a request names it: its owner is
			// the owner of every limit named for it (the ring places an
			// inline key by the request's key). A key as the store holds
			// it (p|..., r|..., as the status page lists them) gets its
			// own owner.
			key := r.URL.Query().Get("key")
			if err := validateKey("key", key); err != nil {
				writeError(w, http.StatusBadRequest, CodeInvalidArgument, err.Error())
				return
			}
			owner, version := a.cluster.Owner(bucket.InlineOwnerKey(key))
			writeJSON(w, http.StatusOK, &OwnerResponse{Key: key, Owner: owner, RingVersion: version})
		})))
	}
	if a.policy != nil {
		mux.Handle("GET /v1/policy", read(http.HandlerFunc(a.handlePolicy)))
		mux.Handle("GET /v1/overrides", read(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			writeJSON(w, http.StatusOK, a.policy.Overrides())
		})))
		mux.Handle("POST /v1/overrides", RequireAdmin(a.admin, http.HandlerFunc(a.handleAddOverride)))
		mux.Handle("DELETE /v1/overrides/{id}", RequireAdmin(a.admin, http.HandlerFunc(a.handleRevokeOverride)))
	}
	if a.reset != nil {
		mux.Handle("POST /v1/reset", a.countDenied(RequireAdmin(a.admin, http.HandlerFunc(a.handleReset))))
	}
	if a.gather != nil {
		mux.Handle("GET /metrics", read(promhttp.HandlerFor(a.gather, promhttp.HandlerOpts{})))
	}
	if extra != nil {
		mux.Handle("/", extra)
	}
	return a.traced(crossSite(a.origins, mux))
}

// handleCheck is POST /v1/check: decode, decide, encode.
func (a *API) handleCheck(w http.ResponseWriter, r *http.Request) {
	a.serveOne(w, r, decide.OpCheck, a.decodeCheck)
}

// serveOne decodes a request of one unit for op with decode, decides it
// and writes its answer: 200, or 429 when refused; 400 for bad input.
func (a *API) serveOne(w http.ResponseWriter, r *http.Request, op decide.Op,
	decode func(http.ResponseWriter, *http.Request, *decide.Plan) error) {
	p := decide.GetPlan(op)
	defer p.Release()
	priv := a.private(r.Header.Get("Authorization"))
	if err := decode(w, r, p); err != nil {
		a.m.invalid.WithLabelValues("http").Inc()
		code := invalidCode(err)
		if errors.Is(err, errInlineDisabled) {
			code = CodeInlineLimitsDisabled
		}
		writeError(w, http.StatusBadRequest, code, a.message(err, priv))
		return
	}
	answers, err := a.d.Decide(r.Context(), "http", p)
	if err != nil {
		a.writeCheckError(w, err, priv)
		return
	}
	if priv {
		hide(&answers[0])
	}
	writeAnswer(w, &answers[0], http.StatusTooManyRequests, priv)
}

// writeAnswer writes one check's answer, its rate-limit headers and its
// body: 200 when admitted, deny (429 for POST /v1/check) when refused;
// with priv, its headers name scopes by kind.
func writeAnswer(w http.ResponseWriter, ans *decide.Answer, deny int, priv bool) {
	resp := CheckResponse{
		Allowed:       ans.Allowed,
		Limit:         ans.Limit,
		Remaining:     ans.Remaining,
		RetryAfterMs:  clock.Millis(ans.RetryAfter),
		ResetAfterMs:  clock.Millis(ans.ResetAfter),
		DelayMs:       clock.Millis(ans.Delay),
		Scope:         ans.Scope,
		Owner:         ans.Owner,
		Degraded:      ans.Degraded,
		WouldReject:   ans.WouldReject,
		PolicyVersion: ans.Version,
		Reservation:   ans.Reservation,
		Lease:         ans.Lease,
		InFlight:      ans.InFlight,
		ExpiresInMs:   clock.Millis(ans.ExpiresIn),
	}
	writeHeaders(w.Header(), ans, priv)
	status := http.StatusOK
	if !ans.Allowed {
		resp.Code = CodeRateLimited
		status = deny
	}
	writeCheckResponse(w, status, &resp)
}

// decodeCheck reads and validates one check from the request body into p.
// Every error names the field at fault.
func (a *API) decodeCheck(w http.ResponseWriter, r *http.Request, p *decide.Plan) error {
	var cb checkBody
	if err := decodeCheckBody(w, r, &cb); err != nil {
		return err
	}
	req := &cb.req
	if req.Peek {
		p.Op = decide.OpPeek
	}
	if req.isPolicy() {
		if req.Limit != nil || req.Key != "" {
			return errors.New("limit: give either an inline key and limit, or policy fields (policy, api_key, user, ip, route, tier), not both")
		}
		if req.Reserve || req.ReserveTTL != "" {
			return decide.ErrReservePolicy
		}
		var cost int64
		if req.Cost != nil {
			if cost = *req.Cost; cost < 1 {
				return fmt.Errorf("cost: must be at least 1, got %d", cost)
			}
		}
		return a.d.AddPolicy(p, "", policy.Request{Policy: req.Policy, APIKey: req.APIKey, User: req.User, IP: req.IP,
			Route: req.Route, Tier: req.Tier, Cost: cost})
	}
	if a.noInline {
		return errInlineDisabled
	}
	c, err := req.toCheck()
	if err != nil {
		return err
	}
	p.AddInline(c)
	return nil
}

// decodeCheckBody reads the (bounded) body and decodes it into cb: by hand
// when it is plain, else with encoding/json (see decode.go).
func decodeCheckBody(w http.ResponseWriter, r *http.Request, cb *checkBody) error {
	bp := bufPool.Get().(*[]byte)
	defer func() {
		if cap(*bp) <= maxPooledBuf {
			bufPool.Put(bp)
		}
	}()
	src := r.Body
	if r.ContentLength < 0 || r.ContentLength > MaxBodyBytes {
		// The server stops a body at its Content-Length: only a longer
		// or unknown one needs the bound.
		src = http.MaxBytesReader(w, r.Body, MaxBodyBytes)
	}
	body, readErr := readBody(src, (*bp)[:0])
	*bp = body
	if readErr == nil && decodeCheckFast(body, cb) {
		return nil
	}
	var req CheckRequest // not cb.req: taking its address here would move every cb to the heap
	defer func() { cb.req = req }()
	dec := json.NewDecoder(bodySource(body, readErr))
	dec.DisallowUnknownFields()
	tooBig := func(err error) bool {
		var e *http.MaxBytesError
		return errors.As(err, &e)
	}
	if err := dec.Decode(&req); err != nil {
		if tooBig(err) {
			return fmt.Errorf("body: larger than %d bytes", MaxBodyBytes)
		}
		if fe := (*bucket.FieldError)(nil); errors.As(err, &fe) {
			return fe.At("limit") // a failure_mode the limit spec refused
		}
		return jsonError(err, "limit.failure_mode")
	}
	if _, err := dec.Token(); err != io.EOF {
		if tooBig(err) {
			return fmt.Errorf("body: larger than %d bytes", MaxBodyBytes)
		}
		return errors.New("body: more than one JSON value")
	}
	return nil
}

// toCheck validates an inline check. Its key is the request's key in the
// inline namespace under the limit's spec (bucket.InlineKey): no inline
// check can name a policy or RLS bucket, and a check that names another
// limit for the same key has a bucket of its own.
func (req *CheckRequest) toCheck() (forward.Check, error) {
	if err := validateKey("key", req.Key); err != nil {
		return forward.Check{}, err
	}
	if req.Limit == nil {
		return forward.Check{}, errors.New("limit: required (or name configured policy: policy, api_key, user, ip, route, tier)")
	}
	spec := bucket.LimitSpec{Algorithm: req.Limit.Algorithm, Limit: req.Limit.Limit, Per: req.Limit.Per, Burst: req.Limit.Burst,
		FailureMode: req.Limit.FailureMode.String(), Lease: req.Limit.Lease, Replication: req.Limit.Replication,
		Calendar: req.Limit.Calendar, Timezone: req.Limit.Timezone, WeekStart: req.Limit.WeekStart}
	set, err := spec.Parse("limit")
	if err != nil {
		return forward.Check{}, err
	}
	if err := notConcurrency("limit.algorithm", &set.Limit, "POST /v1/acquire"); err != nil {
		return forward.Check{}, err
	}
	cost := int64(1)
	if req.Cost != nil {
		cost = *req.Cost
	}
	if err := validateCost("cost", &set.Limit, cost); err != nil {
		return forward.Check{}, err
	}
	reserve, err := req.reserveTTL(&set.Limit)
	if err != nil {
		return forward.Check{}, err
	}
	return forward.Check{Key: bucket.InlineKey(req.Key, &set.Limit), Limit: set.Limit, Cost: cost, Mode: set.FailureMode, Lease: set.Lease, Sync: set.Sync,
		Reserve: reserve}, nil
}

// ReadyResponse is the body of GET /readyz.
type ReadyResponse struct {
	Status string `json:"status"`           // "ready" or "not ready"
	Reason string `json:"reason,omitempty"` // why not
}

// handleReady answers GET /readyz: 200 when Config.Ready reports the node
// ready, 503 with the reason otherwise. Load balancers and Kubernetes send
// traffic by it; /healthz only says that the process serves.
func (a *API) handleReady(w http.ResponseWriter, _ *http.Request) {
	if a.ready != nil {
		if err := a.ready(); err != nil {
			writeJSON(w, http.StatusServiceUnavailable, &ReadyResponse{Status: "not ready", Reason: err.Error()})
			return
		}
	}
	writeJSON(w, http.StatusOK, &ReadyResponse{Status: "ready"})
}
