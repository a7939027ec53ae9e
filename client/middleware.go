package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/internal/clientip"
	pb "github.com/ringlimit/ringlimit/proto/ringlimitv1"
	"github.com/ringlimit/ringlimit/ratelimitheader"
)

// MiddlewareConfig configures Middleware. Only Client is required. The
// functions it holds are called from the server's goroutines, concurrently,
// and must be safe for that.
//
// Who the caller is decides which buckets a request spends from, so nothing
// the client can choose freely is believed by default: without Identity the
// caller is its address, and without TrustedProxies that address is the
// connection's remote address.
type MiddlewareConfig struct {
	Client *Client
	// Limit, when set, is the one limit every request is checked against,
	// inline: the cluster needs no policy file for it, and Policy, Route
	// and Tier (which name policy) must be left unset. Each key (see Key)
	// has its own bucket. Default: the zero Limit, the cluster's policy
	// decides.
	Limit Limit
	// Key returns the key a request spends from under Limit. Default: the
	// caller: "user:" and the user, else "key:" and the API key, as
	// Identity says, else "ip:" and the client IP (see IP and
	// TrustedProxies). Only used with Limit.
	Key func(r *http.Request) string
	// Policy names the policy; "" means the cluster's default.
	Policy string
	// Identity returns the caller's API key or user as the application has
	// authenticated them (from a verified token or session, typically put
	// in the request's context by an authentication middleware that runs
	// first); both empty means the caller is known only by IP.
	// Default: nil, every caller is known by IP. HeaderIdentity reads
	// headers, and is only for requests that an authenticating proxy has
	// vetted: a header the client sets itself is an identity it can
	// rotate, and each new one gets fresh buckets.
	Identity func(r *http.Request) (apiKey, user string)
	// TrustedProxies lists the proxies (CIDR prefixes such as
	// "10.0.0.0/8", or single addresses) whose X-Forwarded-For is
	// believed. Only when the connection's remote address is inside one of
	// them is the header read, and then the client IP is the right-most
	// address in it that is not itself a trusted proxy (if every address
	// is, the left-most; an entry that is not an address stops the walk at
	// the last trusted hop). Otherwise the client IP is the remote address.
	// Parsed by Middleware, which returns an error naming a bad entry.
	// Default: none, X-Forwarded-For is never read. Must be empty when IP
	// is set.
	TrustedProxies []string
	// IP returns the client IP, replacing the remote address and
	// TrustedProxies. Default: nil, as TrustedProxies says.
	IP func(r *http.Request) string
	// Route returns the route matched against the policy. Default: r.URL.Path.
	Route func(r *http.Request) string
	// Tier returns the caller's tier; "" means the policy's default.
	// Default: none.
	Tier func(r *http.Request) string
	// Cost returns what the request spends on a route without a cost of its own (a route's cost wins); 0 means 1.
	// Default: 0.
	Cost func(r *http.Request) int64
	// FailureMode is what to answer when no node answers (every target
	// unreachable, or the Client's Timeout): ringlimit's one failure-mode
	// type, as a limit in the cluster names it, applied by the middleware.
	// Either way the answer carries "X-RateLimit-Status: unavailable"
	// (StatusHeader) instead of the rate-limit headers, the call counts in
	// the Client's Errors, and the Client's Logger hears of the outage once
	// when it begins and once when it ends (see Config.Logger).
	//   - bucket.FailOpen serves the request: the limiter must not become
	//     the outage.
	//   - bucket.FailClosed answers 503 with {"code":"UNAVAILABLE"}.
	//   - bucket.Local, the zero value and the default, serves the request
	//     as FailOpen does. In the cluster, Local decides on a bucket the
	//     entry node keeps with the limit divided among the members; the
	//     middleware keeps no buckets and does not know the limits (they
	//     live in the cluster's policy), so the local stage it can fall back
	//     to is no limit at all. When the cluster is reachable but a key's
	//     owner is not, the limit's own failure mode still applies there.
	// Any other value is an error.
	FailureMode bucket.FailureMode
	// OnError, if set, is told every error talking to the cluster, for
	// each request. It adds to what happens anyway: the Client counts and
	// logs outages (Client.Errors, Config.Logger) and FailureMode decides
	// the answer. Default: nil.
	OnError func(r *http.Request, err error)
	// Report, when true, tells the cluster how every request the handler
	// served ended and how long it took (Client.Report of its policy
	// request, after the handler, on the request's context detached from
	// its cancellation), for the policy's adaptive layers to learn from:
	// OutcomeError for a 5xx answer or a panic, OutcomeDropped when the
	// client went away before the handler wrote, else OutcomeOK. Its
	// errors go to OnError. Policy requests only: an inline Limit has no
	// adaptive layer. Default false.
	Report bool
}

