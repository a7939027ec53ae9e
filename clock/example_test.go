package clock_test

import (
	"fmt"
	"time"

	"github.com/ringlimit/ringlimit/clock"
)

// Instants move by Durations and subtract to Durations; the rounding
// helpers turn a wait into what a client is told, never too short.
func Example() {
	start := clock.FromTime(time.Date(2026, 1, 1, 10, 4, 0, 0, time.UTC))
	later := start.Add(1500 * time.Millisecond)
	fmt.Println(later.Sub(start), start.Before(later), later.Before(start))
	fmt.Println(later.Time().Format(time.RFC3339Nano))

	wait := 1_000_001 * time.Nanosecond // just over a millisecond
	fmt.Println(clock.CeilMillis(wait), clock.Millis(wait), clock.CeilSeconds(wait))
	wait = 2 * time.Second
	fmt.Println(clock.CeilMillis(wait), clock.Millis(wait), clock.CeilSeconds(wait))
	fmt.Println(clock.CeilMillis(-time.Second), clock.Millis(0), clock.CeilSeconds(-1))
	// Output:
	// 1.5s true false
	// 2026-01-01T10:04:01.5Z
	// 2ms 2 1
	// 2s 2000 2
	// 0s 0 0
}
