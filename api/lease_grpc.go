package api

import (
	"context"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/clock"
	"github.com/ringlimit/ringlimit/decide"
	"github.com/ringlimit/ringlimit/forward"
	"github.com/ringlimit/ringlimit/policy"
	pb "github.com/ringlimit/ringlimit/proto/ringlimitv1"
)

// outcomeFromProto maps the wire's outcome; an unknown value is an error.
func outcomeFromProto(o pb.Outcome) (forward.Outcome, error) {
	switch o {
	case pb.Outcome_OUTCOME_OK:
		return forward.OutcomeOK, nil
	case pb.Outcome_OUTCOME_ERROR:
		return forward.OutcomeError, nil
	case pb.Outcome_OUTCOME_DROPPED:
		return forward.OutcomeDropped, nil
	}
	return 0, fmt.Errorf("outcome: unknown value %d", o)
}

// planAcquire validates an AcquireRequest into p (OpAcquire); its errors
// name fields as the request spells them.
func (a *API) planAcquire(req *pb.AcquireRequest, p *decide.Plan) error {
	if req.GetTtlMs() < 0 {
		return fmt.Errorf("ttl_ms: must be 0 (the default) or more, got %d", req.GetTtlMs())
	}
	ttl := millis(req.GetTtlMs())
	if err := checkLeaseTTL("ttl_ms", ttl); err != nil {
		return err
	}
	if err := checkRequestID("request_id", req.GetRequestId()); err != nil {
		return err
	}
	p.LeaseTTL, p.RequestID = ttl, req.GetRequestId()
	c := req.GetCheck()
	if c == nil {
		return errors.New("check: required (an inline key with a CONCURRENCY limit, or a policy request)")
	}
	if pr := c.GetRequest(); pr != nil {
		if c.GetKey() != "" || c.GetLimit() != nil {
			return errors.New("check: give either key and limit, or request, not both")
		}
		return a.d.AddPolicy(p, "check.request.", policy.Request{Policy: pr.GetPolicy(), APIKey: pr.GetApiKey(),
			User: pr.GetUser(), IP: pr.GetIp(), Route: pr.GetRoute(), Tier: pr.GetTier()})
	}
	if a.noInline {
		return fmt.Errorf("check: %w", errInlineDisabled)
	}
	pl := c.GetLimit()
	if pl == nil {
		return errors.New("check.limit: required (a CONCURRENCY limit, or a policy request)")
	}
	if _, ok := pb.FailureMode_name[int32(pl.GetFailureMode())]; !ok {
		return fmt.Errorf("check.limit.failure_mode: unknown value %d", pl.GetFailureMode())
	}
	alg := "concurrency"
	if pl.GetAlgorithm() != pb.Algorithm_CONCURRENCY {
		alg = algorithmName(pl.GetAlgorithm())
	}
	// The wire cannot leave the failure mode out: its zero (LOCAL) is
	// taken as absent, the concurrency default (fail_closed).
	mode := ""
	if m := pl.GetFailureMode(); m != 0 {
		mode = bucket.FailureMode(m).String()
	}
	acq, err := concurrencyAcquire("check.", c.GetKey(), alg, pl.GetLimit(), mode)
	if err != nil {
		return err
	}
	if ttl != 0 {
		acq.TTL = ttl
	}
	p.AddAcquire(acq)
	return nil
}

// Acquire is the public gRPC Acquire: the decision carries the lease;
// INVALID_ARGUMENT naming the field, UNAVAILABLE when the key's owner
// cannot be reached and the limit fails closed.
func (g *grpcServer) Acquire(ctx context.Context, req *pb.AcquireRequest) (*pb.AcquireResponse, error) {
	a := g.api
	p := decide.GetPlan(decide.OpAcquire)
	defer p.Release()
	priv := a.privateGRPC(ctx)
	if err := a.planAcquire(req, p); err != nil {
		a.m.invalid.WithLabelValues("grpc").Inc()
		return nil, status.Error(codes.InvalidArgument, a.message(err, priv))
	}
	answers, err := a.d.Decide(ctx, "grpc", p)
	if err != nil {
		return nil, grpcError(err, priv)
	}
	ans := &answers[0]
	if priv {
		hide(ans)
	}
	return &pb.AcquireResponse{Decision: decisionProto(ans)}, nil
}

// decisionProto is ans as the wire carries it.
func decisionProto(a *decide.Answer) *pb.Decision {
	return &pb.Decision{Allowed: a.Allowed, Limit: a.Limit, Remaining: a.Remaining, RetryAfterMs: clock.Millis(a.RetryAfter),
		ResetAfterMs: clock.Millis(a.ResetAfter), DelayMs: clock.Millis(a.Delay), Owner: a.Owner, Degraded: a.Degraded,
		Scope: a.Scope, WouldReject: a.WouldReject, PolicyVersion: a.Version, OwnerAddr: a.OwnerAddr,
		Reservation: a.Reservation, Lease: a.Lease, InFlight: a.InFlight, ExpiresInMs: clock.Millis(a.ExpiresIn)}
}

