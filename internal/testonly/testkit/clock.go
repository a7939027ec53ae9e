package testkit

import (
	"sync"
	"time"

	"github.com/ringlimit/ringlimit/clock"
)

// Clock is a clock.Clock that moves only when the test says: Advance moves
// it and fires, in order, every timer and ticker whose time has come. It
// starts on a whole second, so fixed windows line up with it. Safe for
// concurrent use.
//
// Its timers behave as the runtime's do since Go 1.23: a timer made or
// reset with d ≤ 0 fires at once; after Stop or Reset returns, no value
// from before the call is received from C, and a value sent but not yet
// received counts as the timer still being active. A tick nobody takes is
// dropped.
type Clock struct {
	mu      sync.Mutex
	now     clock.Instant
	waiters []*fakeTimer
	changed chan struct{} // closed (and replaced) when a timer is added
}

var _ clock.Clock = (*Clock)(nil)

// NewClock returns a fake Clock at start (0 means a whole second in 2026).
func NewClock(start clock.Instant) *Clock {
	if start == 0 {
		start = clock.FromTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	}
	return &Clock{now: start, changed: make(chan struct{})}
}

// Now implements clock.Clock.
func (c *Clock) Now() clock.Instant {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock by d and fires every timer due by then, earliest
// first, each at its own instant.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	end := c.now.Add(d)
	c.mu.Unlock()
	for {
		c.mu.Lock()
		var next *fakeTimer
		for _, t := range c.waiters {
			if t.at <= end && (next == nil || t.at < next.at) {
				next = t
			}
		}
		if next == nil {
			c.now = max(c.now, end)
			c.mu.Unlock()
			return
		}
		c.now = max(c.now, next.at)
		c.removeLocked(next)
		if next.period > 0 {
			next.at = next.at.Add(next.period)
			c.addLocked(next)
		}
		// Fired under the lock, so that a Stop or Reset that returns
		// after this removal also drains what it sent.
		next.fireLocked(c.now)
		c.mu.Unlock()
	}
}

// Timers returns how many timers and tickers are waiting: a test can wait
// for a goroutine to start waiting before it advances the clock.
func (c *Clock) Timers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters)
}

// TimerAdded returns a channel closed the next time a timer or ticker
// starts waiting.
func (c *Clock) TimerAdded() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.changed
}

// NewTimer implements clock.Clock.
func (c *Clock) NewTimer(d time.Duration) clock.Timer {
	t := &fakeTimer{c: c, ch: make(chan time.Time, 1)}
	t.Reset(d)
	return t
}

// NewTicker implements clock.Clock.
func (c *Clock) NewTicker(d time.Duration) clock.Ticker {
	if d <= 0 {
		panic("testkit: non-positive ticker interval")
	}
	t := &fakeTimer{c: c, ch: make(chan time.Time, 1), period: d}
	t.Reset(d)
	return fakeTicker{t}
}

// AfterFunc implements clock.Clock.
func (c *Clock) AfterFunc(d time.Duration, f func()) clock.Timer {
	t := &fakeTimer{c: c, f: f}
	t.Reset(d)
	return t
}

func (c *Clock) addLocked(t *fakeTimer) {
	c.waiters = append(c.waiters, t)
	close(c.changed)
	c.changed = make(chan struct{})
}

func (c *Clock) removeLocked(t *fakeTimer) bool {
	for i, w := range c.waiters {
		if w == t {
			c.waiters = append(c.waiters[:i], c.waiters[i+1:]...)
			return true
		}
	}
	return false
}

type fakeTimer struct {
	c      *Clock
	ch     chan time.Time // nil for AfterFunc; sent to and drained under c.mu
	f      func()
	at     clock.Instant // guarded by c.mu
	period time.Duration // guarded by c.mu; 0 for a one-shot timer
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	return t.stopLocked()
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	active := t.stopLocked()
	t.at = t.c.now.Add(max(d, 0))
	if d <= 0 { // only a one-shot timer: tickers refuse d ≤ 0
		t.fireLocked(t.c.now) // its time has come already
		return active
	}
	t.c.addLocked(t)
	return active
}

// stopLocked takes t off the clock and drains a value it sent that nobody
// received; it reports whether either was there.
func (t *fakeTimer) stopLocked() bool {
	active := t.c.removeLocked(t)
	select {
	case <-t.ch: // never ready for a nil channel
		active = true
	default:
	}
	return active
}

func (t *fakeTimer) fireLocked(at clock.Instant) {
	if t.f != nil {
		go t.f()
		return
	}
	select { // like time.Ticker: a tick nobody took is dropped
	case t.ch <- at.Time():
	default:
	}
}

type fakeTicker struct{ t *fakeTimer }

func (k fakeTicker) C() <-chan time.Time { return k.t.ch }
func (k fakeTicker) Stop()               { k.t.Stop() }
func (k fakeTicker) Reset(d time.Duration) {
	if d <= 0 {
		panic("testkit: non-positive ticker interval")
	}
	k.t.c.mu.Lock()
	k.t.period = d
	k.t.c.mu.Unlock()
	k.t.Reset(d)
}
