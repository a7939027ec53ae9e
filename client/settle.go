package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/ringlimit/ringlimit/proto/ringlimitv1"
)

// Reserve and settle: for costs known only afterwards (LLM tokens, bytes
// streamed). ReserveCost spends an estimate and answers a reservation id;
// Settle turns it into the true cost: the unused part goes back, an
// overrun is charged past zero (a debt later checks wait out). Limiter's
// Reserve and ReserveN keep golang.org/x/time/rate's meaning (a place for
// later); these are named apart.

// Errors of Settle, to test with errors.Is.
var (
	// ErrReservationNotFound: the id is unknown, forged or expired (an
	// expired reservation keeps its spend).
	ErrReservationNotFound = errors.New("client: reservation not found")
	// ErrAlreadySettled: settled before; nothing changed.
	ErrAlreadySettled = errors.New("client: reservation already settled")
)

// Held is an admitted reserve: its decision and the reservation to settle.
type Held struct {
	Decision
	// Reservation is the id to give Settle; empty when the check was
	// refused or degraded (no reservation: a degraded spend stands).
	Reservation string
}

// Settlement is the answer to a settle.
type Settlement struct {
	Cost      int64
	Remaining int64 // 0 while the key is in debt
	Limit     int64
	Owner     string
}

// ReserveCost checks n on key now with a reservation that can be settled
// for ttl (0: the cluster's 5 minutes; else 1s to 24h): when admitted, the
// n tokens are spent and Held.Reservation names the reservation. Token
// bucket limits only. Its errors are AllowN's.
func (lim *Limiter) ReserveCost(ctx context.Context, key string, n int, ttl time.Duration) (Held, error) {
	if err := lim.checkN(n); err != nil {
		return Held{}, err
	}
	cost := int64(n)
	ds, err := lim.c.Check(ctx, &pb.Check{Key: key, Cost: &cost, Limit: lim.wire, Reserve: true, ReserveTtlMs: ttl.Milliseconds()})
	if err != nil {
		return Held{}, err
	}
	if len(ds) != 1 {
		return Held{}, fmt.Errorf("client: %d decisions for one check", len(ds))
	}
	return Held{Decision: decision(ds[0]), Reservation: ds[0].GetReservation()}, nil
}

// Settle settles the reservation id at its true cost (0 or more) on the
// node that owns its key, through any node. Settling is idempotent by id:
// after an error of ErrNoNode (no node answered) or Unavailable it is safe
// to call again. It returns ErrReservationNotFound, ErrAlreadySettled, an
// InvalidArgument status error, or ErrNoNode.
func (c *Client) Settle(ctx context.Context, id string, cost int64) (Settlement, error) {
	var buf [16]*node
	var last error
	for _, n := range c.order(buf[:0], -1, -1) {
		if err := ctx.Err(); err != nil {
			return Settlement{}, err
		}
		cctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
		resp, err := n.rpc.Settle(cctx, &pb.SettleRequest{Reservation: id, Cost: cost})
		cancel()
		switch status.Code(err) {
		case codes.OK:
			return Settlement{Cost: resp.GetCost(), Remaining: resp.GetRemaining(), Limit: resp.GetLimit(), Owner: resp.GetOwner()}, nil
		case codes.NotFound:
			return Settlement{}, ErrReservationNotFound
		case codes.AlreadyExists:
			return Settlement{}, ErrAlreadySettled
		case codes.InvalidArgument:
			return Settlement{}, err
		}
		last = err
	}
	return Settlement{}, fmt.Errorf("%w: %w", ErrNoNode, last)
}

// Settle is c.Settle through the Limiter's Client.
func (lim *Limiter) Settle(ctx context.Context, id string, cost int64) (Settlement, error) {
	return lim.c.Settle(ctx, id, cost)
}

// SettleConfig configures SettleMiddleware.
type SettleConfig struct {
	// Limiter is the limit each request reserves from. Required; token
	// bucket only.
	Limiter *Limiter
	// Key returns the key a request spends from. Required.
	Key func(r *http.Request) string
	// Estimate returns what to reserve before the handler runs, 1 to the
	// limit's burst (an LLM proxy: the request's max_tokens). Required.
	Estimate func(r *http.Request) int
	// TTL is how long a reservation can be settled. 0: the cluster's
	// default, 5 minutes.
	TTL time.Duration
	// OnSettle, if set, is told each settle's outcome (for logs and
	// metrics). Default: nil.
	OnSettle func(r *http.Request, s Settlement, err error)
}

type usageKey struct{}

// usage is where a handler reports the true cost of its request.
type usage struct {
	cost int64
	set  bool
}

// ReportUsage tells SettleMiddleware the true cost of the request whose
// context ctx is: the reservation is settled at it when the handler
// returns. A handler that reports nothing keeps the estimate. It reports
// false when ctx is not from a SettleMiddleware request.
func ReportUsage(ctx context.Context, cost int64) bool {
	u, ok := ctx.Value(usageKey{}).(*usage)
	if ok {
		u.cost, u.set = max(cost, 0), true
	}
	return ok
}

// SettleMiddleware reserves cfg.Estimate of each request's key before the
// handler and, when the handler returns, settles the true cost the
// handler reported with ReportUsage. A refused reserve answers 429 with
// the rate-limit headers, and the handler does not run; when no node
// answers, the request is served without a reservation (fail open). The
// settle runs after the response is written, on the request's context
// detached from its cancellation.
func SettleMiddleware(cfg SettleConfig) (func(http.Handler) http.Handler, error) {
	if cfg.Limiter == nil || cfg.Key == nil || cfg.Estimate == nil {
		return nil, errors.New("client: SettleMiddleware needs Limiter, Key and Estimate")
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			held, err := cfg.Limiter.ReserveCost(r.Context(), cfg.Key(r), cfg.Estimate(r), cfg.TTL)
			if err == nil && !held.Allowed {
				w.Header().Set("Retry-After", fmt.Sprint(int64((held.RetryAfter+time.Second-1)/time.Second)))
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusTooManyRequests)
				fmt.Fprintf(w, `{"code":"RATE_LIMITED","retry_after_ms":%d}`+"\n", held.RetryAfter.Milliseconds())
				return
			}
			if err != nil || held.Reservation == "" {
				next.ServeHTTP(w, r)
				return
			}
			u := &usage{}
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), usageKey{}, u)))
			cost := int64(cfg.Estimate(r))
			if u.set {
				cost = u.cost
			}
			s, err := cfg.Limiter.Settle(context.WithoutCancel(r.Context()), held.Reservation, cost)
			if cfg.OnSettle != nil {
				cfg.OnSettle(r, s, err)
			}
		})
	}, nil
}
