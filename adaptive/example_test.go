package adaptive_test

import (
	"fmt"
	"time"

	"github.com/ringlimit/ringlimit/adaptive"
	"github.com/ringlimit/ringlimit/clock"
)

// An AIMD limit grows by one a window while requests succeed near the
// limit, and backs off when a window's errors pass the threshold.
func Example() {
	spec := adaptive.Spec{Algorithm: adaptive.AIMD, Min: 1, Max: 100, Initial: 10, MinSamples: 5}
	var now clock.Instant
	c := adaptive.New(spec, now)
	for w, outcome := range []adaptive.Outcome{adaptive.OK, adaptive.OK, adaptive.Error, adaptive.OK} {
		for range 5 {
			c.Observe(adaptive.Sample{Outcome: outcome, Latency: 20 * time.Millisecond, InFlight: 8}, now)
		}
		now = now.Add(time.Second)
		changed, dir := c.Tick(now)
		fmt.Printf("window %d: limit %d (changed %v, direction %+d)\n", w, c.Limit(), changed, dir)
	}
	// Output:
	// window 0: limit 11 (changed true, direction +1)
	// window 1: limit 12 (changed true, direction +1)
	// window 2: limit 10 (changed true, direction -1)
	// window 3: limit 11 (changed true, direction +1)
}
