package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/forward"
	"github.com/ringlimit/ringlimit/policy"
	pb "github.com/ringlimit/ringlimit/proto/ringlimitv1"
)

// ResetFunc puts one key back to full on its owner and every member that
// holds a copy (*forward.Router.Reset). Its errors wrap forward.ErrInvalid
// or forward.ErrUnavailable (nothing reset).
type ResetFunc func(ctx context.Context, key string, l bucket.Limit) (forward.ResetResult, error)

// AuditFunc appends one line to the admin audit log: actor (the admin
// token's name) did action on what.
type AuditFunc func(actor, action, what string)

// ResetResponse is the body of a 200 answer to POST /v1/reset.
type ResetResponse struct {
	Reset bool `json:"reset"`
	// PreviousRemaining is what a check of cost 1 found remaining before
	// the reset; for a policy request, the smallest over its layers.
	PreviousRemaining int64 `json:"previous_remaining"`
	// Owner is the node that reset the key (a policy request: the first
	// layer's).
	Owner string `json:"owner"`
	// Unconfirmed names the members that did not acknowledge dropping
	// their copies of the key before their peer deadline.
	Unconfirmed []string `json:"unconfirmed,omitempty"`
	// Layers are a policy request's layers, in order.
	Layers []ResetLayer `json:"layers,omitempty"`
}

// ResetLayer is one policy layer's reset.
type ResetLayer struct {
	Scope             string `json:"scope"`
	PreviousRemaining int64  `json:"previous_remaining"`
	Owner             string `json:"owner"`
}

// resetTarget is one key a reset names.
type resetTarget struct {
	key   string
	limit bucket.Limit
	scope string // a policy layer's; "" for an inline key
}

// errNoReset refuses a policy reset on a node without a policy.
var errNoReset = errors.New("policy: this node runs no policy file (start it with --policy); give an inline key and limit")

// resetTargets validates the key fields of a reset (as a check names them)
// and returns the keys it resets. Cost and peek are not read.
func (a *API) resetTargets(req *CheckRequest) ([]resetTarget, error) {
	if req.isPolicy() {
		if req.Limit != nil || req.Key != "" {
			return nil, errors.New("limit: give either an inline key and limit, or policy fields (policy, api_key, user, ip, route, tier), not both")
		}
		return a.policyTargets(policy.Request{Policy: req.Policy, APIKey: req.APIKey, User: req.User, IP: req.IP, Route: req.Route, Tier: req.Tier})
	}
	if a.noInline {
		return nil, errInlineDisabled
	}
	r := *req
	r.Cost = nil // a reset spends nothing: its cost is not read
	c, err := r.toCheck()
	if err != nil {
		return nil, err
	}
	return []resetTarget{{key: c.Key, limit: c.Limit}}, nil
}

func (a *API) policyTargets(req policy.Request) ([]resetTarget, error) {
	if a.policy == nil {
		return nil, errNoReset
	}
	layers, err := a.policy.Resolve(req)
	if err != nil {
		return nil, err
	}
	ts := make([]resetTarget, len(layers))
	for i, l := range layers {
		ts[i] = resetTarget{key: l.Key, limit: l.Limit, scope: l.Scope}
	}
	return ts, nil
}

// resetAll resets every target, in order, and audits each. It stops at
// the first that fails (ErrUnavailable: its owner could not be reached),
// reporting which layers it had reset before.
func (a *API) resetAll(ctx context.Context, actor string, ts []resetTarget) (ResetResponse, error) {
	resp := ResetResponse{Reset: true}
	policyReq := ts[0].scope != ""
	for i, t := range ts {
		res, err := a.reset(ctx, t.key, t.limit)
		if err != nil {
			if i > 0 {
				var done []string
				for _, d := range ts[:i] {
					done = append(done, d.scope)
				}
				err = fmt.Errorf("%w (layers reset before: %s)", err, strings.Join(done, ", "))
			}
			return ResetResponse{}, err
		}
		a.audit(actor, "reset", t.key)
		if i == 0 || res.Previous < resp.PreviousRemaining {
			resp.PreviousRemaining = res.Previous
		}
		if i == 0 {
			resp.Owner = res.Owner
		}
		resp.Unconfirmed = appendNew(resp.Unconfirmed, res.Unconfirmed)
		if policyReq {
			resp.Layers = append(resp.Layers, ResetLayer{Scope: t.scope, PreviousRemaining: res.Previous, Owner: res.Owner})
		}
	}
	return resp, nil
}

// appendNew appends to dst the names of add it lacks.
func appendNew(dst, add []string) []string {
	for _, n := range add {
		found := false
		for _, d := range dst {
			found = found || d == n
		}
		if !found {
			dst = append(dst, n)
		}
	}
	return dst
}

