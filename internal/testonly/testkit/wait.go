package testkit

import (
	"testing"
	"time"
)

// pollEvery is how often WaitFor looks again: a polling interval, not a
// synchronisation.
const pollEvery = 5 * time.Millisecond

// WaitFor polls cond until it returns nil or d passes, then fails the test
// with what and cond's last error. It returns how long cond took to hold.
//
// This is the one way a ringlimit test waits for something to happen: a
// condition with a deadline, never a fixed sleep. Choose d generously (it
// bounds a failing test, not a passing one): a machine whose cores are
// busy with other work is several times slower than an idle one.
func WaitFor(t testing.TB, d time.Duration, what string, cond func() error) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(d)
	for {
		err := cond()
		if err == nil {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s: %v", d, what, err)
		}
		time.Sleep(pollEvery)
	}
}

// Eventually polls cond until it holds or d passes, then fails the test.
// It returns how long cond took to hold.
func Eventually(t testing.TB, d time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(pollEvery)
	}
	return time.Since(start)
}

// Poll polls cond until it holds or d passes, and says whether it held.
// It fails nothing: for a test that retries an action until it has an
// effect (poke, then Poll briefly, then poke again).
func Poll(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(pollEvery)
	}
	return true
}
