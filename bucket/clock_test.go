package bucket

import (
	"os"
	"syscall"
	"testing"
	"time"
)

func TestMonotonicAdvances(t *testing.T) {
	c := NewMonotonic()
	a := c.Now()
	if wall := time.Now().UnixNano(); a > wall+int64(time.Second) || a < wall-int64(time.Second) {
		t.Fatalf("clock %d is not anchored at the wall time %d", a, wall)
	}
	time.Sleep(2 * time.Millisecond)
	if b := c.Now(); b-a < int64(2*time.Millisecond) {
		t.Fatalf("clock advanced %v over a 2ms sleep", time.Duration(b-a))
	}
}

// TestMonotonicIgnoresWallClockJump steps the machine's wall clock back by an
// hour and forward by an hour, and checks that neither removes nor grants a
// token. It needs root (CAP_SYS_TIME) and puts the wall clock back after.
func TestMonotonicIgnoresWallClockJump(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("stepping the wall clock needs root")
	}
	jump := func(d time.Duration) {
		t.Helper()
		tv := syscall.NsecToTimeval(time.Now().Add(d).UnixNano())
		if err := syscall.Settimeofday(&tv); err != nil {
			t.Skipf("cannot step the wall clock here: %v", err)
		}
	}
	c := NewMonotonic()
	// One token per hour: any hour granted by a wall jump would show.
	b := New(MustLimit(TokenBucket, 1, time.Hour, 1))
	if d, _ := b.TakeAt(c.Now(), 1); !d.Allowed {
		t.Fatal("first check rejected")
	}
	start := c.Now()
	jump(time.Hour)
	forward := c.Now()
	jump(-time.Hour)
	back := c.Now()
	jump(-time.Hour)
	backAgain := c.Now()
	jump(time.Hour)
	if d := time.Duration(forward - start); d > time.Second || d < 0 {
		t.Fatalf("a wall jump of +1h moved the clock by %v", d)
	}
	if d := time.Duration(backAgain - back); d > time.Second || d < 0 {
		t.Fatalf("a wall jump of -1h moved the clock by %v", d)
	}
	d, _ := b.TakeAt(forward, 1)
	if d.Allowed || d.RetryAfter < 59*time.Minute {
		t.Fatalf("after +1h on the wall clock: %+v, want rejected with about an hour to wait", d)
	}
	d, _ = b.TakeAt(backAgain, 1)
	if d.Allowed || d.RetryAfter > time.Hour || d.RetryAfter < 59*time.Minute {
		t.Fatalf("after -1h on the wall clock: %+v, want the same hour to wait, no more", d)
	}
}
