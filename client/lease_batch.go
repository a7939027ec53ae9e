package client

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/internal/batcher"
	pb "github.com/ringlimit/ringlimit/proto/ringlimitv1"
	"github.com/ringlimit/ringlimit/ring"
)

// Lease operations travel as checks do: the acquires and renews bound for
// one node while its previous call of them is out leave together in one
// Leases call, and so do its releases (apart: a release is answered at
// once, an acquire only once replicated), and each goes first to the node that owns its key (an
// acquire's key, or the key a lease id names), learnt from earlier
// answers, so that the node decides it without a forwarding hop.

// leaseCall is one operation waiting for its batch.
type leaseCall = batcher.Call[*pb.LeaseOp, *pb.LeaseResult]

// errLeasesUnary fails the operations of a batch the node does not serve
// as one (a node older than the Leases call): each is sent again in its
// own call, and the node's later operations go that way too.
var errLeasesUnary = errors.New("client: node does not batch lease operations")

// leaseKey is the part of a lease id that names its key (the owner cache
// of leases is keyed by it), or "" for an id that names none or several.
func leaseKey(id string) string {
	rest, ok := strings.CutPrefix(id, "l1.")
	if !ok || strings.IndexByte(rest, ',') >= 0 {
		return ""
	}
	k, _, ok := strings.Cut(rest, ".")
	if !ok {
		return ""
	}
	return k
}

// leaseStart is the index of the owner of the key the lease id names: on
// the ring, or the node that answered last for it while the ring is
// unknown; -1 (the next in turn) when neither tells.
func (c *Client) leaseStart(id string) int {
	if t := c.ring.table.Load(); t != nil {
		if stored, err := bucket.ParseLeaseID(id); err == nil {
			return t.owners[ring.Partition(stored, len(t.owners))]
		}
	}
	if k := leaseKey(id); k != "" {
		if i, ok := c.leaseOwners.get(k); ok {
			return i
		}
	}
	return -1
}

// learnLease records that the node at addr owns the key the lease id names.
func (c *Client) learnLease(id, addr string) {
	if k := leaseKey(id); k != "" && addr != "" && c.ring.table.Load() == nil {
		if j, ok := c.index(addr); ok {
			c.leaseOwners.put(k, j)
		}
	}
}

// lease sends op to n, batched with other operations bound for n, or in
// its own call when the client is Unbatched or n does not batch them. It
// returns the status error the operation's own call would have returned.
func (n *node) lease(ctx context.Context, op *pb.LeaseOp) (*pb.LeaseResult, error) {
	if n.lb != nil && !n.leasesUnary.Load() {
		b := n.lb
		if op.GetRelease() != nil {
			b = n.rb
		}
		cl := batcher.NewCall(ctx, []*pb.LeaseOp{op}, make([]*pb.LeaseResult, 1))
		err := b.Do(cl)
		switch {
		case err == nil:
			r := cl.Out[0]
			if r.GetCode() != int32(codes.OK) {
				return nil, status.Error(codes.Code(r.GetCode()), r.GetMessage())
			}
			return r, nil
		case errors.Is(err, batcher.ErrClosed):
			return nil, status.Error(codes.Canceled, "client: closed")
		case !errors.Is(err, errLeasesUnary):
			return nil, err
		}
	}
	return n.leaseAlone(ctx, op)
}

// leaseAlone sends op in its own Acquire, Renew or Release call.
func (n *node) leaseAlone(ctx context.Context, op *pb.LeaseOp) (*pb.LeaseResult, error) {
	switch o := op.GetOp().(type) {
	case *pb.LeaseOp_Acquire:
		r, err := n.rpc.Acquire(ctx, o.Acquire)
		return &pb.LeaseResult{Result: &pb.LeaseResult_Acquire{Acquire: r}}, err
	case *pb.LeaseOp_Renew:
		r, err := n.rpc.Renew(ctx, o.Renew)
		return &pb.LeaseResult{Result: &pb.LeaseResult_Renew{Renew: r}}, err
	case *pb.LeaseOp_Release:
		r, err := n.rpc.Release(ctx, o.Release)
		return &pb.LeaseResult{Result: &pb.LeaseResult_Release{Release: r}}, err
	}
	return nil, fmt.Errorf("client: lease operation %T", op.GetOp())
}

// flushLeases sends one batch of lease operations from the batcher's
// loop, in its own goroutine, which holds the batch's slot until the
// node answers.
func (n *node) flushLeases(calls []*leaseCall, size int, release func()) {
	n.run.Go(func() {
		defer release()
		n.sendLeases(calls, size)
	})
}

// sendLeases makes one Leases call of the batch's operations, in order,
// and answers each call its result.
func (n *node) sendLeases(calls []*leaseCall, size int) {
	req := &pb.LeasesRequest{Ops: make([]*pb.LeaseOp, 0, size)}
	for _, cl := range calls {
		req.Ops = append(req.Ops, cl.In...)
	}
	ctx, cancel := context.WithTimeout(n.c.ctx, n.c.cfg.Timeout)
	resp, err := n.leasesCall(ctx, req)
	cancel()
	n.c.ring.hint(resp.GetRingVersion())
	switch {
	case status.Code(err) == codes.Unimplemented:
		n.leasesUnary.Store(true)
		err = errLeasesUnary
	case err == nil && len(resp.GetResults()) != size:
		err = fmt.Errorf("client: %s answered %d results for %d lease operations", n.addr, len(resp.GetResults()), size)
	}
	off := 0
	for _, cl := range calls {
		if err == nil {
			copy(cl.Out, resp.GetResults()[off:off+len(cl.In)])
		}
		off += len(cl.In)
		cl.Finish(err)
	}
}
