package bucket

import (
	"fmt"
	"maps"
	"slices"
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
			switch op := rapid.IntRange(0, 7).Draw(rt, fmt.Sprint("op", step)); op {
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
