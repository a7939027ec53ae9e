package api

import (
	"context"
	"fmt"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/ringlimit/ringlimit/proto/ringlimitv1"
)

// Leases is the public gRPC Leases: many acquires, renews and releases in
// one call, each decided as its own call would be and answered with its
// own status. They run concurrently: an acquire waits for its key's
// successor to acknowledge the lease, and the acquires of one call share
// that replication round instead of waiting for one each.
func (g *grpcServer) Leases(ctx context.Context, req *pb.LeasesRequest) (*pb.LeasesResponse, error) {
	ops := req.GetOps()
	switch n := len(ops); {
	case n == 0:
		g.api.m.invalid.WithLabelValues("grpc").Inc()
		return nil, status.Error(codes.InvalidArgument, "ops: at least one operation is required")
	case n > MaxBatch:
		g.api.m.invalid.WithLabelValues("grpc").Inc()
		return nil, status.Error(codes.InvalidArgument, fmt.Sprintf("ops: at most %d per call, got %d", MaxBatch, n))
	}
	results := make([]pb.LeaseResult, len(ops)) // one allocation for all
	resp := &pb.LeasesResponse{Results: make([]*pb.LeaseResult, len(ops))}
	var wg sync.WaitGroup
	for i, op := range ops {
		resp.Results[i] = &results[i]
		if op.GetRelease() != nil {
			continue // answered at once: no round to wait for
		}
		wg.Go(func() { g.leaseOp(ctx, op, &results[i]) })
	}
	for i, op := range ops {
		if op.GetRelease() != nil {
			g.leaseOp(ctx, op, &results[i])
		}
	}
	wg.Wait()
	resp.RingVersion = g.api.ringVersion(g.api.privateGRPC(ctx))
	return resp, nil
}

// leaseOp answers one operation of a Leases call into res.
func (g *grpcServer) leaseOp(ctx context.Context, op *pb.LeaseOp, res *pb.LeaseResult) {
	var err error
	switch o := op.GetOp().(type) {
	case *pb.LeaseOp_Acquire:
		var r *pb.AcquireResponse
		if r, err = g.Acquire(ctx, o.Acquire); err == nil {
			res.Result = &pb.LeaseResult_Acquire{Acquire: r}
		}
	case *pb.LeaseOp_Renew:
		var r *pb.RenewResponse
		if r, err = g.Renew(ctx, o.Renew); err == nil {
			res.Result = &pb.LeaseResult_Renew{Renew: r}
		}
	case *pb.LeaseOp_Release:
		var r *pb.ReleaseResponse
		if r, err = g.Release(ctx, o.Release); err == nil {
			res.Result = &pb.LeaseResult_Release{Release: r}
		}
	default:
		g.api.m.invalid.WithLabelValues("grpc").Inc()
		err = status.Error(codes.InvalidArgument, "op: one of acquire, renew or release is required")
	}
	if err != nil {
		st := status.Convert(err)
		res.Code, res.Message = int32(st.Code()), st.Message()
	}
}
