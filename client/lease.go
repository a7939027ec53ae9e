package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/bucket"
	pb "github.com/ringlimit/ringlimit/proto/ringlimitv1"
	"github.com/ringlimit/ringlimit/ring"
)

// In-flight (concurrency) limits: Acquire takes one of a key's slots for a
// TTL and answers a lease; Renew extends it; Release gives it back with
// the outcome and latency of the work it covered. A lease id names its
// key, so any node routes Renew and Release to the key's owner. The
// cluster never lets a lease outlive its TTL: a holder that dies frees its
// slot when the TTL runs out.

// ErrLeaseNotFound is returned by Renew and Release when the lease is
// unknown, forged, expired or (Renew) released.
var ErrLeaseNotFound = errors.New("client: lease not found")

// Outcome is how the work a lease (or a reported request) covered ended;
// an adaptive limit learns from it. The zero value is OutcomeOK.
type Outcome uint8

const (
	// OutcomeOK: the work was done.
	OutcomeOK Outcome = iota
	// OutcomeError: the backend failed or was too slow.
	OutcomeError
	// OutcomeDropped: the work was abandoned before it reached the
	// backend (the caller went away): it says nothing of the backend's
	// health.
	OutcomeDropped
)

// String returns "ok", "error" or "dropped", as the HTTP API and the CLI
// spell outcomes.
func (o Outcome) String() string {
	switch o {
	case OutcomeOK:
		return "ok"
	case OutcomeError:
		return "error"
	case OutcomeDropped:
		return "dropped"
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// proto returns o as the wire carries it; an unknown Outcome is an error.
func (o Outcome) proto() pb.Outcome {
	switch o {
	case OutcomeError:
		return pb.Outcome_OUTCOME_ERROR
	case OutcomeDropped:
		return pb.Outcome_OUTCOME_DROPPED
	}
	return pb.Outcome_OUTCOME_OK
}

// Lease is the answer to an acquire or a renew.
type Lease struct {
	// Decision: Allowed, Limit, RetryAfter (refused), Scope, Owner,
	// Degraded. Remaining is what the key has free after this answer.
	Decision
	// ID is the lease to give Renew and Release: empty when the acquire
	// was refused or degraded (no slot is held). A policy request with
	// several concurrency layers holds one lease each, joined by commas:
	// give the whole id back.
	ID string
	// InFlight is how many leases the key holds after this answer.
	InFlight int64
	// ExpiresIn is how long the lease lives unless renewed.
	ExpiresIn time.Duration
}

// Reported is the answer to Report.
type Reported struct {
	// Layers is how many adaptive layers took the sample.
	Layers int64
	// Limit is the current limit of the first adaptive layer.
	Limit int64
	// Owner is the node that took it.
	Owner string
}

// Acquire takes one slot of an inline limit of at most limit in flight
// on key, for ttl (0: the cluster's default, 30s; it caps ttl at an hour).
// requestID, when not empty, makes the acquire idempotent: repeated while
// its lease lives, it answers that lease again and takes no second slot.
// Acquire tries the nodes in turn while they cannot be reached; give a
// requestID so that such a retry never holds a second slot until its TTL.
// It returns an InvalidArgument status error for bad input and ErrNoNode
// when no node answered.
func (c *Client) Acquire(ctx context.Context, key string, limit int64, ttl time.Duration, requestID string) (Lease, error) {
	check := &pb.Check{Key: key, Limit: &pb.Limit{Algorithm: pb.Algorithm_CONCURRENCY, Limit: limit}}
	return c.AcquireCheck(ctx, check, ttl, requestID)
}

// AcquirePolicy is Acquire of a policy request: its rate layers are spent
// as a check and its concurrency layers acquired, for ttl (0: each
// layer's lease_ttl; capped by its max_lease_ttl). Any refusal refuses
// all: nothing is spent and no slot is held.
func (c *Client) AcquirePolicy(ctx context.Context, req *pb.PolicyRequest, ttl time.Duration, requestID string) (Lease, error) {
	return c.AcquireCheck(ctx, &pb.Check{Request: req}, ttl, requestID)
}

// AcquireCheck is Acquire of any check (an inline key with a CONCURRENCY
// limit, or a policy request); its cost and peek are ignored.
func (c *Client) AcquireCheck(ctx context.Context, check *pb.Check, ttl time.Duration, requestID string) (Lease, error) {
	start, second := -1, -1
	if check.GetKey() != "" {
		start, second = c.acquireOwner(check.GetKey())
	}
	op := &pb.LeaseOp{Op: &pb.LeaseOp_Acquire{Acquire: &pb.AcquireRequest{Check: check, TtlMs: ttl.Milliseconds(), RequestId: requestID}}}
	var res *pb.LeaseResult
	err := c.each(ctx, start, second, func(ctx context.Context, n *node) (err error) {
		res, err = n.lease(ctx, op)
		return err
	})
	if err != nil {
		return Lease{}, err
	}
	d := res.GetAcquire().GetDecision()
	if key := check.GetKey(); key != "" && d.GetOwnerAddr() != "" && c.ring.table.Load() == nil {
		if j, ok := c.index(d.GetOwnerAddr()); ok {
			c.owners.put(bucket.NamespaceConcurrency+key, j)
		}
	}
	c.learnLease(d.GetLease(), d.GetOwnerAddr())
	return Lease{Decision: decision(d), ID: d.GetLease(), InFlight: d.GetInFlight(), ExpiresIn: fromMillis(d.GetExpiresInMs())}, nil
}

// acquireOwner returns the indexes of the nodes to try first for an
// acquire of the inline key: the owner of its stored key (the key in the
// concurrency namespace, which the ring places whole, unlike an inline
// rate limit's) and that owner's successor, from the ring; or the node
// that answered last for it while the ring is unknown (-1: none).
func (c *Client) acquireOwner(key string) (first, second int) {
	stored := bucket.NamespaceConcurrency + key
	if t := c.ring.table.Load(); t != nil {
		p := ring.Partition(stored, len(t.owners))
		return t.owners[p], t.successor(p)
	}
	if i, ok := c.owners.get(stored); ok {
		return i, -1
	}
	return -1, -1
}

// Renew extends the lease id by ttl from now (0: the cluster's default)
// on its key's owner, through any node. It returns ErrLeaseNotFound once
// the lease expired or was released: its slot is gone, and the work it
// covered no longer holds one.
func (c *Client) Renew(ctx context.Context, id string, ttl time.Duration) (Lease, error) {
	op := &pb.LeaseOp{Op: &pb.LeaseOp_Renew{Renew: &pb.RenewRequest{Lease: id, TtlMs: ttl.Milliseconds()}}}
	var res *pb.LeaseResult
	err := c.each(ctx, c.leaseStart(id), -1, func(ctx context.Context, n *node) (err error) {
		res, err = n.lease(ctx, op)
		return err
	})
	if err != nil {
		return Lease{}, err
	}
	resp := res.GetRenew()
	return Lease{Decision: Decision{Allowed: resp.GetRenewed(), Limit: resp.GetLimit(),
		Remaining: max(resp.GetLimit()-resp.GetInFlight(), 0), Owner: resp.GetOwner()},
		ID: id, InFlight: resp.GetInFlight(), ExpiresIn: fromMillis(resp.GetExpiresInMs())}, nil
}

// Release gives the lease id back, telling the key's owner how the work
// ended and how long it took. It reports whether this call released it:
// false for a lease already released or expired. Release is idempotent,
// so after ErrNoNode it is safe to call again.
func (c *Client) Release(ctx context.Context, id string, o Outcome, latency time.Duration) (bool, error) {
	if o > OutcomeDropped {
		return false, fmt.Errorf("client: Release: %v is not an outcome", o)
	}
	op := &pb.LeaseOp{Op: &pb.LeaseOp_Release{Release: &pb.ReleaseRequest{Lease: id, Outcome: o.proto(),
		LatencyMs: max(latency.Milliseconds(), 0)}}}
	var res *pb.LeaseResult
	err := c.each(ctx, c.leaseStart(id), -1, func(ctx context.Context, n *node) (err error) {
		res, err = n.lease(ctx, op)
		return err
	})
	if err != nil {
		return false, err
	}
	return res.GetRelease().GetReleased(), nil
}

// Report tells the owners of a policy request's adaptive layers the
// outcome and latency of one request, as the middleware does for every
// request it serves with MiddlewareConfig.Report.
func (c *Client) Report(ctx context.Context, req *pb.PolicyRequest, o Outcome, latency time.Duration) (Reported, error) {
	if o > OutcomeDropped {
		return Reported{}, fmt.Errorf("client: Report: %v is not an outcome", o)
	}
	var resp *pb.ReportResponse
	err := c.each(ctx, -1, -1, func(ctx context.Context, n *node) (err error) {
		resp, err = n.rpc.Report(ctx, &pb.ReportRequest{Check: &pb.Check{Request: req}, Outcome: o.proto(),
			LatencyMs: max(latency.Milliseconds(), 0)})
		return err
	})
	if err != nil {
		return Reported{}, err
	}
	return Reported{Layers: resp.GetReported(), Limit: resp.GetLimit(), Owner: resp.GetOwner()}, nil
}

// each calls f with each node at most once, starting at start and second
// (-1: none; then the next in turn), each call within Config.Timeout, until one answers. It
// returns f's error when the node answered NotFound (as
// ErrLeaseNotFound), InvalidArgument or another refusal no other node
// would answer differently, ErrNoNode wrapping the last error when no node
// answered (Unavailable, DeadlineExceeded), and counts outages as Check
// does.
func (c *Client) each(ctx context.Context, start, second int, f func(context.Context, *node) error) error {
	var buf [16]*node
	var last error
	for _, n := range c.order(buf[:0], start, second) {
		if err := ctx.Err(); err != nil {
			return err
		}
		cctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
		err := f(cctx, n)
		cancel()
		switch status.Code(err) {
		case codes.OK:
			n.failed.Store(0)
			c.outage.answered(c)
			return nil
		case codes.NotFound:
			c.outage.answered(c)
			return ErrLeaseNotFound
		case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
			if ctx.Err() != nil {
				return ctx.Err()
			}
			n.failed.Store(int64(c.cfg.Clock.Now()))
			last = err
			continue
		}
		c.outage.answered(c)
		return err
	}
	err := fmt.Errorf("%w: %w", ErrNoNode, last)
	c.outage.failed(c, err)
	return err
}
