package api

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/clock"
	"github.com/ringlimit/ringlimit/decide"
	"github.com/ringlimit/ringlimit/forward"
	"github.com/ringlimit/ringlimit/policy"
	pb "github.com/ringlimit/ringlimit/proto/ringlimitv1"
)

// RegisterGRPC registers the public RateLimiter service on s, and with
// Config.RLS Envoy's rate limit service.
func (a *API) RegisterGRPC(s grpc.ServiceRegistrar) {
	pb.RegisterRateLimiterServer(s, &grpcServer{api: a})
	a.registerRLS(s)
}

type grpcServer struct {
	pb.UnimplementedRateLimiterServer
	api *API
}

// Check is the public gRPC Check: decode, decide, encode.
func (g *grpcServer) Check(ctx context.Context, req *pb.CheckRequest) (*pb.CheckResponse, error) {
	return g.check(ctx, req, nil)
}

// checkAnswer is a Check's response with room for its decisions, which a
// Batches stream reuses once the response is sent (see
// Config.ReuseBatchResponses): a node answering 64 checks a message
// allocated a Decision for each, a quarter of the bytes it allocated
// under load.
type checkAnswer struct {
	resp      pb.CheckResponse
	ptrs      []*pb.Decision
	decisions []pb.Decision
}

var checkAnswers = sync.Pool{New: func() any { return new(checkAnswer) }}

// check is Check, answering in out when it is not nil.
func (g *grpcServer) check(ctx context.Context, req *pb.CheckRequest, out *checkAnswer) (*pb.CheckResponse, error) {
	p := decide.GetPlan(decide.OpCheck)
	defer p.Release()
	priv := g.api.privateGRPC(ctx)
	if err := g.api.planFromProto(req, p); err != nil {
		g.api.m.invalid.WithLabelValues("grpc").Inc()
		return nil, status.Error(codes.InvalidArgument, g.api.message(err, priv))
	}
	answers, err := g.api.d.Decide(ctx, "grpc", p)
	if err != nil {
		return nil, grpcError(err, priv)
	}
	var resp *pb.CheckResponse
	var decisions []pb.Decision
	if out != nil {
		if cap(out.decisions) < len(answers) {
			out.decisions = make([]pb.Decision, len(answers))
			out.ptrs = make([]*pb.Decision, len(answers))
		}
		decisions = out.decisions[:len(answers)]
		resp = &out.resp
		resp.Decisions = out.ptrs[:len(answers)]
	} else {
		resp = &pb.CheckResponse{Decisions: make([]*pb.Decision, len(answers))}
		decisions = make([]pb.Decision, len(answers)) // one allocation for all
	}
	for i := range answers {
		a := &answers[i]
		if priv {
			hide(a)
		}
		d := &decisions[i]
		d.Allowed = a.Allowed
		d.Limit = a.Limit
		d.Remaining = a.Remaining
		d.RetryAfterMs = clock.Millis(a.RetryAfter)
		d.ResetAfterMs = clock.Millis(a.ResetAfter)
		d.DelayMs = clock.Millis(a.Delay)
		d.Owner = a.Owner
		d.Degraded = a.Degraded
		d.Scope = a.Scope
		d.WouldReject = a.WouldReject
		d.PolicyVersion = a.Version
		d.OwnerAddr = a.OwnerAddr
		d.Reservation = a.Reservation
		d.Lease, d.InFlight, d.ExpiresInMs = a.Lease, a.InFlight, clock.Millis(a.ExpiresIn)
		resp.Decisions[i] = d
	}
	resp.RingVersion = g.api.ringVersion(priv)
	return resp, nil
}

// reuse gives out back for a later check once its response was sent;
// every field is cleared, so that nothing it pointed to is kept.
func (out *checkAnswer) reuse() {
	clear(out.decisions)
	clear(out.ptrs)
	out.resp = pb.CheckResponse{}
	checkAnswers.Put(out)
}

