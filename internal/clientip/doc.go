// Package clientip derives the client IP of an HTTP request from the
// connection's remote address and, only when that address is a trusted
// proxy, from the forwarding headers the proxies added.
//
// Invariants: a header is read only when the connection comes from a
// trusted proxy; the result is the right-most hop that is not itself a
// trusted proxy, so an address the client wrote into the header is used
// only when every proxy after it is trusted; addresses are unmapped
// (::ffff:192.0.2.1 is 192.0.2.1) and carry no zone.
//
// It imports only the standard library: the node's API (/v1/authz) and the
// client's middleware share it.
//
// Usage:
//
//	trusted, err := clientip.ParseList([]string{"10.0.0.0/8", "::1"})
//	...
//	ip := clientip.Resolve(r.RemoteAddr, clientip.Hops(r.Header, "X-Forwarded-For"), trusted)
package clientip
