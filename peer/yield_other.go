//go:build !linux

package peer

// schedYield does nothing where sched_yield(2) is not at hand.
func schedYield() {}
