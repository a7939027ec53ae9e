// Package gctune keeps a fixed headroom of allocation between garbage
// collections (cmd/node's --gc-headroom). The GC percent belongs to the
// process: only a main package calls Tune, once.
package gctune

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// A node's live heap is small unless it holds many keys, while every check
// allocates in grpc-go. With Go's default (GOGC=100) a node with a few MiB
// live collects every few MiB allocated: ten times a second under load, each
// cycle also shrinking the stacks of idle gRPC workers that the next call
// grows again. The GC tuner keeps about a fixed headroom of allocation
// between collections: after each collection it sets the GC percent so that
// the next one comes after max(GOGC% of the heap, headroom) more bytes. A
// node with a large live heap behaves as with GOGC alone.

// gcTuner sets the GC percent after each collection. tune runs on the
// runtime's cleanup goroutine, one call at a time (one sentinel is armed at
// a time); mu orders it against stop.
type gcTuner struct {
	mu       sync.Mutex
	headroom uint64
	base     int // the GC percent before the tuner (GOGC), restored by stop
	stopped  bool
	sample   []metrics.Sample
}

// Tune starts tuning the garbage collector for headroom bytes and returns
// the function that stops it and restores the GC percent (safe to call more
// than once). The GC percent belongs to the process, so only main calls it,
// once. It does nothing when headroom is 0 or the percent is 0 or off
// (GOGC=0, GOGC=off).
func Tune(headroom uint64) (stop func()) {
	base := currentGCPercent()
	if headroom == 0 || base <= 0 {
		return func() {}
	}
	t := &gcTuner{headroom: headroom, base: base, sample: []metrics.Sample{
		{Name: "/gc/heap/live:bytes"}, {Name: "/gc/scan/stack:bytes"}, {Name: "/gc/scan/globals:bytes"}}}
	t.arm()
	var once sync.Once
	return func() {
		once.Do(func() {
			t.mu.Lock()
			defer t.mu.Unlock()
			t.stopped = true
			debug.SetGCPercent(t.base)
		})
	}
}

// gcSentinel is garbage from the moment it is made; its cleanup runs after
// the next collection that finds it. It holds a pointer so that the tiny
// allocator, which batches small pointer-free objects, does not keep it
// alive beside others.
type gcSentinel struct{ _ *byte }

func (t *gcTuner) arm() {
	runtime.AddCleanup(&gcSentinel{}, func(t *gcTuner) { t.tune() }, t)
}

// tune runs after a collection: it sets the percent for the next one from
// what that collection found, and arms itself for the one after.
func (t *gcTuner) tune() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	metrics.Read(t.sample)
	scanned := t.sample[0].Value.Uint64() + t.sample[1].Value.Uint64() + t.sample[2].Value.Uint64()
	debug.SetGCPercent(gcPercentFor(scanned, t.headroom, t.base))
	t.arm()
}

// runtimeHeapMinimum is the Go runtime's smallest heap goal at GOGC=100.
// The runtime scales it with the percent (4 MiB × percent / 100), so a
// percent computed over less than this would set a minimum above live +
// headroom.
const runtimeHeapMinimum = 4 << 20

// gcPercentFor is the GC percent that makes the next collection come after
// about headroom more bytes of heap, and after at least base percent.
// scanned is what the runtime applies the percent to: the live heap plus
// the stacks and globals it scans. The runtime's goal is then live +
// scanned × percent / 100 = live + headroom, or, for less than 4 MiB
// scanned, between headroom and live + headroom.
func gcPercentFor(scanned, headroom uint64, base int) int {
	scanned = max(scanned, runtimeHeapMinimum)
	return max(base, int((headroom*100+scanned-1)/scanned))
}

// currentGCPercent is the collector's percent now (GOGC, or as last set);
// negative when it is off.
func currentGCPercent() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int(int64(s[0].Value.Uint64())) // the runtime's int32, sign-extended
}