// handleReset is POST /v1/reset (behind RequireAdmin).
func (a *API) handleReset(w http.ResponseWriter, r *http.Request) {
	var cb checkBody
	err := decodeCheckBody(w, r, &cb)
	var ts []resetTarget
	if err == nil {
		ts, err = a.resetTargets(&cb.req)
	}
	if err != nil {
		a.m.resets.WithLabelValues("invalid").Inc()
		code := invalidCode(err)
		if errors.Is(err, errInlineDisabled) {
			code = CodeInlineLimitsDisabled
		}
		writeError(w, http.StatusBadRequest, code, err.Error())
		return
	}
	resp, err := a.resetAll(r.Context(), AdminName(r.Context()), ts)
	if err != nil {
		a.m.resets.WithLabelValues(resetResult(err)).Inc()
		a.writeCheckError(w, err, false)
		return
	}
	a.countReset()
	writeJSON(w, http.StatusOK, &resp)
}

// resetResult is the result label of a failed reset.
func resetResult(err error) string {
	if errors.Is(err, forward.ErrInvalid) {
		return "invalid"
	}
	return "unavailable"
}

// countDenied counts the resets RequireAdmin refused.
func (a *API) countDenied(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		if sw.status == http.StatusUnauthorized || sw.status == http.StatusForbidden {
			a.m.resets.WithLabelValues("unauthorized").Inc()
		}
	})
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

// Reset is the public gRPC Reset: the admin token in the "authorization:
// Bearer" metadata, then as POST /v1/reset.
func (g *grpcServer) Reset(ctx context.Context, req *pb.ResetRequest) (*pb.ResetResponse, error) {
	a := g.api
	if a.reset == nil {
		return nil, status.Error(codes.Unimplemented, "reset: not served by this node")
	}
	actor, err := a.adminGRPC(ctx)
	if err != nil {
		a.m.resets.WithLabelValues("unauthorized").Inc()
		return nil, err
	}
	ts, err := a.resetTargetsProto(req.GetCheck())
	if err != nil {
		a.m.resets.WithLabelValues("invalid").Inc()
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	resp, err := a.resetAll(ctx, actor, ts)
	if err != nil {
		a.m.resets.WithLabelValues(resetResult(err)).Inc()
		return nil, grpcError(err, false)
	}
	a.countReset()
	out := &pb.ResetResponse{Reset_: true, PreviousRemaining: resp.PreviousRemaining, Owner: resp.Owner, Unconfirmed: resp.Unconfirmed}
	for _, l := range resp.Layers {
		out.Layers = append(out.Layers, &pb.ResetLayer{Scope: l.Scope, PreviousRemaining: l.PreviousRemaining, Owner: l.Owner})
	}
	return out, nil
}

// resetTargetsProto is resetTargets for a gRPC check; its errors name
// fields under "check.".
func (a *API) resetTargetsProto(c *pb.Check) ([]resetTarget, error) {
	if c == nil {
		return nil, errors.New("check: required (an inline key and limit, or a policy request)")
	}
	if pr := c.GetRequest(); pr != nil {
		if c.GetKey() != "" || c.GetLimit() != nil {
			return nil, errors.New("check: give either key and limit, or request, not both")
		}
		ts, err := a.policyTargets(policy.Request{Policy: pr.GetPolicy(), APIKey: pr.GetApiKey(), User: pr.GetUser(),
			IP: pr.GetIp(), Route: pr.GetRoute(), Tier: pr.GetTier()})
		if err != nil {
			return nil, fmt.Errorf("check.request.%w", err)
		}
		return ts, nil
	}
	if a.noInline {
		return nil, fmt.Errorf("check: %w", errInlineDisabled)
	}
	pc := &pb.Check{Key: c.GetKey(), Limit: c.GetLimit()} // cost is not read
	fc, err := checkFromProto(pc)
	if err != nil {
		return nil, fmt.Errorf("check.%w", err)
	}
	return []resetTarget{{key: fc.Key, limit: fc.Limit}}, nil
}

// adminGRPC authenticates the admin token of a gRPC call as RequireAdmin
// does a request's: UNAUTHENTICATED without a bearer token,
// PERMISSION_DENIED for one that is not an admin token (or on a node
// without admin tokens). It returns the token's name.
func (a *API) adminGRPC(ctx context.Context) (string, error) {
	if !a.admin.configured() {
		return "", status.Error(codes.PermissionDenied, "this node has no admin token configured (start it with --admin-token-file): state-changing calls are off")
	}
	md, _ := metadata.FromIncomingContext(ctx)
	var given string
	if v := md.Get("authorization"); len(v) > 0 {
		scheme, tok, ok := strings.Cut(v[0], " ")
		if ok && strings.EqualFold(scheme, "Bearer") {
			given = strings.TrimSpace(tok)
		}
	}
	if given == "" {
		return "", status.Error(codes.Unauthenticated, "an admin token is required: authorization: Bearer <token>")
	}
	name, ok := a.admin.Authenticate(given)
	if !ok {
		return "", status.Error(codes.PermissionDenied, "the bearer token is not an admin token of this node")
	}
	return name, nil
}