// Validate reports the first thing wrong with cfg: no Client, an unknown
// FailureMode, a TrustedProxies entry that is not a prefix or an address,
// TrustedProxies together with IP, a Limit that is not valid, Limit
// together with Policy, Route, Tier or Report, or Key without Limit.
func (cfg *MiddlewareConfig) Validate() error {
	_, err := cfg.trustedProxies()
	return err
}

// trustedProxies validates cfg and returns TrustedProxies parsed.
func (cfg *MiddlewareConfig) trustedProxies() (clientip.Trusted, error) {
	if cfg.Client == nil {
		return nil, errors.New("client: MiddlewareConfig.Client is required")
	}
	if !cfg.FailureMode.Valid() {
		return nil, fmt.Errorf("client: MiddlewareConfig.FailureMode: %v is not a failure mode", cfg.FailureMode)
	}
	if cfg.IP != nil && len(cfg.TrustedProxies) > 0 {
		return nil, errors.New("client: MiddlewareConfig: TrustedProxies has no effect when IP is set")
	}
	if cfg.Limit.IsZero() {
		if cfg.Key != nil {
			return nil, errors.New("client: MiddlewareConfig: Key has no effect without Limit")
		}
	} else {
		if err := cfg.Limit.Validate(); err != nil {
			return nil, err
		}
		if cfg.Report {
			return nil, errors.New("client: MiddlewareConfig: Report needs a policy; an inline Limit has no adaptive layer")
		}
		if cfg.Policy != "" || cfg.Route != nil || cfg.Tier != nil {
			return nil, errors.New("client: MiddlewareConfig: Policy, Route and Tier name policy; they have no effect with an inline Limit")
		}
	}
	var prefixes clientip.Trusted
	for i, s := range cfg.TrustedProxies {
		p, err := clientip.ParseProxy(s)
		if err != nil {
			return nil, fmt.Errorf("client: MiddlewareConfig.TrustedProxies[%d]: %w", i, err)
		}
		prefixes = append(prefixes, p)
	}
	return prefixes, nil
}

// clientIP is the client IP of r given the trusted proxies: the remote
// address, unless it is a trusted proxy, in which case X-Forwarded-For is
// walked from the right past the trusted proxies (see clientip.Resolve).
func clientIP(r *http.Request, trusted clientip.Trusted) string {
	return clientip.Resolve(r.RemoteAddr, clientip.Hops(r.Header, "X-Forwarded-For"), trusted)
}

// StatusHeader is the response header the middleware sets, to
// StatusUnavailable, on a request it could not check because no node
// answered (it then applies MiddlewareConfig.FailureMode): the answer
// carries no rate-limit headers, and this one says why.
const (
	StatusHeader      = "X-RateLimit-Status"
	StatusUnavailable = "unavailable"
)

// RejectBody is the JSON body of a 429 answer.
type RejectBody struct {
	Code         string `json:"code"`
	Scope        string `json:"scope"`
	RetryAfterMs int64  `json:"retry_after_ms"`
	Limit        int64  `json:"limit"`
	Remaining    int64  `json:"remaining"`
}

