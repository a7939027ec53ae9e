package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ringlimit/ringlimit/clock"
	pb "github.com/ringlimit/ringlimit/proto/ringlimitv1"
)

// Decision is the cluster's answer to one check.
type Decision struct {
	// Allowed is true when the check was admitted (and spent its cost).
	// With a leaky bucket it means the check holds a place in the key's
	// queue, and Delay says when that place comes.
	Allowed bool
	// Limit is the limit's n.
	Limit int64
	// Remaining is what the key has left after this check.
	Remaining int64
	// RetryAfter is, on a rejection, how long until the same check would be
	// admitted; 0 when allowed.
	RetryAfter time.Duration
	// ResetAfter is how long until the key is full (or its window ends).
	ResetAfter time.Duration
	// Delay is, for an admitted leaky-bucket check, how long until its turn
	// in the queue; 0 for the other algorithms.
	Delay time.Duration
	// Scope names the limit layer that decided ("inline" for a Limiter).
	Scope string
	// Owner is the node that decided.
	Owner string
	// Degraded is true when the key's owner could not be reached and the
	// limit's failure mode decided instead.
	Degraded bool
}

// decision converts a wire decision.
func decision(d *pb.Decision) Decision {
	return Decision{Allowed: d.GetAllowed(), Limit: d.GetLimit(), Remaining: d.GetRemaining(),
		RetryAfter: fromMillis(d.GetRetryAfterMs()), ResetAfter: fromMillis(d.GetResetAfterMs()),
		Delay: fromMillis(d.GetDelayMs()), Scope: d.GetScope(), Owner: d.GetOwner(), Degraded: d.GetDegraded()}
}

// Limiter applies one Limit to any number of keys, in the cluster: each
// key has its own bucket on its owner node, shared by every client and
// Limiter that names the same key with the same Limit. The method names
// are golang.org/x/time/rate's, and mean the same where a remote limiter
// can: Allow and AllowN ask "may n events happen now", Wait and WaitN block
// until they may, Reserve and ReserveN take a place for later. Unlike
// x/time/rate, every method takes the key, asks the cluster (one call, see
// Client.Check), and reads time from the Client's Config.Clock.
//
// A Limiter is safe for concurrent use.
type Limiter struct {
	c     *Client
	limit Limit
	wire  *pb.Limit
}

// NewLimiter returns a Limiter of l on c, or l.Validate's error.
func NewLimiter(c *Client, l Limit) (*Limiter, error) {
	if c == nil {
		return nil, errors.New("client: NewLimiter: nil Client")
	}
	if err := l.Validate(); err != nil {
		return nil, err
	}
	return &Limiter{c: c, limit: l, wire: l.proto()}, nil
}

// Limit returns the Limiter's limit.
func (lim *Limiter) Limit() Limit { return lim.limit }

// Allow reports whether one event on key may happen now: AllowN(ctx, key,
// 1).Allowed. An error (no node answered, an invalid key) reports false:
// use AllowN to tell a rejection from an error.
func (lim *Limiter) Allow(ctx context.Context, key string) bool {
	d, err := lim.AllowN(ctx, key, 1)
	return err == nil && d.Allowed
}

// AllowN checks n events on key now and returns the cluster's decision:
// when it is allowed the n tokens are spent, when not nothing is. Unlike
// x/time/rate's AllowN it returns the whole decision (remaining,
// retry-after, reset) and an error: n below 1 or above the limit's burst,
// an invalid key (a status error with code InvalidArgument), ErrNoNode
// when no node answered, or the context's error.
func (lim *Limiter) AllowN(ctx context.Context, key string, n int) (Decision, error) {
	if err := lim.checkN(n); err != nil {
		return Decision{}, err
	}
	cost := int64(n)
	ds, err := lim.c.Check(ctx, &pb.Check{Key: key, Cost: &cost, Limit: lim.wire})
	if err != nil {
		return Decision{}, err
	}
	if len(ds) != 1 {
		return Decision{}, fmt.Errorf("client: %d decisions for one check", len(ds))
	}
	return decision(ds[0]), nil
}

