// Package client is the Go client of ringlimit's public gRPC API and a
// net/http middleware built on it.
//
// A Client keeps one connection per node and sends each check to the next
// node in turn. Checks made concurrently from many goroutines are coalesced
// (internal/batcher, the batcher the nodes use between themselves): all the
// checks waiting when one of a connection's call slots frees up travel in
// one RateLimiter/Check call (up to MaxBatch), so a busy service pays for a
// few RPCs, not one per request. A check whose caller gives up (its context
// ends) while it waits for a call is never sent, so the cluster spends no
// tokens on an answer nobody hears. A node that does not answer is tried
// last for a second (on Config.Clock).
//
// Limits need no policy file: a Limit is one expression (PerSecond(5),
// PerMinute(100).WithBurst(20), Per(5, 10*time.Second)) that travels with
// each check. A Limiter applies one to any key with golang.org/x/time/rate's
// vocabulary: Allow, AllowN, Wait, WaitN, Reserve, ReserveN.
//
// When no node answers, a call returns ErrNoNode; the Client counts it
// (Errors, to export as ringlimit_client_errors_total) and logs the outage
// twice, when it begins and when it ends (Config.Logger; nil discards).
//
// Middleware limits an http.Handler with an inline Limit (per client IP by
// default, or per MiddlewareConfig.Key) or with the cluster's configured
// policy: it derives the caller, route and cost from each request, makes
// one check, sets the rate-limit headers (package ratelimitheader, as the
// node's HTTP API writes them) on every response, answers 429 with a JSON
// body when the cluster rejects, and applies its bucket.FailureMode when no node answers:
// by default it serves the request (fail open), marked with
// "X-RateLimit-Status: unavailable".
//
// In-flight limits hold a slot instead of spending tokens: Client.Acquire
// (or AcquirePolicy) answers a Lease, which Renew extends and Release
// gives back with an Outcome and a latency; any node routes a lease id.
// ConcurrencyMiddleware holds one slot per request while its handler runs,
// renews it every third of its TTL and releases it after, with the
// handler's outcome; MiddlewareConfig.Report makes Middleware report every
// request's outcome and latency for the policy's adaptive layers.
//
// The middleware believes no header by default. The caller is who
// MiddlewareConfig.Identity says (the application's authenticated user or
// key), else its IP: the connection's remote address, or, only when that is
// one of MiddlewareConfig.TrustedProxies, the right-most X-Forwarded-For
// address that is not itself a trusted proxy. A client therefore cannot
// get fresh buckets by changing X-API-Key or X-Forwarded-For.
package client
