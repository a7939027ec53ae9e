// Package clock is the one source of time for every ringlimit package that
// stamps or waits: an Instant type for points on a node's timeline, a Clock
// interface for reading it and for timers and tickers, the production
// System clock, and the rounding helpers every answer uses.
//
// Invariants:
//   - An Instant is not a duration: an Instant and an int64 cost or a
//     time.Duration do not convert into each other without a cast, so a
//     call that swaps them does not compile. Subtracting two Instants gives
//     a time.Duration; adding a Duration to an Instant gives an Instant.
//   - System's timeline is anchored at the wall clock's Unix time when it is
//     created and then advances only with the monotonic clock: a step of the
//     wall clock (NTP, VM resume, an operator) never moves it, so it never
//     grants or removes tokens.
//   - Timers and tickers come from the same Clock as Now: a component that
//     decides with a Clock also waits with it, so a test that drives a fake
//     Clock never needs to sleep as well.
//
// Usage:
//
//	c := clock.System()
//	start := c.Now()
//	t := c.NewTimer(time.Second)
//	<-t.C()
//	elapsed := c.Now().Sub(start) // about a second
//
// Tests use internal/testonly/testkit's fake Clock, which moves only when told and
// fires the timers whose time has come as it moves.
package clock
