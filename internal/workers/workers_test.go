package workers

import (
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestPoolReusesGoroutines: tasks run one after the other run on the one
// goroutine the first started.
func TestPoolReusesGoroutines(t *testing.T) {
	p := New(4)
	defer p.Stop()
	ids := map[uint64]bool{}
	for range 100 {
		done := make(chan uint64)
		p.Go(func() { done <- goid() })
		ids[<-done] = true
		waitIdle(t, p, 1)
	}
	if len(ids) != 1 || p.started != 1 {
		t.Fatalf("100 tasks one at a time ran on %d goroutines, %d started; want 1", len(ids), p.started)
	}
}

// TestPoolBound: with 8 tasks blocked on a pool of 3, 3 run and Go waits
// for the fourth until one returns; every task runs once.
func TestPoolBound(t *testing.T) {
	p := New(3)
	release := make(chan struct{})
	var running, most, ran atomic.Int32
	task := func() {
		n := running.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		<-release
		running.Add(-1)
		ran.Add(1)
	}
	for range 3 {
		p.Go(task)
	}
	queued := make(chan struct{})
	go func() {
		for range 5 {
			p.Go(task)
		}
		close(queued)
	}()
	select {
	case <-queued:
		t.Fatal("Go returned for a fourth task while 3 of 3 goroutines were busy")
	case <-time.After(50 * time.Millisecond): // a window for a wrong Go to return in, not a wait for a condition
	}
	close(release)
	<-queued
	p.Stop()
	if ran.Load() != 8 || most.Load() != 3 || p.started != 3 {
		t.Fatalf("ran %d tasks, at most %d at once, %d goroutines started; want 8, 3, 3", ran.Load(), most.Load(), p.started)
	}
}

// TestPoolStop: Stop waits for the tasks running, ends the idle
// goroutines (goleak checks), and a task given after it still runs.
func TestPoolStop(t *testing.T) {
	p := New(2)
	release := make(chan struct{})
	var done atomic.Bool
	p.Go(func() { <-release; done.Store(true) })
	p.Go(func() {})
	stopped := make(chan struct{})
	go func() { p.Stop(); close(stopped) }()
	select {
	case <-stopped:
		t.Fatal("Stop returned while a task was running")
	case <-time.After(50 * time.Millisecond): // a window for a wrong Stop to return in
	}
	close(release)
	<-stopped
	if !done.Load() {
		t.Fatal("Stop returned before the running task did")
	}
	var wg sync.WaitGroup
	wg.Add(1)
	p.Go(wg.Done)
	wg.Wait()
	p.Stop() // a second Stop returns
}

// waitIdle waits until n of p's goroutines wait for a task.
func waitIdle(t *testing.T, p *Pool, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		buf := make([]byte, 1<<20)
		idle := countIdle(string(buf[:runtime.Stack(buf, true)]))
		if idle >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of the pool's goroutines idle after 10s, want %d", idle, n)
		}
		runtime.Gosched()
	}
}

// countIdle counts, in a dump of every goroutine's stack, the pool
// goroutines waiting for a task.
func countIdle(dump string) int {
	n := 0
	for _, g := range strings.Split(dump, "\n\n") {
		if strings.Contains(g, "workers.(*Pool).work") && strings.Contains(strings.SplitN(g, "\n", 2)[0], "[select") {
			n++
		}
	}
	return n
}

// goid is the calling goroutine's id, from its stack's header.
func goid() uint64 {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	id, _ := strconv.ParseUint(strings.Fields(string(buf))[1], 10, 64)
	return id
}
