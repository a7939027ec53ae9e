package api

import (
	"context"
	"sync/atomic"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/ringlimit/ringlimit/proto/ringlimitv1"
)

// ringCache holds the last Ring answer built, for its version: members
// change rarely and clients ask every second, so the table is built once
// per ring.
type ringCache struct {
	last atomic.Pointer[pb.RingResponse]
}

// Ring answers this node's ring for a ring-aware client (see the proto).
func (g *grpcServer) Ring(ctx context.Context, req *pb.RingRequest) (*pb.RingResponse, error) {
	a := g.api
	if a.cluster == nil {
		return nil, status.Error(codes.Unimplemented, "ring: not served by this node")
	}
	if a.privateGRPC(ctx) {
		return nil, status.Error(codes.PermissionDenied, "ring: this node keeps its members private (--private-reads): an admin token is required")
	}
	v := a.cluster.RingVersion()
	if v == 0 || v == req.GetKnownVersion() {
		return &pb.RingResponse{Version: v}, nil
	}
	if r := a.ring.last.Load(); r != nil && r.GetVersion() == v {
		return r, nil
	}
	cr := a.cluster.ClientRing()
	r := &pb.RingResponse{Version: cr.Version, Owners: uint32s(cr.Owners), Successors: uint32s(cr.Successors)}
	for i, name := range cr.Names {
		r.Members = append(r.Members, &pb.RingMember{Name: name, Addr: cr.Addrs[i]})
	}
	if cr.Version == 0 || !complete(r) {
		// No ring yet, or the ring left an entry empty: no table, so that
		// the client keeps sending to any node (which routes).
		return &pb.RingResponse{}, nil
	}
	a.ring.last.Store(r)
	return r, nil
}

// ringVersion is the ring version an answer to this caller carries: none
// when the node has no cluster view, or keeps it private from the caller.
func (a *API) ringVersion(priv bool) uint64 {
	if a.cluster == nil || priv {
		return 0
	}
	return a.cluster.RingVersion()
}

func uint32s(in []int) []uint32 {
	if len(in) == 0 {
		return nil
	}
	out := make([]uint32, len(in))
	for i, v := range in {
		out[i] = uint32(v)
	}
	return out
}

// complete reports whether every entry of r's tables names a member.
func complete(r *pb.RingResponse) bool {
	n := uint32(len(r.GetMembers()))
	for _, t := range [][]uint32{r.GetOwners(), r.GetSuccessors()} {
		for _, i := range t {
			if i >= n {
				return false
			}
		}
	}
	return len(r.GetOwners()) > 0
}
