package api

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/ringlimit/ringlimit/proto/ringlimitv1"
)

func acquireOp(key string, limit int64) *pb.LeaseOp {
	return &pb.LeaseOp{Op: &pb.LeaseOp_Acquire{Acquire: &pb.AcquireRequest{
		Check: &pb.Check{Key: key, Limit: &pb.Limit{Algorithm: pb.Algorithm_CONCURRENCY, Limit: limit}}}}}
}

func releaseOp(id string) *pb.LeaseOp {
	return &pb.LeaseOp{Op: &pb.LeaseOp_Release{Release: &pb.ReleaseRequest{Lease: id}}}
}

// TestGRPCLeases: one Leases call of three acquires of a limit of 2 grants
// exactly 2 and refuses 1 (in_flight 2, retry_after_ms 30000). A second
// call answers each operation as its own call would: the release
// of a granted lease (released, in_flight 1), a release of a malformed id
// and an empty operation (INVALID_ARGUMENT, each alone: the others are
// answered), a renew of the other lease (30s); a third, a second release
// of the first (released false), a renew of it (NOT_FOUND) and a renew of
// the other (in_flight 1: the operations of one call run concurrently, so
// the second call's renew may count the lease its release frees, or not).
// An empty call and one of 1,001 operations are INVALID_ARGUMENT and apply
// nothing.
func TestGRPCLeases(t *testing.T) {
	e := newTestEnv(t, nil)
	c := e.startGRPC(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	resp, err := c.Leases(ctx, &pb.LeasesRequest{Ops: []*pb.LeaseOp{acquireOp("jobs", 2), acquireOp("jobs", 2), acquireOp("jobs", 2)}})
	if err != nil || len(resp.GetResults()) != 3 {
		t.Fatalf("acquires: %v, %v", resp, err)
	}
	var ids []string
	refused := 0
	for i, r := range resp.GetResults() {
		d := r.GetAcquire().GetDecision()
		switch {
		case r.GetCode() != 0 || d == nil:
			t.Fatalf("acquire %d: %v", i, r)
		case d.GetAllowed():
			ids = append(ids, d.GetLease())
		default:
			refused++
			if d.GetLease() != "" || d.GetInFlight() != 2 || d.GetRetryAfterMs() != 30000 {
				t.Fatalf("refused acquire %d: %v", i, d)
			}
		}
	}
	if len(ids) != 2 || refused != 1 {
		t.Fatalf("granted %d, refused %d; want 2 and 1", len(ids), refused)
	}
	resp, err = c.Leases(ctx, &pb.LeasesRequest{Ops: []*pb.LeaseOp{
		releaseOp(ids[0]),
		releaseOp("not-a-lease"),
		{Op: &pb.LeaseOp_Renew{Renew: &pb.RenewRequest{Lease: ids[1]}}},
		{},
	}})
	if err != nil || len(resp.GetResults()) != 4 {
		t.Fatalf("second call: %v, %v", resp, err)
	}
	r := resp.GetResults()
	if rel := r[0].GetRelease(); r[0].GetCode() != 0 || !rel.GetReleased() || rel.GetInFlight() != 1 || rel.GetLimit() != 2 {
		t.Fatalf("release: %v", r[0])
	}
	if codes.Code(r[1].GetCode()) != codes.InvalidArgument || r[1].GetResult() != nil || r[1].GetMessage() == "" {
		t.Fatalf("release of a malformed id: %v", r[1])
	}
	if rn := r[2].GetRenew(); r[2].GetCode() != 0 || !rn.GetRenewed() || rn.GetExpiresInMs() != 30000 || rn.GetLimit() != 2 {
		t.Fatalf("renew: %v", r[2])
	}
	if codes.Code(r[3].GetCode()) != codes.InvalidArgument || r[3].GetMessage() != "op: one of acquire, renew or release is required" {
		t.Fatalf("empty operation: %v", r[3])
	}
	resp, err = c.Leases(ctx, &pb.LeasesRequest{Ops: []*pb.LeaseOp{
		releaseOp(ids[0]),
		{Op: &pb.LeaseOp_Renew{Renew: &pb.RenewRequest{Lease: ids[0]}}},
		{Op: &pb.LeaseOp_Renew{Renew: &pb.RenewRequest{Lease: ids[1]}}},
	}})
	if err != nil || resp.GetResults()[0].GetCode() != 0 || resp.GetResults()[0].GetRelease().GetReleased() ||
		codes.Code(resp.GetResults()[1].GetCode()) != codes.NotFound {
		t.Fatalf("second release and renew of a released lease: %v, %v", resp, err)
	}
	if rn := resp.GetResults()[2].GetRenew(); resp.GetResults()[2].GetCode() != 0 || !rn.GetRenewed() || rn.GetInFlight() != 1 {
		t.Fatalf("renew of the lease still held: %v", resp.GetResults()[2])
	}
	if _, err := c.Leases(ctx, &pb.LeasesRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("empty call: %v", err)
	}
	big := make([]*pb.LeaseOp, MaxBatch+1)
	for i := range big {
		big[i] = acquireOp("big", 5)
	}
	if _, err := c.Leases(ctx, &pb.LeasesRequest{Ops: big}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("%d operations: %v", len(big), err)
	}
	// Nothing of the refused call was applied: "big" holds no lease.
	resp, err = c.Leases(ctx, &pb.LeasesRequest{Ops: []*pb.LeaseOp{acquireOp("big", 5)}})
	if err != nil || resp.GetResults()[0].GetAcquire().GetDecision().GetInFlight() != 1 {
		t.Fatalf("acquire after the refused call: %v, %v", resp, err)
	}
}