// Middleware returns a func(http.Handler) http.Handler that checks every
// request against the cluster with one call, sets the rate-limit headers
// (X-RateLimit-Limit, X-RateLimit-Remaining, RateLimit-Policy and RateLimit,
// written by ratelimitheader as the node's HTTP API writes them) on every
// response it lets through or rejects, and answers 429 with a RejectBody
// (and Retry-After) on rejection. RateLimit-Policy names the layer that
// decided and its quota, and with an inline Limit its window (w=); a
// policy layer's window is not in the gRPC decision, so w= is left out
// there. A request the cluster refuses as invalid (an identity, key or
// route it does not accept) gets 400; FailureMode applies only when no
// node answers.
//
// With cfg.Limit, "5 per 10 s per client IP" is:
//
//	limit, err := client.Middleware(client.MiddlewareConfig{
//		Client: cl,
//		Limit:  client.Per(5, 10*time.Second),
//	})
//
// The caller is who cfg.Identity says, else its IP (see MiddlewareConfig).
// Middleware returns cfg.Validate's error for a config that fails it.
func Middleware(cfg MiddlewareConfig) (func(http.Handler) http.Handler, error) {
	trusted, err := cfg.trustedProxies()
	if err != nil {
		return nil, err
	}
	var inline *pb.Limit
	var window time.Duration // known for an inline limit only
	if !cfg.Limit.IsZero() {
		inline, window = cfg.Limit.proto(), cfg.Limit.per
	}
	cfg.setDefaults(trusted, inline != nil)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var check *pb.Check
			if inline != nil {
				check = &pb.Check{Key: cfg.Key(r), Limit: inline}
			} else {
				check = &pb.Check{Request: cfg.policyRequest(r)}
			}
			if cfg.Cost != nil {
				if c := cfg.Cost(r); c > 0 {
					check.Cost = &c
				}
			}
			ds, err := cfg.Client.Check(r.Context(), check)
			if err == nil && len(ds) != 1 {
				err = fmt.Errorf("client: %d decisions for one check", len(ds))
			}
			if err != nil {
				// Bad input is not an outage: the failure mode does not
				// turn it into an unlimited pass.
				cfg.unanswered(w, r, next, err)
				return
			}
			d := ds[0]
			h := w.Header()
			ratelimitheader.Write(h, &ratelimitheader.Decision{Allowed: d.GetAllowed(), Scope: d.GetScope(),
				Limit: d.GetLimit(), Remaining: d.GetRemaining(), Window: window,
				Reset: fromMillis(d.GetResetAfterMs()), RetryAfter: fromMillis(d.GetRetryAfterMs())})
			if !d.GetAllowed() {
				h.Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusTooManyRequests)
				json.NewEncoder(w).Encode(&RejectBody{Code: "RATE_LIMITED", Scope: d.GetScope(),
					RetryAfterMs: d.GetRetryAfterMs(), Limit: d.GetLimit(), Remaining: d.GetRemaining()})
				return
			}
			if cfg.Report {
				cfg.serveReported(next, w, r, check.GetRequest())
				return
			}
			next.ServeHTTP(w, r)
		})
	}, nil
}

// setDefaults fills in the functions cfg leaves nil: no identity, the IP
// as trusted says, the URL's path as the route and, for an inline limit,
// the caller as the key.
func (cfg *MiddlewareConfig) setDefaults(trusted clientip.Trusted, inline bool) {
	if cfg.Identity == nil {
		cfg.Identity = func(*http.Request) (string, string) { return "", "" }
	}
	if cfg.IP == nil {
		cfg.IP = func(r *http.Request) string { return clientIP(r, trusted) }
	}
	if cfg.Route == nil {
		cfg.Route = func(r *http.Request) string { return r.URL.Path }
	}
	if inline && cfg.Key == nil {
		cfg.Key = func(r *http.Request) string {
			switch apiKey, user := cfg.Identity(r); {
			case user != "":
				return "user:" + user
			case apiKey != "":
				return "key:" + apiKey
			}
			return "ip:" + cfg.IP(r)
		}
	}
}

// policyRequest is the policy request r makes under cfg (defaults set).
func (cfg *MiddlewareConfig) policyRequest(r *http.Request) *pb.PolicyRequest {
	apiKey, user := cfg.Identity(r)
	req := &pb.PolicyRequest{Policy: cfg.Policy, ApiKey: apiKey, User: user, Ip: cfg.IP(r), Route: cfg.Route(r)}
	if cfg.Tier != nil {
		req.Tier = cfg.Tier(r)
	}
	return req
}

// fromMillis turns a decision's milliseconds into a Duration: negative is
// 0, and beyond what a Duration holds is the largest one.
func fromMillis(ms int64) time.Duration {
	switch {
	case ms <= 0:
		return 0
	case ms > math.MaxInt64/int64(time.Millisecond):
		return math.MaxInt64
	}
	return time.Duration(ms) * time.Millisecond
}

// HeaderIdentity returns an Identity function that reads the API key from
// the named header and the user from another ("" to skip either).
//
// Use it only behind an authenticating proxy that verifies the caller and
// sets (or strips) these headers itself on every request that reaches the
// service. Facing clients directly, it lets a client name any identity it
// likes: rotating the header gets it fresh buckets on every request, and
// naming someone else's key spends theirs.
func HeaderIdentity(apiKeyHeader, userHeader string) func(*http.Request) (string, string) {
	return func(r *http.Request) (string, string) {
		var k, u string
		if apiKeyHeader != "" {
			k = strings.TrimSpace(r.Header.Get(apiKeyHeader))
		}
		if userHeader != "" {
			u = strings.TrimSpace(r.Header.Get(userHeader))
		}
		return k, u
	}
}