func (a *API) planFromProto(req *pb.CheckRequest, p *decide.Plan) error {
	n := len(req.GetChecks())
	if n == 0 {
		return errors.New("checks: at least one check is required")
	}
	if n > MaxBatch {
		return fmt.Errorf("checks: at most %d per call, got %d", MaxBatch, n)
	}
	p.Grow(n)
	var memo inlineMemo
	for i, c := range req.GetChecks() {
		// Field names are built only for an error: the path of a valid
		// check costs no formatting.
		if pr := c.GetRequest(); pr != nil {
			if c.GetKey() != "" || c.GetLimit() != nil {
				return fmt.Errorf("checks[%d]: give either key and limit, or request, not both", i)
			}
			if c.GetReserve() || c.GetReserveTtlMs() != 0 {
				return fmt.Errorf("checks[%d].%w", i, decide.ErrReservePolicy)
			}
			var cost int64
			if c.Cost != nil {
				if cost = *c.Cost; cost < 1 {
					return fmt.Errorf("checks[%d].cost: must be at least 1, got %d", i, cost)
				}
			}
			if err := a.d.AddPolicy(p, "request.", policy.Request{Policy: pr.GetPolicy(), APIKey: pr.GetApiKey(),
				User: pr.GetUser(), IP: pr.GetIp(), Route: pr.GetRoute(), Tier: pr.GetTier(), Cost: cost}); err != nil {
				return fmt.Errorf("checks[%d].%w", i, err)
			}
			if c.GetPeek() {
				p.PeekLast()
			}
			continue
		}
		if a.noInline {
			return fmt.Errorf("checks[%d]: %w", i, errInlineDisabled)
		}
		fc, err := memo.check(c)
		if err != nil {
			return fmt.Errorf("checks[%d].%w", i, err)
		}
		fc.Peek = c.GetPeek()
		p.AddInline(fc)
	}
	return nil
}

// inlineMemo is the last inline check a request's loop built. A batch
// mostly repeats one limit, and a hot key repeats its key too: a check
// whose limit has the same fields takes the limit already parsed, and one
// with the same key as well the key already namespaced.
type inlineMemo struct {
	ok    bool
	limit *pb.Limit
	key   string
	last  forward.Check
}

// check is checkFromProto of c, with what it can take from the check
// before.
func (m *inlineMemo) check(c *pb.Check) (forward.Check, error) {
	pl := c.GetLimit()
	if !m.ok || pl == nil || !sameLimit(pl, m.limit) {
		fc, err := checkFromProto(c)
		if err == nil {
			*m = inlineMemo{ok: true, limit: pl, key: c.GetKey(), last: fc}
		}
		return fc, err
	}
	fc := m.last
	if key := c.GetKey(); key != m.key {
		if err := validateKey("key", key); err != nil {
			return forward.Check{}, err
		}
		fc.Key = bucket.InlineKey(key, &fc.Limit)
		m.key, m.last.Key = key, fc.Key
	}
	return fc, checkUse(c, &fc)
}

// sameLimit reports whether a and b have the same fields: one parses as
// the other does. TestSameLimitEveryField holds it to every field.
func sameLimit(a, b *pb.Limit) bool {
	return a.GetAlgorithm() == b.GetAlgorithm() && a.GetLimit() == b.GetLimit() && a.GetPerMs() == b.GetPerMs() &&
		a.GetBurst() == b.GetBurst() && a.GetFailureMode() == b.GetFailureMode() && a.GetLease() == b.GetLease() &&
		a.GetCalendar() == b.GetCalendar() && a.GetTimezone() == b.GetTimezone() && a.GetWeekStart() == b.GetWeekStart()
}

