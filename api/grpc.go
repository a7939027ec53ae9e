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
	checks, err := checksFromProto(req)
	if err != nil {
		g.api.m.invalid.WithLabelValues("grpc").Inc()
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	out := make([]forward.Result, len(checks))
	if err := g.api.check(ctx, "grpc", checks, out); err != nil {
		return nil, grpcError(err)
	}
	resp := &pb.CheckResponse{Decisions: make([]*pb.Decision, len(out))}
	decisions := make([]pb.Decision, len(out)) // one allocation for all
	for i := range out {
		r := &out[i]
		d := &decisions[i]
		d.Allowed = r.Allowed
		d.Limit = r.Limit
		d.Remaining = r.Remaining
		d.RetryAfterMs = r.RetryAfter.Milliseconds()
		d.ResetAfterMs = r.ResetAfter.Milliseconds()
		d.DelayMs = r.Delay.Milliseconds()
		d.Owner = r.Owner
		d.Degraded = r.Degraded
		d.Scope = ScopeInline
		resp.Decisions[i] = d
	}
	return resp, nil
}

func checksFromProto(req *pb.CheckRequest) ([]forward.Check, error) {
	n := len(req.GetChecks())
	if n == 0 {
		return nil, errors.New("checks: at least one check is required")
	}
	if n > MaxBatch {
		return nil, fmt.Errorf("checks: at most %d per call, got %d", MaxBatch, n)
	}
	checks := make([]forward.Check, n)
	for i, c := range req.GetChecks() {
		field := fmt.Sprintf("checks[%d]", i)
		if err := validateKey(field+".key", c.GetKey()); err != nil {
			return nil, err
		}
		pl := c.GetLimit()
		if pl == nil {
			return nil, fmt.Errorf("%s.limit: required", field)
		}
		if maxMs := int64(bucket.MaxPer / time.Millisecond); pl.GetPerMs() <= 0 || pl.GetPerMs() > maxMs {
			return nil, fmt.Errorf("%s.limit.per_ms: must be between 1 and %d, got %d", field, maxMs, pl.GetPerMs())
		}
		alg := pl.GetAlgorithm()
		if _, ok := pb.Algorithm_name[int32(alg)]; !ok {
			return nil, fmt.Errorf("%s.limit.algorithm: unknown value %d", field, alg)
		}
		l, err := limitFromParts(field+".limit", algorithmName(alg), pl.GetLimit(), time.Duration(pl.GetPerMs())*time.Millisecond, pl.GetBurst())
		if err != nil {
			return nil, err
		}
		cost := int64(1)
		if c.Cost != nil {
			cost = *c.Cost
		}
		if err := validateCost(field+".cost", &l, cost); err != nil {
			return nil, err
		}
		mode := forward.FailureMode(pl.GetFailureMode())
		if _, ok := pb.FailureMode_name[int32(pl.GetFailureMode())]; !ok {
			return nil, fmt.Errorf("%s.limit.failure_mode: unknown value %d", field, pl.GetFailureMode())
		}
		checks[i] = forward.Check{Key: c.GetKey(), Limit: l, Cost: cost, Mode: mode}
	}
	return checks, nil
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
