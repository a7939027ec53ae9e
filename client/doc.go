// Package client is the Go client of ringlimit's public gRPC API and a
// net/http middleware built on it.
//
// A Client keeps one connection per node and sends each check to the next
// node in turn. Checks made concurrently from many goroutines are coalesced:
// all the checks waiting when one of a connection's call slots frees up
// travel in one RateLimiter/Check call (up to MaxBatch), so a busy service
// pays for a few RPCs, not one per request. A node that does not answer is
// skipped for the next check.
//
// Middleware limits an http.Handler with configured policy: it derives the
// caller, route and cost from each request, makes one check, sets the
// rate-limit headers on every response, answers 429 with a JSON body when
// the cluster rejects, and applies its failure mode when no node answers.
package client
