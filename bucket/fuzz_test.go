package bucket

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/clock"
)

// fzMaxNow bounds the fuzzed clock: nanoseconds since 1970 up to the year
// 2116, far beyond any real clock, with every window end still in int64.
const fzMaxNow = 1 << 62

// fzStepLen is the number of bytes that encode one check; at most fzMaxSteps
// checks are decoded.
const (
	fzStepLen  = 5
	fzMaxSteps = 128
)

// fzStep decodes how far time moves from now: zero, up to 65535ns, up to
// 65535ms, a fraction of per, a few periods, onto the next window boundary
// ±127ns, backwards, or a jump of up to about 3 days.
func fzStep(kind, x, y byte, per time.Duration, now clock.Instant) time.Duration {
	v := time.Duration(x)<<8 | time.Duration(y)
	switch kind % 8 {
	case 0:
		return 0
	case 1:
		return v
	case 2:
		return v * time.Millisecond
	case 3:
		return time.Duration(float64(per) * float64(v) / 65536)
	case 4:
		return per*time.Duration(x%8+1) + time.Duration(y)*time.Millisecond
	case 5:
		return per - now.Sub(0)%per + time.Duration(int8(x))
	case 6:
		return -v * time.Microsecond
	default:
		return v << 32
	}
}

// fzCost decodes a cost, deliberately invalid in three cases of eight.
func fzCost(mode, x byte, capacity int64) int64 {
	switch mode % 8 {
	case 0:
		return 0
	case 1:
		if x == 255 {
			return math.MaxInt64
		}
		return capacity + 1 + int64(x)
	case 2:
		if x == 0 {
			return math.MinInt64
		}
		return -int64(x)
	case 3:
		return capacity
	case 4:
		return 1
	default:
		return 1 + (int64(mode>>3)<<8|int64(x))%capacity
	}
}

// FuzzTakeAt runs a decoded sequence of checks, some with invalid costs and
// some with time going backwards, through a bucket, a twin bucket that sees
// only the valid checks, and a store. Invalid costs must be errors that
// change nothing; every decision must be well formed; all three must agree;
// and while time has not gone backwards the decisions must match the exact
// reference model of property_test.go.
func FuzzTakeAt(f *testing.F) {
	const sec = int64(time.Second)
	f.Add(byte(TokenBucket), int64(10), sec, int64(0), int64(0), []byte{0, 0, 0, 3, 0, 1, 0, 10, 5, 7, 2, 0, 100, 0, 0, 0, 0, 0, 1, 0})
	f.Add(byte(LeakyBucket), int64(3), sec, int64(5), int64(1_780_000_000_123_456_789), []byte{4, 0, 0, 3, 0, 0, 0, 0, 4, 0, 0, 0, 0, 0, 1, 3, 1, 2, 4, 0})
	f.Add(byte(FixedWindow), int64(100), int64(time.Minute), int64(0), int64(59*sec), []byte{0, 0, 0, 3, 0, 0, 0, 0, 5, 9, 5, 255, 0, 3, 0, 6, 1, 1, 4, 0})
	f.Add(byte(SlidingWindowLog), int64(5), int64(7*time.Millisecond), int64(0), int64(0), []byte{1, 0, 9, 13, 2, 2, 0, 3, 4, 0, 3, 2, 0, 29, 1, 6, 0, 200, 3, 0})
	f.Add(byte(SlidingWindowCounter), int64(10), sec, int64(0), int64(900*time.Millisecond), []byte{0, 0, 0, 5, 7, 3, 64, 0, 4, 0, 3, 128, 0, 3, 0, 7, 1, 0, 4, 0})
	// Parameters at the bounds: capacities of 2^62 − 2^32 units (1/den
	// token), the largest counts and periods.
	edge := []byte{0, 0, 0, 3, 0, 0, 0, 0, 3, 0, 7, 255, 255, 3, 0, 3, 1, 0, 1, 255, 0, 0, 0, 2, 0}
	f.Add(byte(TokenBucket), int64(1), int64(1<<32), int64(1<<30-1), int64(0), edge)
	f.Add(byte(LeakyBucket), int64(1), int64(1<<32), int64(1<<30-1), int64(0), edge)
	f.Add(byte(FixedWindow), int64(MaxCount), int64(MaxPer), int64(0), int64(math.MaxInt64), edge)
	f.Add(byte(SlidingWindowLog), int64(MaxLogLimit), int64(MaxPer), int64(0), int64(0), edge)
	f.Add(byte(SlidingWindowCounter), int64(MaxCount), int64(MaxPer), int64(0), int64(0), edge)
	f.Add(byte(9), int64(1), sec, int64(0), int64(0), []byte{0})
	f.Fuzz(func(t *testing.T, alg byte, limit, per, burst, start int64, data []byte) {
		lim, err := NewLimit(Algorithm(alg), limit, time.Duration(per), burst)
		if err != nil {
			if !errors.Is(err, ErrAlgorithm) && !errors.Is(err, ErrLimit) {
				t.Fatalf("NewLimit(%d, %d, %d, %d) = %v, want ErrAlgorithm or ErrLimit", alg, limit, per, burst, err)
			}
			t.Skip()
		}
		capacity := lim.Capacity()
		if capacity < 1 || capacity > MaxWindowCount || Algorithm(alg) != FixedWindow && capacity > MaxCount || lim.Count() != limit || lim.Per() != time.Duration(per) {
			t.Fatalf("NewLimit(%d, %d, %d, %d) = %v with capacity %d", alg, limit, per, burst, lim, capacity)
		}
		p := propParams{alg: Algorithm(alg), limit: limit, per: time.Duration(per), burst: burst}
		// The model is exact but knows nothing of time going backwards for
		// the windows; the buckets must treat it as a zero step.
		model := newPropModel(p)
		modelOn := true
		b, twin := New(lim), New(lim)
		store, err := NewStore(StoreConfig{MaxKeys: 1, Shards: 1})
		if err != nil {
			t.Fatal(err)
		}

		if len(data) > fzMaxSteps*fzStepLen {
			data = data[:fzMaxSteps*fzStepLen] // keep every input fast
		}
		now := clock.Instant(start & (fzMaxNow - 1))
		latest := now
		for i := 0; len(data) > 0; i++ {
			var c [fzStepLen]byte
			data = data[copy(c[:], data):]
			if i > 0 {
				now = min(max(now.Add(fzStep(c[0], c[1], c[2], time.Duration(per), now)), 0), fzMaxNow)
			}
			cost := fzCost(c[3], c[4], capacity)

			d, err := b.TakeAt(now, cost)
			ds, errS := store.Take("k", &lim, now, cost)
			if cost < 1 || cost > capacity {
				if !errors.Is(err, ErrCost) || d != (Decision{}) {
					t.Fatalf("step %d: %v: TakeAt(now=%d, cost=%d) = %+v, %v; want zero Decision and ErrCost", i, lim, now, cost, d, err)
				}
				if !errors.Is(errS, ErrCost) || ds != (Decision{}) {
					t.Fatalf("step %d: %v: Store.Take(now=%d, cost=%d) = %+v, %v; want zero Decision and ErrCost", i, lim, now, cost, ds, errS)
				}
				continue
			}
			if err != nil || errS != nil {
				t.Fatalf("step %d: %v: TakeAt/Store.Take(now=%d, cost=%d): unexpected errors %v, %v", i, lim, now, cost, err, errS)
			}
			if msg := propInvariants(capacity, lim.Algorithm(), d); msg != "" {
				t.Fatalf("step %d: %v: TakeAt(now=%d, cost=%d) = %+v: %s", i, lim, now, cost, d, msg)
			}
			if d.Limit != limit {
				t.Fatalf("step %d: %v: TakeAt(now=%d, cost=%d) = %+v: Limit %d, want %d", i, lim, now, cost, d, d.Limit, limit)
			}
			dt, err := twin.TakeAt(now, cost)
			if err != nil || dt != d {
				t.Fatalf("step %d: %v: TakeAt(now=%d, cost=%d) = %+v, but a twin that never saw the invalid costs got %+v, %v", i, lim, now, cost, d, dt, err)
			}
			if ds != d {
				t.Fatalf("step %d: %v: Store.Take(now=%d, cost=%d) = %+v, want %+v (as Bucket.TakeAt)", i, lim, now, cost, ds, d)
			}

			if now < latest && alg != byte(TokenBucket) && alg != byte(LeakyBucket) {
				modelOn = false
			}
			latest = max(latest, now)
			if modelOn {
				want, retryKnown := model.take(now, cost)
				if diff := propDiff(d, want, retryKnown); diff != "" {
					t.Fatalf("step %d: %v: TakeAt(now=%d, cost=%d) differs from the exact model:\n%s", i, lim, now, cost, diff)
				}
			}
		}
	})
}

