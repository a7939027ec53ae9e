//go:build race

package harness_test

// raceEnabled says whether the race detector is on: it makes the CPU a
// node's goroutines need several times larger.
const raceEnabled = true
