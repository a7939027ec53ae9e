package main

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
// grows again. The GC tuner keeps at least a fixed headroom of allocation
// between collections: after each collection it sets the GC percent so that
// the next one comes after max(GOGC% of the live heap, headroom) more bytes.
// A node with a large live heap behaves as with GOGC alone; a small one
// grows to about live + headroom before it collects.

// gcTuning is the process's tuner: the GC setting is per process, so with
// several nodes in one process the first one's --gc-headroom applies.
var gcTuning struct {
	sync.Mutex
	t *gcTuner
}

type gcTuner struct {
	mu       sync.Mutex
	headroom uint64
	base     int // the GC percent before the tuner (GOGC), restored by stop
	stopped  bool
	sample   []metrics.Sample
}

// tuneGC starts the process's GC tuner for headroom bytes and returns the
// function that stops it and restores the GC percent. It does nothing when
// headroom is 0, when the collector is off (GOGC=off), or when a tuner is
// already running in this process.
func tuneGC(headroom uint64) (stop func()) {
	gcTuning.Lock()
	defer gcTuning.Unlock()
	base := currentGCPercent()
	if headroom == 0 || base < 0 || gcTuning.t != nil {
		return func() {}
	}
	t := &gcTuner{headroom: headroom, base: base, sample: []metrics.Sample{{Name: "/gc/heap/live:bytes"}}}
	gcTuning.t = t
	t.arm()
	return func() {
		t.mu.Lock()
		t.stopped = true
		debug.SetGCPercent(t.base)
		t.mu.Unlock()
		gcTuning.Lock()
		gcTuning.t = nil
		gcTuning.Unlock()
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
// the heap that collection found live, and arms itself for the one after.
func (t *gcTuner) tune() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	metrics.Read(t.sample)
	debug.SetGCPercent(gcPercentFor(t.sample[0].Value.Uint64(), t.headroom, t.base))
	t.arm()
}

// maxGCPercent bounds the percent for a nearly empty heap.
const maxGCPercent = 1_000_000

// gcPercentFor is the GC percent that lets the heap grow by at least
// headroom bytes, and by at least base percent, over a live heap of live
// bytes before the next collection.
func gcPercentFor(live, headroom uint64, base int) int {
	if live == 0 {
		live = 1
	}
	p := min((headroom*100+live-1)/live, maxGCPercent)
	return max(base, int(p))
}

// currentGCPercent is the collector's percent now (GOGC, or as last set);
// negative when it is off.
func currentGCPercent() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int(int64(s[0].Value.Uint64())) // the runtime's int32, sign-extended
}
