package clock_test

import (
	"math"
	"math/big"
	"testing"
	"testing/quick"
	"time"

	"github.com/ringlimit/ringlimit/clock"
)

func TestRounding(t *testing.T) {
	const (
		maxD       = time.Duration(math.MaxInt64)               // 9223372036.854775807s
		lastMilli  = maxD / time.Millisecond * time.Millisecond // 9223372036.854s
		lastSecond = maxD / time.Second * time.Second           // 9223372036s
	)
	// Each step is a duration and the three roundings of it.
	steps := []struct {
		d          time.Duration
		ceilMillis time.Duration
		seconds    int64
		millis     int64
	}{
		{0, 0, 0, 0},
		{-1, 0, 0, 0},
		{-time.Second, 0, 0, 0},
		{math.MinInt64, 0, 0, 0},
		{1, time.Millisecond, 1, 1},
		{time.Millisecond - 1, time.Millisecond, 1, 1},
		{time.Millisecond, time.Millisecond, 1, 1},
		{time.Millisecond + 1, 2 * time.Millisecond, 1, 2},
		{1500 * time.Microsecond, 2 * time.Millisecond, 1, 2},
		{999 * time.Millisecond, 999 * time.Millisecond, 1, 999},
		{time.Second - 1, time.Second, 1, 1000},
		{time.Second, time.Second, 1, 1000},
		{time.Second + 1, time.Second + time.Millisecond, 2, 1001},
		{time.Hour, time.Hour, 3600, 3_600_000},
		// Near MaxInt64: every whole unit that fits is reached, and a
		// CeilMillis that does not fit saturates instead of wrapping or
		// rounding down.
		{lastSecond, lastSecond, 9_223_372_036, 9_223_372_036_000},
		{lastSecond + 1, lastSecond + time.Millisecond, 9_223_372_037, 9_223_372_036_001},
		{maxD - time.Millisecond, lastMilli, 9_223_372_037, 9_223_372_036_854},
		{maxD - time.Millisecond + 1, lastMilli, 9_223_372_037, 9_223_372_036_854},
		{lastMilli - 1, lastMilli, 9_223_372_037, 9_223_372_036_854},
		{lastMilli, lastMilli, 9_223_372_037, 9_223_372_036_854},
		{lastMilli + 1, maxD, 9_223_372_037, 9_223_372_036_855},
		{maxD - 1, maxD, 9_223_372_037, 9_223_372_036_855},
		{maxD, maxD, 9_223_372_037, 9_223_372_036_855},
	}
	for i, s := range steps {
		if got := clock.CeilMillis(s.d); got != s.ceilMillis {
			t.Errorf("step %d: CeilMillis(%d) = %d want %d", i, s.d, got, s.ceilMillis)
		}
		if got := clock.CeilSeconds(s.d); got != s.seconds {
			t.Errorf("step %d: CeilSeconds(%d) = %d want %d", i, s.d, got, s.seconds)
		}
		if got := clock.Millis(s.d); got != s.millis {
			t.Errorf("step %d: Millis(%d) = %d want %d", i, s.d, got, s.millis)
		}
	}
}

// refCeil is ⌈d/unit⌉ for d > 0, else 0, in unbounded integers.
func refCeil(d, unit time.Duration) *big.Int {
	if d <= 0 {
		return new(big.Int)
	}
	n, u := big.NewInt(int64(d)), big.NewInt(int64(unit))
	n.Add(n, u).Sub(n, big.NewInt(1))
	return n.Quo(n, u)
}

func TestRoundingAgainstReference(t *testing.T) {
	maxD := big.NewInt(math.MaxInt64)
	ms := big.NewInt(int64(time.Millisecond))
	check := func(n int64) bool {
		d := time.Duration(n)
		if clock.CeilSeconds(d) != refCeil(d, time.Second).Int64() ||
			clock.Millis(d) != refCeil(d, time.Millisecond).Int64() {
			return false
		}
		want := new(big.Int).Mul(refCeil(d, time.Millisecond), ms)
		if want.Cmp(maxD) > 0 {
			want = maxD // saturated
		}
		return int64(clock.CeilMillis(d)) == want.Int64()
	}
	if err := quick.Check(check, &quick.Config{MaxCount: 100_000}); err != nil {
		t.Fatal(err)
	}
	// quick draws from the whole int64 range; look closely at both ends too,
	// over more than a millisecond below MaxInt64.
	for k := range int64(1_000_000) {
		for _, n := range []int64{k - 500_000, math.MaxInt64 - k} {
			if !check(n) {
				t.Fatalf("rounding %d differs from the reference", n)
			}
		}
	}
}
