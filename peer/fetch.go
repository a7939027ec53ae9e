package peer

import (
	"context"

	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/bucket"
	peerv1 "github.com/ringlimit/ringlimit/proto/peerv1"
)

// A fetch: a new owner asks a key's previous owner for its state (its
// bucket, records and, for a concurrency key, its lease set). Both ends.

// Fetch asks name (a member, or one that left less than Grace ago) for
// key's state; found is false when it holds none.
func (p *Pool) Fetch(ctx context.Context, name, key string, l *bucket.Limit) (st State, found bool, err error) {
	c, err := p.conn(name, true)
	if err != nil {
		return State{}, false, err
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	return c.fetch(ctx, key, l)
}

// Fetch answers a new owner asking for a key's state.
func (s *Server) Fetch(ctx context.Context, req *peerv1.FetchRequest) (*peerv1.FetchResponse, error) {
	if err := s.authorize(ctx, req.GetFrom()); err != nil {
		return nil, err
	}
	var named *bucket.Limit
	if l, err := limitFromProto(req.GetLimit()); err == nil {
		named = &l
	}
	// The answer counts as shared with the asker (see StateStore.Lookup):
	// not one its deadline has already left nobody to receive.
	if err := ctx.Err(); err != nil {
		return nil, status.FromContextError(err).Err()
	}
	st, ok := s.h.Lookup(req.GetFrom(), req.GetKey(), named)
	if !ok {
		return &peerv1.FetchResponse{}, nil
	}
	return &peerv1.FetchResponse{Found: true, State: &peerv1.BucketState{Key: req.GetKey(), Limit: limitToProto(&st.Limit), Used: st.Used,
		Reservations: reservationsToProto(st.Reservations), ResetAt: st.ResetAt, LeaseSet: st.LeaseSet, Leases: leasesToProto(st.Leases), Adaptive: adaptiveStateToProto(st.Adaptive), Window: st.Window}}, nil
}
