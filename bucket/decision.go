package bucket

import "time"

// Decision is the answer to one check. It is never a bare boolean: a
// rejected caller needs to know when to come back, and an admitted one how
// much is left.
type Decision struct {
	// Allowed reports whether the check was admitted (and its cost spent).
	Allowed bool
	// Limit is the limit's count per period, for the X-RateLimit-Limit header.
	Limit int64
	// Remaining is how many whole units of cost could still be spent now,
	// after this check.
	Remaining int64
	// RetryAfter is, on rejection, the exact time until the same check would
	// be admitted, rounded up to the millisecond. Zero when allowed.
	RetryAfter time.Duration
	// ResetAfter is the time until the key is back to its full, untouched
	// state (bucket full, windows empty), rounded up to the millisecond.
	ResetAfter time.Duration
	// Delay is, for an admitted LeakyBucket check, how long the caller must
	// wait for its turn in the queue, rounded up to the millisecond.
	Delay time.Duration
}
