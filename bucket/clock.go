package bucket

import "time"

// Clock gives the current time as int64 nanoseconds on a monotonic timeline.
// Implementations must be safe for concurrent use.
type Clock interface {
	Now() int64
}

// Monotonic is the production Clock. Its timeline is anchored at the wall
// clock's Unix time when it was created (so fixed windows line up with
// calendar seconds and minutes) and then advances only with the monotonic
// clock: a wall-clock jump (NTP step, VM resume, manual change) neither
// grants nor removes tokens. It is safe for concurrent use.
type Monotonic struct {
	start     time.Time // carries a monotonic reading
	startUnix int64
}

// NewMonotonic returns a Clock anchored at the current wall time.
func NewMonotonic() *Monotonic {
	now := time.Now()
	return &Monotonic{start: now, startUnix: now.UnixNano()}
}

// Now implements Clock.
func (c *Monotonic) Now() int64 {
	return c.startUnix + int64(time.Since(c.start))
}
