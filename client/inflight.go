package client

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/clock"
	"github.com/ringlimit/ringlimit/internal/clientip"
	pb "github.com/ringlimit/ringlimit/proto/ringlimitv1"
	"github.com/ringlimit/ringlimit/ratelimitheader"
)

// DefaultLeaseTTL is the cluster's TTL of an inline lease whose acquire
// names none; ConcurrencyMiddleware renews by it when an answer names no
// TTL.
const DefaultLeaseTTL = 30 * time.Second

// ConcurrencyConfig configures ConcurrencyMiddleware. The functions it
// holds are called from the server's goroutines, concurrently, and must be
// safe for that.
type ConcurrencyConfig struct {
	// MiddlewareConfig says who the caller is and which key or policy
	// request a request names, exactly as for Middleware; Client is
	// required. Its Limit must be left zero (the inline limit here is
	// InFlight) and its Cost and Report are unused. FailureMode and OnError
	// mean what they mean there.
	MiddlewareConfig
	// InFlight, when above 0, is the inline limit: at most InFlight
	// requests of a key (MiddlewareConfig.Key, by default the caller) in
	// flight at once, across the cluster. 0: the cluster's policy decides
	// (its concurrency layers are acquired, its rate layers spent).
	// Default 0.
	InFlight int64
	// TTL is how long a lease lives unless renewed: the middleware renews
	// it every third of the TTL the cluster granted while the handler
	// runs, so only a holder that died keeps a slot, and for at most its
	// TTL. 0: the cluster's default (DefaultLeaseTTL inline, a policy
	// layer's lease_ttl); else 1s to 1h, and a policy layer caps it at its
	// max_lease_ttl.
	TTL time.Duration
	// OnRelease, if set, is told every release: the outcome and latency
	// the middleware reported, whether the slot was released, and the
	// error. Default: nil.
	OnRelease func(r *http.Request, o Outcome, latency time.Duration, released bool, err error)
}

// validate returns the trusted proxies of cfg, or what is wrong with it.
func (cfg *ConcurrencyConfig) validate() (clientip.Trusted, error) {
	if !cfg.Limit.IsZero() {
		return nil, errors.New("client: ConcurrencyConfig: Limit is a rate limit; an inline in-flight limit is InFlight")
	}
	if cfg.InFlight < 0 {
		return nil, errors.New("client: ConcurrencyConfig.InFlight: must be 0 (policy) or more")
	}
	if cfg.TTL != 0 && (cfg.TTL < time.Second || cfg.TTL > time.Hour) {
		return nil, fmt.Errorf("client: ConcurrencyConfig.TTL: must be 0 (the default) or 1s to 1h, got %v", cfg.TTL)
	}
	base := cfg.MiddlewareConfig
	base.Key = nil // Key goes with InFlight here, not with Limit
	trusted, err := base.trustedProxies()
	if err != nil {
		return nil, err
	}
	switch {
	case cfg.InFlight == 0 && cfg.Key != nil:
		return nil, errors.New("client: ConcurrencyConfig: Key has no effect without InFlight")
	case cfg.InFlight > 0 && (cfg.Policy != "" || cfg.Route != nil || cfg.Tier != nil):
		return nil, errors.New("client: ConcurrencyConfig: Policy, Route and Tier name policy; they have no effect with InFlight")
	}
	return trusted, nil
}

// ConcurrencyMiddleware returns a func(http.Handler) http.Handler that
// holds one slot of an in-flight limit for each request while its handler
// runs: it acquires a lease before the handler (a refusal answers 429 with
// Retry-After, in whole seconds rounded up, the rate-limit headers and a
// RejectBody, and the handler does not run), renews it every third of its
// TTL on the Client's Clock while the handler runs, and releases it when the handler
// returns, with the handler's latency and its outcome: OutcomeError for a
// 5xx answer or a panic (which goes on up), OutcomeDropped when the
// client went away before the handler wrote anything (a panic of
// http.ErrAbortHandler included), else OutcomeOK.
// Exactly one release follows every lease taken. The release runs after
// the handler, on the request's context detached from its cancellation.
//
// When no node answers, FailureMode decides as for Middleware (served
// without a slot, or 503); a request the cluster refuses as invalid gets
// 400. An admitted but degraded acquire (the key's owner could not be
// reached) holds no slot and serves the request.
//
// At most 10 requests of each caller at once:
//
//	inflight, err := client.ConcurrencyMiddleware(client.ConcurrencyConfig{
//		MiddlewareConfig: client.MiddlewareConfig{Client: cl},
//		InFlight:         10,
//	})
func ConcurrencyMiddleware(cfg ConcurrencyConfig) (func(http.Handler) http.Handler, error) {
	trusted, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	cfg.setDefaults(trusted, cfg.InFlight > 0)
	c := cfg.Client
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			check := &pb.Check{}
			if cfg.InFlight > 0 {
				check.Key, check.Limit = cfg.Key(r), &pb.Limit{Algorithm: pb.Algorithm_CONCURRENCY, Limit: cfg.InFlight}
			} else {
				check.Request = cfg.policyRequest(r)
			}
			lease, err := c.AcquireCheck(r.Context(), check, cfg.TTL, "")
			if err != nil {
				cfg.MiddlewareConfig.unanswered(w, r, next, err)
				return
			}
			ratelimitheader.Write(w.Header(), &ratelimitheader.Decision{Allowed: lease.Allowed, Scope: lease.Scope,
				Limit: lease.Limit, Remaining: lease.Remaining, RetryAfter: lease.RetryAfter})
			if !lease.Allowed {
				writeReject(w, lease.Decision)
				return
			}
			if lease.ID == "" { // degraded: no slot is held, nothing to release
				next.ServeHTTP(w, r)
				return
			}
			ctx := context.WithoutCancel(r.Context())
			ttl := lease.ExpiresIn // what the cluster granted
			if ttl < time.Second {
				ttl = cmp.Or(cfg.TTL, DefaultLeaseTTL)
			}
			stop := c.keepRenewed(ctx, lease.ID, ttl, func(err error) {
				if cfg.OnError != nil {
					cfg.OnError(r, err)
				}
			})
			serveMeasured(next, w, r, c.cfg.Clock, func(o Outcome, latency time.Duration) {
				stop()
				released, err := c.Release(ctx, lease.ID, o, latency)
				if cfg.OnRelease != nil {
					cfg.OnRelease(r, o, latency, released, err)
				}
			})
		})
	}, nil
}

