package peer

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/bucket"
	peerv1 "github.com/ringlimit/ringlimit/proto/peerv1"
)

// A reset's two ends on the peer API: Pool.Reset sends it, Server.Reset
// takes it (see forward's reset.go for what a reset does).

// Reset tells the member name that this node, key's owner, reset key at
// resetAt (its clock), within Timeout; or, with resetAt 0, asks name, the
// key's owner, to reset it, within three times Timeout (the owner waits up
// to Timeout for the other members before it answers).
func (p *Pool) Reset(ctx context.Context, name, key string, l *bucket.Limit, resetAt int64) (ResetAnswer, error) {
	c, err := p.conn(name, false)
	if err != nil {
		return ResetAnswer{}, err
	}
	timeout := p.cfg.Timeout
	if resetAt == 0 {
		timeout *= 3
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return c.reset(ctx, key, l, resetAt)
}

// Reset takes a key's owner's word that it reset the key (PeerResetRequest).
func (s *Server) Reset(ctx context.Context, req *peerv1.PeerResetRequest) (*peerv1.PeerResetResponse, error) {
	if err := s.authorize(ctx, req.GetFrom()); err != nil {
		return nil, err
	}
	l, err := limitFromProto(req.GetLimit())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "peer: reset: %v", err)
	}
	if err := bucket.CheckKey(req.GetKey()); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "peer: reset: %v", err)
	}
	if req.GetResetAt() < 0 {
		return nil, status.Error(codes.InvalidArgument, "peer: reset: negative reset_at")
	}
	// The sender's deadline is a wall time, as a context's is: read on
	// the node's clock (the system clock but in tests).
	if d := req.GetDeadline(); req.GetResetAt() == 0 && d != 0 && s.clock.Now().UnixNano() > d {
		return nil, status.Error(codes.DeadlineExceeded, "peer: reset: arrived after its sender's deadline; nothing reset")
	}
	a := s.h.ResetFrom(ctx, req.GetFrom(), req.GetKey(), l, req.GetResetAt())
	return &peerv1.PeerResetResponse{LeaseDropped: a.LeaseDropped, PreviousRemaining: a.Previous, Owner: a.Owner,
		Unconfirmed: a.Unconfirmed, Redirect: a.Redirect}, nil
}
