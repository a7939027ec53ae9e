package clock

import (
	"time"
)

// Instant is a point on a node's timeline, in nanoseconds since the Unix
// epoch as read by the Clock that made it. Instants from different Clocks
// are comparable only as far as the Clocks agree.
type Instant int64

// Add returns t moved by d.
func (t Instant) Add(d time.Duration) Instant { return t + Instant(d) }

// Sub returns the duration t−u.
func (t Instant) Sub(u Instant) time.Duration { return time.Duration(t - u) }

// Before reports whether t is before u.
func (t Instant) Before(u Instant) bool { return t < u }

// UnixNano returns t as nanoseconds since the Unix epoch.
func (t Instant) UnixNano() int64 { return int64(t) }

// Time returns t as a time.Time in UTC, for display and serialisation.
func (t Instant) Time() time.Time { return time.Unix(0, int64(t)).UTC() }

// FromTime returns the Instant of a wall-clock time.
func FromTime(w time.Time) Instant { return Instant(w.UnixNano()) }

// Clock reads the time and makes timers on one timeline. Implementations
// are safe for concurrent use.
type Clock interface {
	// Now returns the current Instant. It never goes backwards.
	Now() Instant
	// NewTimer returns a Timer that fires once, d from now.
	NewTimer(d time.Duration) Timer
	// NewTicker returns a Ticker that fires every d (d > 0).
	NewTicker(d time.Duration) Ticker
	// AfterFunc calls f in its own goroutine d from now, unless the
	// returned Timer is stopped first. Its C is nil.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a one-shot timer, as time.Timer.
type Timer interface {
	// C delivers the time once the timer fires (nil for AfterFunc timers).
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether it did.
	Stop() bool
	// Reset makes the timer fire d from now; it reports whether the timer
	// was active.
	Reset(d time.Duration) bool
}

// Ticker delivers ticks at intervals, as time.Ticker.
type Ticker interface {
	C() <-chan time.Time
	Stop()
	Reset(d time.Duration)
}

// System returns the production Clock: anchored at the wall clock's Unix
// time now, advancing with the monotonic clock, with the runtime's timers.
func System() Clock {
	now := time.Now()
	return &system{start: now, startUnix: now.UnixNano()}
}

type system struct {
	start     time.Time // carries a monotonic reading
	startUnix int64
}

func (c *system) Now() Instant { return Instant(c.startUnix + int64(time.Since(c.start))) }

func (c *system) NewTimer(d time.Duration) Timer { return sysTimer{time.NewTimer(d)} }

func (c *system) NewTicker(d time.Duration) Ticker { return sysTicker{time.NewTicker(d)} }

func (c *system) AfterFunc(d time.Duration, f func()) Timer { return sysTimer{time.AfterFunc(d, f)} }

type sysTimer struct{ t *time.Timer }

func (t sysTimer) C() <-chan time.Time        { return t.t.C }
func (t sysTimer) Stop() bool                 { return t.t.Stop() }
func (t sysTimer) Reset(d time.Duration) bool { return t.t.Reset(d) }

type sysTicker struct{ t *time.Ticker }

func (t sysTicker) C() <-chan time.Time   { return t.t.C }
func (t sysTicker) Stop()                 { t.t.Stop() }
func (t sysTicker) Reset(d time.Duration) { t.t.Reset(d) }

// Sleep waits d on c, or until done is closed; it reports whether the full
// d passed.
func Sleep(c Clock, d time.Duration, done <-chan struct{}) bool {
	t := c.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-done:
		return false
	}
}
