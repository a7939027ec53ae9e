package clock_test

import (
	"math"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/clock"
)

func TestSystemAdvances(t *testing.T) {
	c := clock.System()
	a := c.Now()
	if wall := clock.FromTime(time.Now()); a > wall.Add(time.Second) || a < wall.Add(-time.Second) {
		t.Fatalf("clock %d is not anchored at the wall time %d", a, wall)
	}
	time.Sleep(2 * time.Millisecond) // the behaviour under test: the system clock moves with real time
	if b := c.Now(); b.Sub(a) < 2*time.Millisecond {
		t.Fatalf("clock advanced %v over a 2ms sleep", b.Sub(a))
	}
}

// TestSystemIgnoresWallClockJump steps the machine's wall clock back by an
// hour and forward by an hour, and checks that neither removes nor grants a
// token. It needs root (CAP_SYS_TIME) and puts the wall clock back after.
func TestSystemIgnoresWallClockJump(t *testing.T) {
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
	c := clock.System()
	// One token per hour: any hour granted by a wall jump would show.
	b := bucket.New(bucket.MustLimit(bucket.TokenBucket, 1, time.Hour, 1))
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
	if d := forward.Sub(start); d > time.Second || d < 0 {
		t.Fatalf("a wall jump of +1h moved the clock by %v", d)
	}
	if d := backAgain.Sub(back); d > time.Second || d < 0 {
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

func TestInstantArithmetic(t *testing.T) {
	noon := clock.FromTime(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	steps := []struct {
		t       clock.Instant
		d       time.Duration
		want    clock.Instant
		wantSub time.Duration // want.Sub(t)
	}{
		{0, 0, 0, 0},
		{0, 1, 1, 1},
		{0, -1, -1, -1},
		{noon, 1500 * time.Millisecond, noon + 1_500_000_000, 1500 * time.Millisecond},
		{noon, -time.Hour, noon - 3_600_000_000_000, -time.Hour},
		{math.MaxInt64 - 10, 10, math.MaxInt64, 10},
		{math.MinInt64 + 10, -10, math.MinInt64, -10},
	}
	for i, s := range steps {
		got := s.t.Add(s.d)
		if got != s.want {
			t.Errorf("step %d: Instant(%d).Add(%v) = %d want %d", i, s.t, s.d, got, s.want)
		}
		if sub := got.Sub(s.t); sub != s.wantSub {
			t.Errorf("step %d: Instant(%d).Sub(%d) = %v want %v", i, got, s.t, sub, s.wantSub)
		}
		if back := s.t.Sub(got); back != -s.wantSub {
			t.Errorf("step %d: Instant(%d).Sub(%d) = %v want %v", i, s.t, got, back, -s.wantSub)
		}
		if before, want := s.t.Before(got), s.d > 0; before != want {
			t.Errorf("step %d: Instant(%d).Before(%d) = %v want %v", i, s.t, got, before, want)
		}
		if after, want := got.Before(s.t), s.d < 0; after != want {
			t.Errorf("step %d: Instant(%d).Before(%d) = %v want %v", i, got, s.t, after, want)
		}
	}
	if noon.Before(noon) {
		t.Error("an Instant is before itself")
	}
	if got, want := noon.UnixNano(), time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC).UnixNano(); got != want {
		t.Errorf("UnixNano() = %d want %d", got, want)
	}
	wall := time.Date(2026, 3, 4, 5, 6, 7, 890, time.FixedZone("x", 3600))
	if got := clock.FromTime(wall).Time(); !got.Equal(wall) || got.Location() != time.UTC {
		t.Errorf("FromTime(%v).Time() = %v want the same instant in UTC", wall, got)
	}
}
