package api

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/forward"
	"github.com/ringlimit/ringlimit/policy"
	pb "github.com/ringlimit/ringlimit/proto/ringlimitv1"
)

// RegisterGRPC registers the public RateLimiter service on s.
func (a *API) RegisterGRPC(s grpc.ServiceRegistrar) {
	pb.RegisterRateLimiterServer(s, &grpcServer{api: a})
}

type grpcServer struct {
	pb.UnimplementedRateLimiterServer
	api *API
}

func (g *grpcServer) Check(ctx context.Context, req *pb.CheckRequest) (*pb.CheckResponse, error) {
	var p plan
	if err := g.api.planFromProto(req, &p); err != nil {
		g.api.m.invalid.WithLabelValues("grpc").Inc()
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	answers, err := g.api.decide(ctx, "grpc", &p)
	if err != nil {
		return nil, grpcError(err)
	}
	resp := &pb.CheckResponse{Decisions: make([]*pb.Decision, len(answers))}
	decisions := make([]pb.Decision, len(answers)) // one allocation for all
	for i := range answers {
		a := &answers[i]
		d := &decisions[i]
		d.Allowed = a.Allowed
		d.Limit = a.Limit
		d.Remaining = a.Remaining
		d.RetryAfterMs = a.RetryAfter.Milliseconds()
		d.ResetAfterMs = a.ResetAfter.Milliseconds()
		d.DelayMs = a.Delay.Milliseconds()
		d.Owner = a.Owner
		d.Degraded = a.Degraded
		d.Scope = a.Scope
		d.WouldReject = a.WouldReject
		d.PolicyVersion = a.Version
		d.OwnerAddr = a.OwnerAddr
		resp.Decisions[i] = d
	}
	return resp, nil
}

func (a *API) planFromProto(req *pb.CheckRequest, p *plan) error {
	n := len(req.GetChecks())
	if n == 0 {
		return errors.New("checks: at least one check is required")
	}
	if n > MaxBatch {
		return fmt.Errorf("checks: at most %d per call, got %d", MaxBatch, n)
	}
	p.checks = make([]forward.Check, 0, n)
	p.units = make([]unit, 0, n)
	for i, c := range req.GetChecks() {
		field := fmt.Sprintf("checks[%d]", i)
		if pr := c.GetRequest(); pr != nil {
			if c.GetKey() != "" || c.GetLimit() != nil {
				return fmt.Errorf("%s: give either key and limit, or request, not both", field)
			}
			var cost int64
			if c.Cost != nil {
				if cost = *c.Cost; cost < 1 {
					return fmt.Errorf("%s.cost: must be at least 1, got %d", field, cost)
				}
			}
			if err := a.addPolicy(p, field+".request.", policy.Request{Policy: pr.GetPolicy(), APIKey: pr.GetApiKey(),
				User: pr.GetUser(), IP: pr.GetIp(), Route: pr.GetRoute(), Tier: pr.GetTier(), Cost: cost}); err != nil {
				return err
			}
			continue
		}
		fc, err := checkFromProto(field, c)
		if err != nil {
			return err
		}
		p.addInline(fc)
	}
	return nil
}

func checkFromProto(field string, c *pb.Check) (forward.Check, error) {
	if err := validateKey(field+".key", c.GetKey()); err != nil {
		return forward.Check{}, err
	}
	pl := c.GetLimit()
	if pl == nil {
		return forward.Check{}, fmt.Errorf("%s.limit: required (or a policy request)", field)
	}
	if maxMs := int64(bucket.MaxPer / time.Millisecond); pl.GetPerMs() <= 0 || pl.GetPerMs() > maxMs {
		return forward.Check{}, fmt.Errorf("%s.limit.per_ms: must be between 1 and %d, got %d", field, maxMs, pl.GetPerMs())
	}
	alg := pl.GetAlgorithm()
	if _, ok := pb.Algorithm_name[int32(alg)]; !ok {
		return forward.Check{}, fmt.Errorf("%s.limit.algorithm: unknown value %d", field, alg)
	}
	l, err := limitFromParts(field+".limit", algorithmName(alg), pl.GetLimit(), time.Duration(pl.GetPerMs())*time.Millisecond, pl.GetBurst())
	if err != nil {
		return forward.Check{}, err
	}
	cost := int64(1)
	if c.Cost != nil {
		cost = *c.Cost
	}
	if err := validateCost(field+".cost", &l, cost); err != nil {
		return forward.Check{}, err
	}
	if _, ok := pb.FailureMode_name[int32(pl.GetFailureMode())]; !ok {
		return forward.Check{}, fmt.Errorf("%s.limit.failure_mode: unknown value %d", field, pl.GetFailureMode())
	}
	if pl.GetLease() && l.Algorithm() != bucket.TokenBucket {
		return forward.Check{}, fmt.Errorf("%s.limit.lease: only a token_bucket can be leased, not %v", field, l.Algorithm())
	}
	return forward.Check{Key: c.GetKey(), Limit: l, Cost: cost, Mode: forward.FailureMode(pl.GetFailureMode()), Lease: pl.GetLease()}, nil
}

// algorithmName maps the proto enum to the bucket package's wire names.
func algorithmName(a pb.Algorithm) string {
	switch a {
	case pb.Algorithm_LEAKY_BUCKET:
		return "leaky_bucket"
	case pb.Algorithm_FIXED_WINDOW:
		return "fixed_window"
	case pb.Algorithm_SLIDING_WINDOW_LOG:
		return "sliding_window_log"
	case pb.Algorithm_SLIDING_WINDOW_COUNTER:
		return "sliding_window_counter"
	}
	return "token_bucket"
}

func grpcError(err error) error {
	switch {
	case errors.Is(err, forward.ErrInvalid):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, forward.ErrUnavailable):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}
