package main

import (
	"runtime"
	"runtime/metrics"
	"testing"
	"time"
)

func TestGCPercentFor(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		live, headroom uint64
		base, want     int
	}{
		{4 * mib, 64 * mib, 100, 1600},
		{3 * mib, 64 * mib, 100, 2134}, // rounded up: at least the headroom
		{64 * mib, 64 * mib, 100, 100},
		{128 * mib, 64 * mib, 100, 100}, // a large heap: GOGC alone
		{128 * mib, 64 * mib, 300, 300},
		{4 * mib, 64 * mib, 2000, 2000},
		{0, 64 * mib, 100, maxGCPercent},
		{1, 64 * mib, 100, maxGCPercent},
	} {
		if got := gcPercentFor(tc.live, tc.headroom, tc.base); got != tc.want {
			t.Errorf("gcPercentFor(%d, %d, %d) = %d, want %d", tc.live, tc.headroom, tc.base, got, tc.want)
		}
	}
}

func readGC() (percent int, live uint64) {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}, {Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return int(int64(s[0].Value.Uint64())), s[1].Value.Uint64()
}

// TestTuneGC runs the tuner in this test process: after a collection it sets
// the percent for the live heap that collection found, and stop restores
// the percent it started from.
func TestTuneGC(t *testing.T) {
	base, _ := readGC()
	if base < 0 {
		t.Skip("GOGC=off")
	}
	const headroom = 256 << 20 // far above this process's live heap
	stop := tuneGC(headroom)
	defer stop()
	if other := tuneGC(headroom / 2); other == nil {
		t.Fatal("a second tuner returned no stop function")
	} else {
		other() // a no-op: the first tuner keeps running
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		runtime.GC()
		time.Sleep(10 * time.Millisecond) // the cleanup runs after the collection
		p, live := readGC()
		want := gcPercentFor(live, headroom, base)
		if want <= base {
			t.Fatalf("live heap %d B: the test needs it below the headroom", live)
		}
		if p == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GC percent %d after collections, want %d for a live heap of %d B", p, want, live)
		}
	}
	stop()
	if p, _ := readGC(); p != base {
		t.Fatalf("GC percent %d after stop, want %d", p, base)
	}
	runtime.GC()
	time.Sleep(10 * time.Millisecond)
	if p, _ := readGC(); p != base {
		t.Fatalf("GC percent %d after a collection once stopped, want %d: the tuner still runs", p, base)
	}
}

func TestTuneGCOff(t *testing.T) {
	base, _ := readGC()
	stop := tuneGC(0)
	runtime.GC()
	time.Sleep(10 * time.Millisecond)
	if p, _ := readGC(); p != base {
		t.Fatalf("--gc-headroom 0 changed the GC percent from %d to %d", base, p)
	}
	stop()
}
