// Package ratelimitheader writes the rate-limit headers of an HTTP answer:
// X-RateLimit-Limit and X-RateLimit-Remaining, the IETF draft
// (httpapi-ratelimit-headers) fields RateLimit-Policy and RateLimit, and
// Retry-After on a rejection. Every HTTP surface of ringlimit (the node's
// API and the Go client's middleware) writes them through Write, so that
// they say the same thing in the same format.
//
// Invariants:
//   - Durations go out in whole seconds rounded up (clock.CeilSeconds): a
//     caller told to come back in t seconds never comes back early.
//   - Retry-After is written on a rejection only.
//   - RateLimit names the layer that decided; RateLimit-Policy lists every
//     enforced layer given, else the deciding one alone.
//   - A policy whose window is not known (0) is listed without w=, which the
//     draft allows; nothing else is ever left out.
//
// Usage:
//
//	ratelimitheader.Write(w.Header(), &ratelimitheader.Decision{
//		Allowed: false, Scope: "tier:free", Limit: 10, Window: time.Minute,
//		Remaining: 0, Reset: 6 * time.Second, RetryAfter: 1500 * time.Millisecond,
//	})
//	// X-RateLimit-Limit: 10
//	// X-RateLimit-Remaining: 0
//	// RateLimit-Policy: "tier:free";q=10;w=60
//	// RateLimit: "tier:free";r=0;t=6
//	// Retry-After: 2
//
// The package imports only the standard library and clock.
package ratelimitheader