// keepRenewed renews the lease id for ttl every ttl/3 on the Client's
// Clock until the returned stop is called; stop returns once no renewal
// is in flight. A renewal's error goes to onErr; after ErrLeaseNotFound
// (the lease is gone) it renews no more.
func (c *Client) keepRenewed(ctx context.Context, id string, ttl time.Duration, onErr func(error)) (stop func()) {
	t := c.cfg.Clock.NewTicker(ttl / 3)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C():
			}
			_, err := c.Renew(ctx, id, ttl)
			if err != nil {
				onErr(err)
			}
			if errors.Is(err, ErrLeaseNotFound) {
				return
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

// unanswered answers a request whose check or acquire got err: 400 for
// input the cluster refused, else FailureMode's answer to an outage.
func (cfg *MiddlewareConfig) unanswered(w http.ResponseWriter, r *http.Request, next http.Handler, err error) {
	if cfg.OnError != nil {
		cfg.OnError(r, err)
	}
	if status.Code(err) == codes.InvalidArgument {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		json.NewEncoder(w).Encode(map[string]string{"code": "INVALID_ARGUMENT", "message": status.Convert(err).Message()})
		return
	}
	w.Header().Set(StatusHeader, StatusUnavailable)
	if cfg.FailureMode == bucket.FailClosed {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		json.NewEncoder(w).Encode(map[string]string{"code": "UNAVAILABLE", "message": "rate limiter unavailable"})
		return
	}
	next.ServeHTTP(w, r)
}

// writeReject answers 429 with d as a RejectBody (the headers are set).
func writeReject(w http.ResponseWriter, d Decision) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusTooManyRequests)
	json.NewEncoder(w).Encode(&RejectBody{Code: "RATE_LIMITED", Scope: d.Scope,
		RetryAfterMs: d.RetryAfter.Milliseconds(), Limit: d.Limit, Remaining: d.Remaining})
}

// serveMeasured runs next for r and then calls done with how it ended and
// how long it took on clk: OutcomeError for a 5xx answer or a panic (done
// runs, then the panic goes on), OutcomeDropped when r's client went away
// before the handler wrote anything (or it aborted with
// http.ErrAbortHandler because of that), else OutcomeOK.
func serveMeasured(next http.Handler, w http.ResponseWriter, r *http.Request, clk clock.Clock, done func(Outcome, time.Duration)) {
	ow := &outcomeWriter{ResponseWriter: w}
	start := clk.Now()
	defer func() {
		p := recover()
		o := OutcomeOK
		gone := ow.status == 0 && r.Context().Err() != nil
		switch {
		case p == http.ErrAbortHandler && gone:
			o = OutcomeDropped // aborted because the client left
		case p != nil || ow.status >= 500:
			o = OutcomeError
		case gone:
			o = OutcomeDropped
		}
		done(o, clk.Now().Sub(start))
		if p != nil {
			panic(p)
		}
	}()
	next.ServeHTTP(ow, r)
}

// outcomeWriter remembers the status a handler answered (0 until it
// writes). Used by one handler goroutine.
type outcomeWriter struct {
	http.ResponseWriter
	status int
}

func (ow *outcomeWriter) WriteHeader(code int) {
	if ow.status == 0 && code >= 200 {
		ow.status = code
	}
	ow.ResponseWriter.WriteHeader(code)
}

func (ow *outcomeWriter) Write(b []byte) (int, error) {
	if ow.status == 0 {
		ow.status = http.StatusOK
	}
	return ow.ResponseWriter.Write(b)
}

// Flush flushes what the handler wrote, when the writer underneath can.
func (ow *outcomeWriter) Flush() {
	if ow.status == 0 {
		ow.status = http.StatusOK
	}
	http.NewResponseController(ow.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController reach the writer underneath.
func (ow *outcomeWriter) Unwrap() http.ResponseWriter { return ow.ResponseWriter }

// serveReported runs next for r and reports how it ended (Client.Report
// of req), as MiddlewareConfig.Report says.
func (cfg *MiddlewareConfig) serveReported(next http.Handler, w http.ResponseWriter, r *http.Request, req *pb.PolicyRequest) {
	serveMeasured(next, w, r, cfg.Client.cfg.Clock, func(o Outcome, latency time.Duration) {
		_, err := cfg.Client.Report(context.WithoutCancel(r.Context()), req, o, latency)
		if err != nil && cfg.OnError != nil {
			cfg.OnError(r, err)
		}
	})
}
