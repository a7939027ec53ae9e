package bucket

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/ringlimit/ringlimit/clock"
)

// TestRangeHeldProperty: after any sequence of the store's writes, under
// every algorithm, calendar windows and clocks that step back included,
// RangeHeld reports exactly the keys Range reports with Used > 0, with the
// same snapshots, at every instant read.
func TestRangeHeldProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		s, err := NewStore(StoreConfig{MaxKeys: 64, Shards: 4})
		if err != nil {
			rt.Fatal(err)
		}
		var limits []Limit
		for i := range rapid.IntRange(1, 3).Draw(rt, "limits") {
			if rapid.IntRange(0, 5).Draw(rt, fmt.Sprint("calendar", i)) == 0 {
				l, err := NewCalendarLimit(rapid.Int64Range(1, 50).Draw(rt, fmt.Sprint("calendarLimit", i)),
					Calendar{Unit: rapid.SampledFrom([]CalendarUnit{Day, Week, Month, Year}).Draw(rt, fmt.Sprint("unit", i))})
				if err != nil {
					rt.Fatal(err)
				}
				limits = append(limits, l)
				continue
			}
			alg := Algorithm(rapid.IntRange(0, int(SlidingWindowCounter)).Draw(rt, fmt.Sprint("alg", i)))
			limits = append(limits, propLimit(rt, drawPropParams(rt, alg)))
		}
		now := clock.Instant(time.Date(2026, 3, 29, 0, 30, 0, 0, time.UTC).UnixNano())
		for step := range rapid.IntRange(1, 60).Draw(rt, "steps") {
			at := func(name string) clock.Instant {
				return now + clock.Instant(rapid.Int64Range(-int64(time.Second), int64(10*time.Second)).Draw(rt, fmt.Sprint(name, step)))
			}
			key := fmt.Sprint("k", rapid.IntRange(0, 9).Draw(rt, fmt.Sprint("key", step)))
			l := &limits[rapid.IntRange(0, len(limits)-1).Draw(rt, fmt.Sprint("limit", step))]
			cost := rapid.Int64Range(0, 20).Draw(rt, fmt.Sprint("cost", step))
			switch op := rapid.IntRange(0, 10).Draw(rt, fmt.Sprint("op", step)); op {
			case 0, 1:
				s.Take(key, l, now, cost)
			case 2:
				s.Refund(key, l, now, cost)
			case 3:
				s.Settle(key, l, now, cost-10)
			case 4:
				s.Merge(key, l, at("mergeAt"), cost)
			case 5:
				_, next := l.window(int64(now))
				s.SetWindow(key, l, now, cost, next) // a sender's clock in the next window
			case 6:
				s.Grant(key, l, now, cost)
			case 7:
				s.Delete(key)
			case 8: // a batch of replicas: this key and another
				other := fmt.Sprint("k", rapid.IntRange(0, 9).Draw(rt, fmt.Sprint("other", step)))
				s.MergeEach(now, 2, func(i int) (string, *Limit, int64) {
					if i == 0 {
						return other, l, cost / 2
					}
					return key, l, cost
				})
			case 9:
				s.Set(key, l, now, cost)
			case 10:
				s.Charge(key, l, now, cost)
			}
			now += clock.Instant(rapid.Int64Range(0, int64(3*time.Second)).Draw(rt, fmt.Sprint("advance", step)))
			if rapid.IntRange(0, 9).Draw(rt, fmt.Sprint("jump", step)) == 0 {
				now += clock.Instant(rapid.Int64Range(0, int64(40*24*time.Hour)).Draw(rt, fmt.Sprint("far", step)))
			}
			read := at("read")
			want := map[string]Snapshot{}
			s.Range(read, func(batch []Snapshot) bool {
				for _, b := range batch {
					if b.Used > 0 {
						want[b.Key] = b
					}
				}
				return true
			})
			got := map[string]Snapshot{}
			s.RangeHeld(read, func(batch []Snapshot) bool {
				for _, b := range batch {
					if b.Used > 0 {
						got[b.Key] = b
					}
				}
				return true
			})
			if !maps.EqualFunc(got, want, func(a, b Snapshot) bool { return a == b }) {
				rt.Fatalf("step %d at %d: RangeHeld %v, Range with spend %v", step, read, slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
			}
		}
	})
}

// TestRangeChunks: a shard of more keys than one chunk (rangeChunk), with
// free slots among them, is walked whole: Range reports each key held
// exactly once, and RangeHeld the ones that hold spend.
func TestRangeChunks(t *testing.T) {
	const n = 2*rangeChunk + rangeChunk/2
	s := newStore(t, n, 1)
	lim := MustLimit(FixedWindow, 10, time.Hour, 0)
	want, held := map[string]bool{}, map[string]bool{}
	for i := range n {
		k := fmt.Sprintf("key-%d-of-a-long-enough-name", i)
		mustTake(t, s, k, &lim, 0, 1)
		want[k] = true
	}
	for i := 0; i < n; i += 7 {
		k := fmt.Sprintf("key-%d-of-a-long-enough-name", i)
		if !s.Delete(k) {
			t.Fatalf("%s not held", k)
		}
		delete(want, k)
	}
	// The keys past the second chunk spend again in a later window; the
	// others hold nothing then.
	later := clock.Instant(time.Hour)
	for i := 2 * rangeChunk; i < n; i++ {
		if k := fmt.Sprintf("key-%d-of-a-long-enough-name", i); want[k] {
			mustTake(t, s, k, &lim, later, 1)
			held[k] = true
		}
	}
	walk := func(name string, rangeFn func(clock.Instant, func([]Snapshot) bool), want map[string]bool) {
		t.Helper()
		seen := map[string]int{}
		rangeFn(later, func(batch []Snapshot) bool {
			for _, sn := range batch {
				seen[strings.Clone(sn.Key)]++
			}
			return true
		})
		if len(seen) != len(want) {
			t.Fatalf("%s reported %d keys, want %d", name, len(seen), len(want))
		}
		for k, c := range seen {
			if c != 1 || !want[k] {
				t.Fatalf("%s reported %s %d times (held: %v)", name, k, c, want[k])
			}
		}
	}
	walk("Range", s.Range, want)
	walk("RangeHeld", s.RangeHeld, held)
}
