package gctune

import (
	"fmt"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

func TestGCPercentFor(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		scanned, headroom uint64
		base, want        int
	}{
		{8 * mib, 32 * mib, 100, 400},
		{6 * mib, 32 * mib, 100, 534}, // rounded up: at least the headroom
		{4 * mib, 32 * mib, 100, 800},
		{3 * mib, 32 * mib, 100, 800}, // below 4 MiB: as if 4 MiB, so the runtime's minimum is the headroom
		{0, 32 * mib, 100, 800},
		{32 * mib, 32 * mib, 100, 100},
		{128 * mib, 32 * mib, 100, 100}, // a large heap: GOGC alone
		{128 * mib, 32 * mib, 300, 300},
		{8 * mib, 32 * mib, 2000, 2000},
		{4 * mib, 1 << 40, 100, 26_214_400}, // the flag's largest value
	} {
		if got := gcPercentFor(tc.scanned, tc.headroom, tc.base); got != tc.want {
			t.Errorf("gcPercentFor(%d, %d, %d) = %d, want %d", tc.scanned, tc.headroom, tc.base, got, tc.want)
		}
	}
}

type gcState struct {
	percent       int
	live, scanned uint64 // as the last collection found them
	goal          uint64 // the heap size at which the next collection starts
}

func readGC() gcState {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}, {Name: "/gc/heap/live:bytes"},
		{Name: "/gc/scan/stack:bytes"}, {Name: "/gc/scan/globals:bytes"}, {Name: "/gc/heap/goal:bytes"}}
	metrics.Read(s)
	return gcState{percent: int(int64(s[0].Value.Uint64())), live: s[1].Value.Uint64(),
		scanned: s[1].Value.Uint64() + s[2].Value.Uint64() + s[3].Value.Uint64(), goal: s[4].Value.Uint64()}
}

// collectUntil collects until ok holds for the GC state, or fails the test
// after 10 s. The tuner runs just after a collection, so each try waits a
// little after collecting.
func collectUntil(t *testing.T, what string, ok func(gcState) bool) gcState {
	t.Helper()
	var st gcState
	runtime.GC()
	testkit.WaitFor(t, 10*time.Second, what, func() error {
		// The tuner ran after the last try's collection, or runs soon
		// after this one: the next try sees it.
		st = readGC()
		if ok(st) {
			return nil
		}
		runtime.GC()
		return fmt.Errorf("GC state %+v", st)
	})
	return st
}

// TestTuneGC runs the tuner in this test process: after each collection it
// sets the percent for what that collection found, the next collection
// comes about headroom bytes later, and stop restores the percent.
func TestTuneGC(t *testing.T) {
	base := readGC().percent
	if base <= 0 {
		t.Skip("the collector is off")
	}
	const headroom = 64 << 20
	stop := Tune(headroom)
	defer stop()
	tuned := func(st gcState) bool { return st.percent == gcPercentFor(st.scanned, headroom, base) }
	st := collectUntil(t, "tuned for the live heap", tuned)
	if st.percent <= base {
		t.Fatalf("GC state %+v: the test needs the heap below the headroom", st)
	}
	// The goal is live + headroom, or for a heap under 4 MiB between the
	// headroom and that (the percent is rounded up: allow 1%).
	if st.goal < headroom || st.goal > st.live+headroom+headroom/100 {
		t.Fatalf("heap goal %d B for %d B live, want %d to %d", st.goal, st.live, headroom, st.live+headroom)
	}

	// The tuner re-arms after each collection: with 48 MiB more live, the
	// percent follows the new heap.
	ballast := make([]byte, 48<<20)
	st = collectUntil(t, "tuned for the grown heap", func(st gcState) bool { return st.live > 48<<20 && tuned(st) })
	runtime.KeepAlive(ballast)
	if want := gcPercentFor(st.scanned, headroom, base); st.percent != want || want >= 200 {
		t.Fatalf("GC percent %d for %d B scanned, want %d (under 200)", st.percent, st.scanned, want)
	}

	stop()
	stop() // a second stop does nothing
	if p := readGC().percent; p != base {
		t.Fatalf("GC percent %d after stop, want %d", p, base)
	}
	runtime.GC()
	time.Sleep(10 * time.Millisecond)
	if p := readGC().percent; p != base {
		t.Fatalf("GC percent %d after a collection once stopped, want %d: the tuner still runs", p, base)
	}
}

// TestTuneGCOff: with the collector off (GOGC=off) the tuner leaves it off.
func TestTuneGCOff(t *testing.T) {
	base := debug.SetGCPercent(-1)
	defer debug.SetGCPercent(base)
	stop := Tune(64 << 20)
	defer stop()
	runtime.GC()
	time.Sleep(10 * time.Millisecond)
	if p := readGC().percent; p != -1 {
		t.Fatalf("GC percent %d after a collection, want -1 (off)", p)
	}
}
