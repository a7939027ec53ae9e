package bucket

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/clock"
)

// stampLog is the sliding window log as it was before runs: one timestamp
// per admitted unit, no bound. It is the reference the run log must match
// exactly while it does not merge.
type stampLog struct {
	lim Limit
	ts  []int64
}

func (m *stampLog) take(now, cost int64) Decision {
	if n := len(m.ts); n > 0 && now < m.ts[n-1] {
		now = m.ts[n-1]
	}
	w := int64(m.lim.per)
	i := 0
	for i < len(m.ts) && m.ts[i] <= now-w {
		i++
	}
	m.ts = m.ts[i:]
	n := int64(len(m.ts))
	d := Decision{Limit: m.lim.limit}
	if n+cost > m.lim.limit {
		d.RetryAfter = roundUpMs(m.ts[n+cost-m.lim.limit-1] + w - now)
	} else {
		d.Allowed = true
		for range cost {
			m.ts = append(m.ts, now)
		}
		n += cost
	}
	d.Remaining = m.lim.limit - n
	if n > 0 {
		d.ResetAfter = roundUpMs(m.ts[n-1] + w - now)
	}
	return d
}

// TestLogRunsMatchTimestamps runs a scripted sequence, then random ones, on
// a limit of 5 per second through the run log and the timestamp log: every
// decision must be the same.
func TestLogRunsMatchTimestamps(t *testing.T) {
	lim := MustLimit(SlidingWindowLog, 5, time.Second, 0)
	script := []struct {
		at   time.Duration
		cost int64
	}{
		{0, 1}, {0, 1}, {100 * time.Millisecond, 2}, {200 * time.Millisecond, 1},
		{300 * time.Millisecond, 1}, // full: 5 in (−0.7s, 0.3s]
		{999 * time.Millisecond, 1}, // still full
		{time.Second, 1},            // the two at 0 left: 1 admitted
		{time.Second, 2},            // 4 + 2 > 5
		{1100 * time.Millisecond, 2},
		{1050 * time.Millisecond, 1}, // clock behind: treated as 1.1s
		{1150 * time.Millisecond, 5},
		{2500 * time.Millisecond, 5},
		{2500 * time.Millisecond, 1},
		{3499 * time.Millisecond, 1},
		{3500 * time.Millisecond, 3},
		{3500 * time.Millisecond, 3},
	}
	var base clock.Instant = 1e15
	got, ref := New(lim), &stampLog{lim: lim}
	for i, s := range script {
		now := base.Add(s.at)
		d, err := got.TakeAt(now, s.cost)
		if err != nil {
			t.Fatal(err)
		}
		if want := ref.take(int64(now), s.cost); d != want {
			t.Fatalf("step %d: TakeAt(%v, %d) = %+v want %+v", i, s.at, s.cost, d, want)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for run := range 200 {
		got, ref := New(lim), &stampLog{lim: lim}
		now := int64(base)
		for i := range 200 {
			now += rng.Int64N(int64(400 * time.Millisecond))
			if rng.IntN(8) == 0 {
				now -= rng.Int64N(int64(100 * time.Millisecond)) // backwards
			}
			cost := 1 + rng.Int64N(5)
			d, _ := got.TakeAt(clock.Instant(now), cost)
			if want := ref.take(now, cost); d != want {
				t.Fatalf("run %d step %d: TakeAt(%d, %d) = %+v want %+v", run, i, now, cost, d, want)
			}
		}
	}
}

// TestLogMergedNeverOveradmits drives a limit of 1000 per second with many
// distinct instants, so the log merges runs, and checks that no window of
// one second ever holds more than 1000 admitted and that the log stays
// within maxLogRuns.
func TestLogMergedNeverOveradmits(t *testing.T) {
	lim := MustLimit(SlidingWindowLog, 1000, time.Second, 0)
	b := &SlidingLog{lim: lim}
	type adm struct{ t, n int64 }
	var admitted []adm
	rng := rand.New(rand.NewPCG(3, 4))
	now := int64(1e15)
	merged := false
	for range 20000 {
		now += rng.Int64N(int64(2 * time.Millisecond))
		cost := 1 + rng.Int64N(3)
		d, _ := b.TakeAt(clock.Instant(now), cost)
		if d.Allowed {
			admitted = append(admitted, adm{now, cost})
		}
		if len(b.log) > maxLogRuns {
			t.Fatalf("log holds %d runs, want at most %d", len(b.log), maxLogRuns)
		}
		merged = merged || len(b.log) == maxLogRuns
	}
	if !merged {
		t.Fatal("the log never reached maxLogRuns: the test does not exercise merging")
	}
	var sum int64
	lo := 0
	for _, a := range admitted {
		sum += a.n
		for admitted[lo].t <= a.t-int64(time.Second) {
			sum -= admitted[lo].n
			lo++
		}
		if sum > lim.limit {
			t.Fatalf("%d admitted in the second ending at %d, limit %d", sum, a.t, lim.limit)
		}
	}
}

// TestLogMemoryBounded takes the whole capacity of 1,000 sliding window log
// keys at their largest limit: one timestamp per unit would hold 800 MB.
func TestLogMemoryBounded(t *testing.T) {
	const keys = 1000
	lim := MustLimit(SlidingWindowLog, MaxLogLimit, time.Hour, 0)
	grew := heapGrowth(t, func() any {
		s, err := NewStore(StoreConfig{MaxKeys: 4 * keys, Shards: DefaultShards})
		if err != nil {
			t.Fatal(err)
		}
		for i := range keys {
			if d := mustTake(t, s, fmt.Sprintf("k%d", i), &lim, 1e15, lim.Capacity()); !d.Allowed {
				t.Fatalf("key %d: %+v, want allowed", i, d)
			}
		}
		return s
	})
	t.Logf("%d keys at %d/hour, each fully spent: heap grew %d bytes (%d per key)", keys, lim.limit, grew, grew/keys)
	if grew >= 64<<20 {
		t.Fatalf("heap grew %d bytes, want < 64 MiB", grew)
	}

	// The worst case per key: every check at its own instant, so the log
	// holds maxLogRuns runs.
	full := heapGrowth(t, func() any {
		s, err := NewStore(StoreConfig{MaxKeys: 4 * keys, Shards: DefaultShards})
		if err != nil {
			t.Fatal(err)
		}
		for i := range keys {
			for j := range 2 * maxLogRuns {
				mustTake(t, s, fmt.Sprintf("k%d", i), &lim, clock.Instant(1e15+j), 1)
			}
		}
		return s
	})
	t.Logf("%d keys holding %d runs each: heap grew %d bytes (%d per key)", keys, maxLogRuns, full, full/keys)
	if full >= 64<<20 {
		t.Fatalf("heap grew %d bytes, want < 64 MiB", full)
	}
}

// TestLogMergeAllocsBounded hands off a fully spent sliding window log key
// (used 1,000,000, clamped to the capacity) into a store that already holds
// it: neither the merge nor a conversion may allocate a timestamp per unit.
func TestLogMergeAllocsBounded(t *testing.T) {
	lim := MustLimit(SlidingWindowLog, MaxLogLimit, time.Hour, 0)
	other := MustLimit(SlidingWindowLog, MaxLogLimit/2, time.Minute, 0)
	s, err := NewStore(StoreConfig{MaxKeys: 16, Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	mustTake(t, s, "k", &other, 1e15, 1)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if err := s.Merge("k", &lim, 1e15, 1_000_000); err != nil { // converts, then sets
		t.Fatal(err)
	}
	if err := s.Merge("fresh", &lim, 1e15, 1_000_000); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	bytes := after.TotalAlloc - before.TotalAlloc
	t.Logf("two merges of used 1,000,000: %d bytes allocated", bytes)
	if bytes >= 64<<10 {
		t.Fatalf("merges allocated %d bytes, want < 64 KiB", bytes)
	}
	if _, used, _ := s.Used("k", 1e15); used != lim.Capacity() {
		t.Fatalf("used %d after the merge, want %d", used, lim.Capacity())
	}
	allocs := testing.AllocsPerRun(100, func() {
		_ = s.Merge("k", &lim, 1e15+1, 1_000_000)
		_ = s.Set("k", &lim, 1e15+2, 1_000_000)
	})
	if allocs > 2 {
		t.Fatalf("a merge and set allocated %v times, want at most 2", allocs)
	}
}