// checkFromProto validates an inline check; its errors name fields from
// within the check ("key: …"). Its key is namespaced as toCheck's is.
func checkFromProto(c *pb.Check) (forward.Check, error) {
	if err := validateKey("key", c.GetKey()); err != nil {
		return forward.Check{}, err
	}
	pl := c.GetLimit()
	if pl == nil {
		return forward.Check{}, errors.New("limit: required (or a policy request)")
	}
	alg := pl.GetAlgorithm()
	if _, ok := pb.Algorithm_name[int32(alg)]; !ok {
		return forward.Check{}, fmt.Errorf("limit.algorithm: unknown value %d", alg)
	}
	if alg == pb.Algorithm_CONCURRENCY {
		return forward.Check{}, errors.New("limit.algorithm: a CONCURRENCY limit is acquired (RateLimiter/Acquire), not checked")
	}
	if _, ok := pb.FailureMode_name[int32(pl.GetFailureMode())]; !ok {
		return forward.Check{}, fmt.Errorf("limit.failure_mode: unknown value %d", pl.GetFailureMode())
	}
	spec := bucket.LimitSpec{Algorithm: algorithmName(alg), Limit: pl.GetLimit(), PerDuration: millis(pl.GetPerMs()), Burst: pl.GetBurst(),
		FailureMode: bucket.FailureMode(pl.GetFailureMode()).String(), Lease: pl.GetLease(),
		Calendar: pl.GetCalendar(), Timezone: pl.GetTimezone(), WeekStart: pl.GetWeekStart()}
	if spec.Calendar != "" && alg == pb.Algorithm_TOKEN_BUCKET {
		spec.Algorithm = "" // the wire cannot leave it out: a calendar window is a fixed window
	}
	set, err := spec.Parse("limit")
	if err != nil {
		var fe *bucket.FieldError
		if errors.As(err, &fe) && fe.Field == "per" {
			// The wire carries the period as per_ms.
			fe.Path = "limit.per_ms"
		}
		return forward.Check{}, err
	}
	fc := forward.Check{Key: bucket.InlineKey(c.GetKey(), &set.Limit), Limit: set.Limit, Mode: set.FailureMode, Lease: set.Lease}
	if err := checkUse(c, &fc); err != nil {
		return forward.Check{}, err
	}
	return fc, nil
}

// checkUse sets fc's cost and reservation from c, validated against
// fc.Limit.
func checkUse(c *pb.Check, fc *forward.Check) error {
	fc.Cost = 1
	if c.Cost != nil {
		fc.Cost = *c.Cost
	}
	if err := validateCost("cost", &fc.Limit, fc.Cost); err != nil {
		return err
	}
	reserve, err := reserveTTL(c.GetReserve(), millis(c.GetReserveTtlMs()), c.GetReserveTtlMs() != 0, "reserve_ttl_ms", &fc.Limit)
	if err != nil {
		return err
	}
	fc.Reserve = reserve
	return nil
}

// millis is ms milliseconds, saturated at the ends of time.Duration
// (where bucket.LimitSpec refuses it as out of range).
func millis(ms int64) time.Duration {
	const most = int64(math.MaxInt64 / time.Millisecond)
	switch {
	case ms > most:
		return math.MaxInt64
	case ms < -most:
		return math.MinInt64
	}
	return time.Duration(ms) * time.Millisecond
}

// algorithmName maps the proto enum to the bucket package's wire names.
func algorithmName(a pb.Algorithm) string {
	switch a {
	case pb.Algorithm_LEAKY_BUCKET:
		return "leaky_bucket"
	case pb.Algorithm_FIXED_WINDOW:
		return "fixed_window"
	case pb.Algorithm_SLIDING_WINDOW_LOG:
		return "sliding_window_log"
	case pb.Algorithm_SLIDING_WINDOW_COUNTER:
		return "sliding_window_counter"
	}
	return "token_bucket"
}

// grpcError is the status of a check that failed with err; with priv (see
// API.private), without the names of members, addresses, policies and
// scopes.
func grpcError(err error, priv bool) error {
	switch {
	case errors.Is(err, forward.ErrInvalid) && priv:
		return status.Error(codes.InvalidArgument, hideNames(err.Error()))
	case errors.Is(err, forward.ErrInvalid):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, forward.ErrUnavailable) && priv:
		return status.Error(codes.Unavailable, privateUnavailable)
	case errors.Is(err, forward.ErrUnavailable):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case priv:
		return status.Error(codes.Internal, privateInternal)
	}
	return status.Error(codes.Internal, err.Error())
}
