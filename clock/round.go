package clock

import (
	"math"
	"time"
)

// CeilMillis rounds a non-negative d up to a whole millisecond: a caller
// told to wait this long never comes back too early. Zero and negative
// durations give 0; a d whose next whole millisecond does not fit in a
// Duration (above 292 years) gives the largest Duration instead.
func CeilMillis(d time.Duration) time.Duration {
	n := ceilUnits(d, time.Millisecond)
	if n > math.MaxInt64/int64(time.Millisecond) {
		return math.MaxInt64
	}
	return time.Duration(n) * time.Millisecond
}

// CeilSeconds returns a non-negative d in whole seconds, rounded up, as
// the Retry-After header and the RateLimit header's t= carry it. Zero and
// negative durations give 0.
func CeilSeconds(d time.Duration) int64 { return ceilUnits(d, time.Second) }

// Millis returns d in whole milliseconds rounded up, for the wire and the
// JSON answers (their retry_after_ms and reset_after_ms fields). Zero and
// negative durations give 0.
func Millis(d time.Duration) int64 { return ceilUnits(d, time.Millisecond) }

// ceilUnits returns ⌈d/unit⌉ for d > 0, else 0. It cannot overflow: the
// quotient is at most MaxInt64/unit + 1.
func ceilUnits(d, unit time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	n := int64(d / unit)
	if d%unit != 0 {
		n++
	}
	return n
}