// FuzzParseAlgorithm checks that ParseAlgorithm never panics, accepts exactly
// the five wire names (and "" for the default), and round-trips String.
func FuzzParseAlgorithm(f *testing.F) {
	for a := range numAlgorithms + 1 {
		f.Add(a.String())
	}
	for _, s := range []string{"", "TOKEN_BUCKET", "token_bucket ", "token_bucket\x00", "algorithm(2)", "leaky", "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParseAlgorithm(s)
		if err != nil {
			if !errors.Is(err, ErrAlgorithm) {
				t.Fatalf("ParseAlgorithm(%q) error %v does not wrap ErrAlgorithm", s, err)
			}
			if a != 0 {
				t.Fatalf("ParseAlgorithm(%q) = %v with error %v, want the zero Algorithm", s, a, err)
			}
			for b := range numAlgorithms {
				if b.String() == s {
					t.Fatalf("ParseAlgorithm(%q) = %v, but it is the name of %d", s, err, b)
				}
			}
			return
		}
		if a >= numAlgorithms {
			t.Fatalf("ParseAlgorithm(%q) = %d, not a valid algorithm", s, a)
		}
		if s == "" {
			if a != TokenBucket {
				t.Fatalf(`ParseAlgorithm("") = %v, want the default token_bucket`, a)
			}
			return
		}
		if a.String() != s {
			t.Fatalf("ParseAlgorithm(%q) = %v, whose String is %q", s, a, a.String())
		}
		if b, err := ParseAlgorithm(a.String()); err != nil || b != a {
			t.Fatalf("ParseAlgorithm(%q) = %v, %v; want %v", a.String(), b, err, a)
		}
		if _, err := NewLimit(a, 1, time.Second, 0); err != nil {
			t.Fatalf("NewLimit(%v, 1, 1s, 0): %v", a, err)
		}
	})
}
