// Package deadline gives each request a server-side deadline without a
// timer of its own. A timer per request (context.WithTimeout) costs a few
// allocations, a place in the caller's context's children and a timer
// started and stopped, on every check a node answers. Here the requests
// that start within one tick (a 64th of the timeout, at least a
// millisecond) share one context, which ends when the last of them is
// due: a request's deadline falls between the timeout and the timeout
// plus a tick after it started.
//
// The context a request gets carries the caller's values. Its Done and
// Err are the shared deadline's alone: a caller that gives up does not end
// it, since that would take a registration per request again. Code that
// must not act for a caller who gave up (a batch about to be sent) asks
// Err, which also reports the caller's error.
package deadline

import (
	"context"
	"sync/atomic"
	"time"
)

// Shared hands out deadlines Timeout after now, a tick at a time. It is
// safe for concurrent use.
type Shared struct {
	timeout, tick time.Duration
	origin        time.Time // ticks count from here (monotonic)
	cur           atomic.Pointer[slot]
}

// slot is the deadline shared by the requests of one tick.
type slot struct {
	n      int64     // its tick, counted from origin
	at     time.Time // when ctx ends
	ctx    context.Context
	cancel context.CancelFunc // never called: ctx ends at at by its own timer
}

// New returns deadlines timeout after each request's start; timeout must
// be positive.
func New(timeout time.Duration) *Shared {
	return &Shared{timeout: timeout, tick: max(timeout/64, time.Millisecond), origin: time.Now()}
}

// Bound returns ctx when its deadline comes within the timeout, and
// otherwise a context with ctx's values that ends at the shared deadline
// of this tick.
func (s *Shared) Bound(ctx context.Context) context.Context {
	now := time.Now()
	if d, ok := ctx.Deadline(); ok && d.Sub(now) <= s.timeout {
		return ctx
	}
	n := int64((now.Sub(s.origin)+s.timeout)/s.tick) + 1
	sl := s.cur.Load()
	if sl == nil || sl.n != n {
		at := s.origin.Add(time.Duration(n) * s.tick)
		c, cancel := context.WithDeadline(context.Background(), at)
		sl = &slot{n: n, at: at, ctx: c, cancel: cancel}
		// Two requests at a tick's turn may both make one: the one not
		// kept serves its own request, and ends on time all the same.
		s.cur.Store(sl)
	}
	return &bound{Context: ctx, s: sl}
}

// bound is a request's context: the caller's values, the shared deadline.
type bound struct {
	context.Context // the caller's
	s               *slot
}

// callerKey looks up the caller's context behind a bound context.
type callerKey struct{}

// Deadline is the sooner of the caller's (which may fall within the tick)
// and the shared one.
func (b *bound) Deadline() (time.Time, bool) {
	if d, ok := b.Context.Deadline(); ok && d.Before(b.s.at) {
		return d, true
	}
	return b.s.at, true
}

func (b *bound) Done() <-chan struct{} { return b.s.ctx.Done() }
func (b *bound) Err() error            { return b.s.ctx.Err() }

// Value answers the context package's own lookups from the shared
// deadline's context (so that a context derived from b is ended with it,
// without a goroutine of its own, and context.Cause(b) is its cause), and
// every other key from the caller's.
func (b *bound) Value(key any) any {
	if key == (callerKey{}) {
		return b.Context
	}
	if v := b.s.ctx.Value(key); v != nil {
		return v
	}
	return b.Context.Value(key)
}

// Err returns ctx.Err(), or, when ctx is (or is derived from) a context
// Bound made and the caller behind it gave up first, the caller's error.
func Err(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if c, ok := ctx.Value(callerKey{}).(context.Context); ok {
		return c.Err()
	}
	return nil
}
