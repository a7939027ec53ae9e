package ratelimitheader

import (
	"net/http"
	"strconv"
	"time"

	"github.com/ringlimit/ringlimit/clock"
)

// Decision is what the headers of one answer say: the decision of the
// layer that decided (on a rejection the one that rejected, else the
// tightest).
type Decision struct {
	// Allowed is false on a rejection, which alone gets Retry-After.
	Allowed bool
	// Scope names the deciding layer ("inline", "tier:free"): the name of
	// the RateLimit item, and of the RateLimit-Policy item when no
	// policies are given.
	Scope string
	// Limit is the deciding layer's quota: X-RateLimit-Limit, and q= when
	// no policies are given.
	Limit int64
	// Window is the deciding layer's period: w= when no policies are
	// given. 0 means unknown, and w= is left out.
	Window time.Duration
	// Remaining is what is left: X-RateLimit-Remaining and r=.
	Remaining int64
	// Reset is how long until the layer is full again: t=.
	Reset time.Duration
	// RetryAfter is how long a rejected caller waits: Retry-After.
	RetryAfter time.Duration
}

// Policy is one enforced layer as RateLimit-Policy lists it: Quota per
// Window under Name.
type Policy struct {
	Name  string
	Quota int64
	// Window is the layer's period, written as w= in whole seconds rounded
	// up. 0 means unknown, and w= is left out.
	Window time.Duration
}

// Header names, in canonical form.
const (
	LimitHeader      = "X-Ratelimit-Limit"
	RemainingHeader  = "X-Ratelimit-Remaining"
	PolicyHeader     = "Ratelimit-Policy"
	RateLimitHeader  = "Ratelimit"
	RetryAfterHeader = "Retry-After"
)

// Write sets the rate-limit headers of d on h: X-RateLimit-Limit,
// X-RateLimit-Remaining, RateLimit-Policy, RateLimit and, when d is a
// rejection, Retry-After. RateLimit-Policy lists policies in order, or the
// deciding layer alone (Scope, Limit, Window) when there are none. It
// replaces any value those headers had.
func Write(h http.Header, d *Decision, policies ...Policy) {
	// Every value is appended to one buffer and the headers take
	// substrings of one string made of it, with their values in one
	// backing array: two allocations, not six.
	var buf [256]byte
	var ends [5]int
	b := strconv.AppendInt(buf[:0], d.Limit, 10)
	ends[0] = len(b)
	b = strconv.AppendInt(b, d.Remaining, 10)
	ends[1] = len(b)
	if len(policies) == 0 {
		b = appendPolicy(b, d.Scope, d.Limit, d.Window)
	}
	for i := range policies {
		if i > 0 {
			b = append(b, ", "...)
		}
		p := &policies[i]
		b = appendPolicy(b, p.Name, p.Quota, p.Window)
	}
	ends[2] = len(b)
	b = strconv.AppendQuote(b, d.Scope)
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, d.Remaining, 10)
	b = append(b, ";t="...)
	b = strconv.AppendInt(b, clock.CeilSeconds(d.Reset), 10)
	ends[3] = len(b)
	n := 4
	if !d.Allowed {
		b = strconv.AppendInt(b, clock.CeilSeconds(d.RetryAfter), 10)
		ends[4] = len(b)
		n = 5
	}
	all := string(b)
	vals := make([]string, n)
	keys := [5]string{LimitHeader, RemainingHeader, PolicyHeader, RateLimitHeader, RetryAfterHeader}
	from := 0
	for i := range n {
		vals[i] = all[from:ends[i]]
		h[keys[i]] = vals[i : i+1 : i+1]
		from = ends[i]
	}
}

// appendPolicy appends one RateLimit-Policy item: "name";q=quota;w=window.
func appendPolicy(b []byte, name string, quota int64, window time.Duration) []byte {
	b = strconv.AppendQuote(b, name)
	b = append(b, ";q="...)
	b = strconv.AppendInt(b, quota, 10)
	if window > 0 {
		b = append(b, ";w="...)
		b = strconv.AppendInt(b, clock.CeilSeconds(window), 10)
	}
	return b
}