// checkN refuses what no bucket of the limit can ever admit.
func (lim *Limiter) checkN(n int) error {
	if n < 1 || int64(n) > lim.limit.Burst() {
		return fmt.Errorf("client: n must be between 1 and the burst %d of %v, got %d", lim.limit.Burst(), lim.limit, n)
	}
	return nil
}

// Wait is WaitN(ctx, key, 1).
func (lim *Limiter) Wait(ctx context.Context, key string) error {
	return lim.WaitN(ctx, key, 1)
}

// WaitN blocks until n events on key are admitted, ctx ends, or waiting
// would outlast ctx's deadline, as x/time/rate's WaitN does. A rejected
// check is asked again after its RetryAfter (each retry is one more call to
// the cluster); if that is later than ctx's deadline WaitN returns at once
// an error that wraps context.DeadlineExceeded, having spent nothing. With
// a leaky bucket an admitted check holds a place in the queue and WaitN
// sleeps its Delay; if that place comes after ctx's deadline WaitN returns
// the same error at once, and the place stays spent (no request can give
// it back). It returns AllowN's errors for a bad n or key and when no node
// answers.
func (lim *Limiter) WaitN(ctx context.Context, key string, n int) error {
	for {
		d, err := lim.AllowN(ctx, key, n)
		if err != nil {
			return err
		}
		wait := d.RetryAfter
		if d.Allowed {
			wait = d.Delay
		}
		if wait <= 0 {
			if d.Allowed {
				return nil
			}
			wait = time.Millisecond // a rejection always has a RetryAfter; never spin
		}
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
			return fmt.Errorf("client: Wait(n=%d) on %q: %v would outlast the context's deadline: %w", n, key, wait, context.DeadlineExceeded)
		}
		if !clock.Sleep(lim.c.cfg.Clock, wait, ctx.Done()) {
			return ctx.Err()
		}
		if d.Allowed {
			return nil
		}
	}
}

// Reserve is ReserveN(ctx, key, 1).
func (lim *Limiter) Reserve(ctx context.Context, key string) (*Reservation, error) {
	return lim.ReserveN(ctx, key, 1)
}

// ReserveN takes n events on key for now or later and says when to act:
// the caller waits r.Delay() and then goes ahead. Whether "later" is
// possible is the algorithm's: with bucket.LeakyBucket (a shaping limit,
// Limit.WithAlgorithm) the cluster queues the check and a reservation
// really holds a future place, r.Delay() being its turn; the queue holds
// the burst, and a reservation that finds it full is not OK. With the other
// algorithms a reservation is OK only when the events may happen now
// (r.Delay() is 0) and is not OK otherwise. In both, a reservation that is
// not OK spent nothing, and its Delay is how long until one would be OK.
//
// Unlike x/time/rate, a reservation may be refused (OK false) for a reason
// other than n above the burst, and there is no Cancel: the cluster gives
// no spent place or token back, so a reservation that is not used is lost.
// ReserveN returns AllowN's errors.
func (lim *Limiter) ReserveN(ctx context.Context, key string, n int) (*Reservation, error) {
	d, err := lim.AllowN(ctx, key, n)
	if err != nil {
		return nil, err
	}
	return &Reservation{d: d, clk: lim.c.cfg.Clock, at: lim.c.cfg.Clock.Now()}, nil
}

// Reservation is a place ReserveN took (or failed to take). It is safe for
// concurrent use.
type Reservation struct {
	d   Decision
	clk clock.Clock
	at  clock.Instant // when the answer arrived
}

// OK reports whether the reservation holds its events.
func (r *Reservation) OK() bool { return r.d.Allowed }

// Delay returns how long from now the caller must wait: until its turn
// when OK, until a new reservation could be OK when not. It shrinks as the
// Client's clock moves and is never negative.
func (r *Reservation) Delay() time.Duration {
	wait := r.d.Delay
	if !r.d.Allowed {
		wait = r.d.RetryAfter
	}
	return max(wait-r.clk.Now().Sub(r.at), 0)
}

// Decision returns the cluster's answer that made the reservation.
func (r *Reservation) Decision() Decision { return r.d }