// leaseStatus is the status of a renew or release that failed with err.
func leaseStatus(err error, priv bool) error {
	if errors.Is(err, forward.ErrLeaseNotFound) {
		return status.Error(codes.NotFound, CodeLeaseNotFound+": lease not found (unknown, released, or expired: its slot is free)")
	}
	return grpcError(err, priv)
}

// Renew is the public gRPC Renew: NOT_FOUND (LEASE_NOT_FOUND) once the
// lease expired or was released.
func (g *grpcServer) Renew(ctx context.Context, req *pb.RenewRequest) (*pb.RenewResponse, error) {
	a := g.api
	priv := a.privateGRPC(ctx)
	ttl := millis(req.GetTtlMs())
	_, err := decide.SplitLeases("lease", req.GetLease())
	if err == nil && req.GetTtlMs() < 0 {
		err = fmt.Errorf("ttl_ms: must be 0 (the default) or more, got %d", req.GetTtlMs())
	}
	if err == nil {
		err = checkLeaseTTL("ttl_ms", ttl)
	}
	if err != nil {
		a.m.invalid.WithLabelValues("grpc").Inc()
		return nil, status.Error(codes.InvalidArgument, a.message(err, priv))
	}
	res, err := a.d.Renew(ctx, req.GetLease(), ttl)
	if err != nil {
		return nil, leaseStatus(err, priv)
	}
	resp := &pb.RenewResponse{Renewed: true, ExpiresInMs: clock.Millis(res.ExpiresIn), InFlight: res.InFlight, Limit: res.Limit, Owner: res.Owner}
	if priv {
		resp.Owner = ""
	}
	return resp, nil
}

// Release is the public gRPC Release: idempotent (released false the
// second time).
func (g *grpcServer) Release(ctx context.Context, req *pb.ReleaseRequest) (*pb.ReleaseResponse, error) {
	a := g.api
	priv := a.privateGRPC(ctx)
	_, err := decide.SplitLeases("lease", req.GetLease())
	var o forward.Outcome
	if err == nil {
		o, err = outcomeFromProto(req.GetOutcome())
	}
	latency, lerr := latencyOf("latency_ms", req.GetLatencyMs())
	if err == nil {
		err = lerr
	}
	if err != nil {
		a.m.invalid.WithLabelValues("grpc").Inc()
		return nil, status.Error(codes.InvalidArgument, a.message(err, priv))
	}
	res, err := a.d.Release(ctx, req.GetLease(), o, latency)
	if err != nil {
		return nil, leaseStatus(err, priv)
	}
	resp := &pb.ReleaseResponse{Released: res.Released, InFlight: res.InFlight, Limit: res.Limit, Owner: res.Owner}
	if priv {
		resp.Owner = ""
	}
	return resp, nil
}

// Report is the public gRPC Report of a policy request's outcome.
func (g *grpcServer) Report(ctx context.Context, req *pb.ReportRequest) (*pb.ReportResponse, error) {
	a := g.api
	priv := a.privateGRPC(ctx)
	var err error
	pr := req.GetCheck().GetRequest()
	if pr == nil {
		err = errors.New("check.request: required (adaptive limits are policy layers)")
	}
	var o forward.Outcome
	if err == nil {
		o, err = outcomeFromProto(req.GetOutcome())
	}
	latency, lerr := latencyOf("latency_ms", req.GetLatencyMs())
	if err == nil {
		err = lerr
	}
	var res decide.ReportResult
	if err == nil {
		res, err = a.d.Report(ctx, policy.Request{Policy: pr.GetPolicy(), APIKey: pr.GetApiKey(), User: pr.GetUser(),
			IP: pr.GetIp(), Route: pr.GetRoute(), Tier: pr.GetTier()}, o, latency)
	}
	if err != nil {
		if errors.Is(err, forward.ErrUnavailable) {
			a.m.reports.WithLabelValues("error").Inc()
			return nil, grpcError(err, priv)
		}
		a.m.invalid.WithLabelValues("grpc").Inc()
		a.m.reports.WithLabelValues("invalid").Inc()
		return nil, status.Error(codes.InvalidArgument, a.message(err, priv))
	}
	a.m.reports.WithLabelValues("ok").Inc()
	resp := &pb.ReportResponse{Reported: res.Reported, Limit: res.Limit, Owner: res.Owner}
	if priv {
		resp.Owner = ""
	}
	return resp, nil
}

// newReportMetrics is ringlimit_reports_total: the core's
// ringlimit_leases_total counts acquires, renews and releases; reports
// are the API's own.
func newReportMetrics() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ringlimit_reports_total",
		Help: "Reports of a request's outcome and latency (POST /v1/report, gRPC Report) answered by this node's API, by result (ok; invalid: refused as bad input; error: owner unavailable).",
	}, []string{"result"})
}
