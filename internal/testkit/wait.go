package testkit

import (
	"testing"
	"time"
)

// pollEvery is how often WaitFor looks again: a polling interval, not a
// synchronisation.
const pollEvery = 5 * time.Millisecond

// WaitFor polls cond until it returns nil or d passes, then fails the test
// with what and cond's last error.
func WaitFor(t testing.TB, d time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s: %v", d, what, err)
		}
		time.Sleep(pollEvery)
	}
}

// Eventually polls cond until it holds or d passes, then fails the test.
func Eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(pollEvery)
	}
}
