package client

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/ringlimit/ringlimit/proto/ringlimitv1"
)

// Peek asks what AllowN(ctx, key, 1) would answer now, and spends nothing:
// PeekN(ctx, key, 1). Any check sent with Client.Check can peek the same
// way: set its Peek field.
func (lim *Limiter) Peek(ctx context.Context, key string) (Decision, error) {
	return lim.PeekN(ctx, key, 1)
}

// PeekN returns the decision AllowN(ctx, key, n) would return now, and
// spends nothing: the key is not created, its owner's state is untouched.
// Its errors are AllowN's.
func (lim *Limiter) PeekN(ctx context.Context, key string, n int) (Decision, error) {
	if err := lim.checkN(n); err != nil {
		return Decision{}, err
	}
	cost := int64(n)
	ds, err := lim.c.Check(ctx, &pb.Check{Key: key, Cost: &cost, Limit: lim.wire, Peek: true})
	if err != nil {
		return Decision{}, err
	}
	if len(ds) != 1 {
		return Decision{}, fmt.Errorf("client: %d decisions for one check", len(ds))
	}
	return decision(ds[0]), nil
}

// ResetResult is a reset's answer.
type ResetResult struct {
	// Previous is what a check of cost 1 found remaining before the reset
	// (a policy request: the smallest over its layers).
	Previous int64
	// Owner is the node that reset the key.
	Owner string
	// Unconfirmed names the members that did not acknowledge dropping
	// their copies of the key before their peer deadline.
	Unconfirmed []string
}

// Reset puts key back to full under the Limiter's limit, on its owner and
// every member holding a copy: Client.Reset of the key.
func (lim *Limiter) Reset(ctx context.Context, key string) (ResetResult, error) {
	resp, err := lim.c.Reset(ctx, &pb.Check{Key: key, Limit: lim.wire})
	if err != nil {
		return ResetResult{}, err
	}
	return ResetResult{Previous: resp.GetPreviousRemaining(), Owner: resp.GetOwner(), Unconfirmed: resp.GetUnconfirmed()}, nil
}

// Reset puts the key check names (an inline key and limit, or a policy
// request: every layer) back to full, with Config.AdminToken. It tries
// the nodes in turn while they cannot be reached (a reset twice is a reset
// once) and returns the first answer: Unauthenticated or PermissionDenied
// without a valid token, InvalidArgument for a bad check, Unavailable when
// the key's owner could not be reached (nothing was reset), ErrNoNode when
// no node answered.
func (c *Client) Reset(ctx context.Context, check *pb.Check) (*pb.ResetResponse, error) {
	if c.cfg.AdminToken != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+c.cfg.AdminToken)
	}
	var buf [16]*node
	var last error
	for _, n := range c.order(buf[:0], -1, -1) {
		cctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
		resp, err := n.rpc.Reset(cctx, &pb.ResetRequest{Check: check})
		cancel()
		if err == nil {
			return resp, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if status.Code(err) != codes.Unavailable || isOwnerUnavailable(err) {
			return nil, err
		}
		last = err
	}
	return nil, fmt.Errorf("%w: %w", ErrNoNode, last)
}

// isOwnerUnavailable tells a node's own answer that the key's owner could
// not be reached (nothing reset: asking another node will not help) from
// a node that could not be reached at all.
func isOwnerUnavailable(err error) bool {
	s, _ := status.FromError(err)
	return s != nil && strings.HasPrefix(s.Message(), "owner unavailable")
}
