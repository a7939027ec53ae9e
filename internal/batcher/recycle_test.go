package batcher

import (
	"context"
	"errors"
	"testing"
)

// answerAll is a flush that answers every call at once: each item times 10.
func answerAll(calls []*Call[int, int], _ int, release func()) {
	for _, c := range calls {
		for i, v := range c.In {
			c.Out[i] = v * 10
		}
		c.Finish(nil)
	}
	release()
}

// TestRecycleReusesAnsweredCalls: calls taken back after their answer are
// handed out again, and each still carries its own items and results.
func TestRecycleReusesAnsweredCalls(t *testing.T) {
	b, err := New(Config{}, answerAll, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	seen := map[*Call[int, int]]bool{}
	for i := range 200 {
		c := b.Call(context.Background(), []int{i}, make([]int, 1))
		if err := b.Do(c); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if c.Out[0] != i*10 {
			t.Fatalf("call %d answered %d, want %d", i, c.Out[0], i*10)
		}
		seen[c] = true
		b.Recycle(c)
		if c.In != nil || c.Out != nil || c.ctx != nil || c.err != nil || c.answered {
			t.Fatalf("call %d kept %+v after Recycle", i, c)
		}
	}
	// The race detector's sync.Pool drops a share of what it is given.
	if len(seen) == 200 || (!raceEnabled && len(seen) > 10) {
		t.Fatalf("%d distinct calls for 200 in turn: recycled calls are not handed out again", len(seen))
	}
}

// TestRecycleKeepsUnansweredCalls: a call whose caller left before its
// answer is still in a batch; Recycle must not hand it out again, and its
// late answer reaches nobody else's call.
func TestRecycleKeepsUnansweredCalls(t *testing.T) {
	r := newRecorder()
	b, err := New(Config{}, r.flush, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithCancel(context.Background())
	left := b.Call(ctx, []int{7}, make([]int, 1))
	errc := make(chan error, 1)
	go func() { errc <- b.Do(left) }()
	answer := <-r.held // left's batch is out
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Do of the call left behind: %v, want context.Canceled", err)
	}
	if b.Recycle(left) {
		t.Fatal("Recycle took back the call still in a batch")
	}
	for i := range 50 {
		c := b.Call(context.Background(), []int{i}, make([]int, 1))
		if c == left {
			t.Fatalf("call %d is the call still in a batch", i)
		}
		errc := make(chan error, 1)
		go func() { errc <- b.Do(c) }()
		if i == 0 {
			answer() // the late answer, while another call waits
		}
		(<-r.held)()
		if err := <-errc; err != nil || c.Out[0] != i*10 {
			t.Fatalf("call %d: %v, answered %d, want %d", i, err, c.Out[0], i*10)
		}
		if !b.Recycle(c) {
			t.Fatalf("Recycle did not take back answered call %d", i)
		}
	}
	if left.Out[0] != 70 {
		t.Fatalf("the call left behind was answered %d, want 70 in its own results", left.Out[0])
	}
}

// TestRecycleSavesAllocations: a recycled call costs its caller no
// allocation for the call and its signal.
func TestRecycleSavesAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's sync.Pool drops a share of what it is given")
	}
	b, err := New(Config{}, answerAll, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	in, out := []int{1}, make([]int, 1)
	fresh := testing.AllocsPerRun(200, func() {
		if err := b.Do(NewCall(context.Background(), in, out)); err != nil {
			t.Fatal(err)
		}
	})
	recycled := testing.AllocsPerRun(200, func() {
		c := b.Call(context.Background(), in, out)
		if err := b.Do(c); err != nil {
			t.Fatal(err)
		}
		b.Recycle(c)
	})
	if recycled > fresh-2 {
		t.Fatalf("%.1f allocations a recycled call, %.1f a new one: want at least 2 fewer", recycled, fresh)
	}
	t.Logf("allocations a call: %.1f new, %.1f recycled", fresh, recycled)
}
