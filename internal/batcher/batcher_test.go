package batcher

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ringlimit/ringlimit/internal/deadline"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recorder is a flush that holds each batch until the test releases it, and
// records what each batch carried.
type recorder struct {
	mu      sync.Mutex
	batches [][]int // the items of each batch, in order
	held    chan func()
}

func newRecorder() *recorder { return &recorder{held: make(chan func(), 16)} }

func (r *recorder) flush(calls []*Call[int, int], n int, release func()) {
	var items []int
	for _, c := range calls {
		items = append(items, c.In...)
	}
	r.mu.Lock()
	r.batches = append(r.batches, items)
	r.mu.Unlock()
	r.held <- func() {
		for _, c := range calls {
			for i, v := range c.In {
				c.Out[i] = v * 10
			}
			c.From = "owner"
			c.Finish(nil)
		}
		release()
	}
}

func (r *recorder) seen() [][]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][]int(nil), r.batches...)
}

func do(b *Batcher[int, int], ctx context.Context, in ...int) (chan error, *Call[int, int]) {
	c := NewCall(ctx, in, make([]int, len(in)))
	errc := make(chan error, 1)
	go func() { errc <- b.Do(c) }()
	return errc, c
}

// waitQueued waits until n calls wait in b's queue.
func waitQueued(t *testing.T, b *Batcher[int, int], n int) {
	t.Helper()
	testkit.Eventually(t, 5*time.Second, fmt.Sprintf("%d calls queued", n), func() bool { return len(b.queue) >= n })
}

func TestCallsWaitingLeaveTogether(t *testing.T) {
	r := newRecorder()
	b, err := New(Config{MaxBatch: 5, MaxInFlight: 1}, r.flush, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	first, _ := do(b, context.Background(), 1)
	release := <-r.held // the one slot is busy: the next calls pile up
	e2, c2 := do(b, context.Background(), 2, 3)
	waitQueued(t, b, 1)
	e3, _ := do(b, context.Background(), 4, 5)
	waitQueued(t, b, 2)
	e4, _ := do(b, context.Background(), 6, 7) // does not fit with the two before it
	waitQueued(t, b, 3)
	release()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	(<-r.held)()
	for _, e := range []chan error{e2, e3} {
		if err := <-e; err != nil {
			t.Fatal(err)
		}
	}
	(<-r.held)()
	if err := <-e4; err != nil {
		t.Fatal(err)
	}
	got := r.seen()
	want := [][]int{{1}, {2, 3, 4, 5}, {6, 7}}
	if len(got) != len(want) {
		t.Fatalf("batches %v, want %v", got, want)
	}
	for i := range want {
		if len(got[i]) != len(want[i]) {
			t.Fatalf("batches %v, want %v", got, want)
		}
		for j := range want[i] {
			if got[i][j] != want[i][j] {
				t.Fatalf("batches %v, want %v", got, want)
			}
		}
	}
	if c2.Out[0] != 20 || c2.Out[1] != 30 || c2.From != "owner" {
		t.Fatalf("call 2 answered %v from %q, want [20 30] from owner", c2.Out, c2.From)
	}
}

func TestAbandonedCallIsNeverSent(t *testing.T) {
	r := newRecorder()
	abandoned := 0
	var mu sync.Mutex
	b, err := New(Config{MaxBatch: 10}, r.flush, func(n int) { mu.Lock(); abandoned += n; mu.Unlock() })
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	first, _ := do(b, context.Background(), 1)
	release := <-r.held
	ctx, cancel := context.WithCancel(context.Background())
	gaveUp, _ := do(b, ctx, 2, 3)
	waitQueued(t, b, 1)
	kept, _ := do(b, context.Background(), 4)
	waitQueued(t, b, 2)
	cancel()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Fatalf("abandoned call: %v, want context.Canceled", err)
	}
	release()
	<-first
	(<-r.held)()
	if err := <-kept; err != nil {
		t.Fatal(err)
	}
	got := r.seen()
	if len(got) != 2 || len(got[1]) != 1 || got[1][0] != 4 {
		t.Fatalf("batches %v, want [[1] [4]]: the abandoned call's items must not be sent", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if abandoned != 2 {
		t.Fatalf("abandoned items counted %d, want 2", abandoned)
	}
}

// A call under a shared deadline (internal/deadline), whose caller gave up
// while it waited, is never sent either, though its context is not done.
func TestAbandonedBoundCallIsNeverSent(t *testing.T) {
	r := newRecorder()
	b, err := New(Config{MaxBatch: 10}, r.flush, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	first, _ := do(b, context.Background(), 1)
	release := <-r.held
	caller, cancel := context.WithCancel(context.Background())
	gaveUp, _ := do(b, deadline.New(time.Hour).Bound(caller), 2, 3)
	waitQueued(t, b, 1)
	kept, _ := do(b, context.Background(), 4)
	waitQueued(t, b, 2)
	cancel()
	release()
	<-first
	select {
	case err := <-gaveUp:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("abandoned call: %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		(<-r.held)() // it was sent: answer it, so that nothing is left waiting
		t.Fatalf("abandoned call sent in %v, want it failed unsent", r.seen())
	}
	(<-r.held)()
	if err := <-kept; err != nil {
		t.Fatal(err)
	}
	if got := r.seen(); len(got) != 2 || len(got[1]) != 1 || got[1][0] != 4 {
		t.Fatalf("batches %v, want [[1] [4]]: the abandoned call's items must not be sent", got)
	}
}

func TestCloseFailsQueuedCalls(t *testing.T) {
	r := newRecorder()
	b, err := New(Config{MaxBatch: 10}, r.flush, nil)
	if err != nil {
		t.Fatal(err)
	}
	first, _ := do(b, context.Background(), 1)
	release := <-r.held
	queued, _ := do(b, context.Background(), 2)
	waitQueued(t, b, 1)
	b.Close()
	b.Close() // twice is fine
	if err := <-queued; !errors.Is(err, ErrClosed) {
		t.Fatalf("queued call after Close: %v, want ErrClosed", err)
	}
	if err := b.Do(NewCall(context.Background(), []int{3}, make([]int, 1))); !errors.Is(err, ErrClosed) {
		t.Fatalf("Do after Close: %v, want ErrClosed", err)
	}
	release() // the batch already flushed is still the flush's to answer
	if err := <-first; err != nil && !errors.Is(err, ErrClosed) {
		t.Fatalf("flushed call: %v", err)
	}
	if got := r.seen(); len(got) != 1 {
		t.Fatalf("batches %v, want only the first", got)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, ""},
		{Config{MaxBatch: -1}, "MaxBatch"},
		{Config{MaxInFlight: -1}, "MaxInFlight"},
		{Config{Queue: -1}, "Queue"},
		{Config{Yields: -1}, "Yields"},
	} {
		err := tc.cfg.Validate()
		if (err == nil) != (tc.want == "") || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v, want an error naming %q", tc.cfg, err, tc.want)
		}
	}
	if _, err := New[int, int](Config{}, nil, nil); err == nil {
		t.Error("New with a nil flush succeeded")
	}
}

// TestNoWaitFailsWhenFull fills the queue behind a batch that holds the
// only slot and checks that the next call fails with ErrFull at once, is
// never sent, and that the queued calls are still answered.
func TestNoWaitFailsWhenFull(t *testing.T) {
	r := newRecorder()
	b, err := New(Config{MaxBatch: 10, MaxInFlight: 1, Queue: 2, NoWait: true}, r.flush, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	first, _ := do(b, context.Background(), 1)
	release := <-r.held // the one slot is busy
	e2, _ := do(b, context.Background(), 2)
	waitQueued(t, b, 1)
	e3, _ := do(b, context.Background(), 3)
	waitQueued(t, b, 2)
	start := time.Now()
	err = b.Do(NewCall(context.Background(), []int{4}, make([]int, 1)))
	if took := time.Since(start); !errors.Is(err, ErrFull) || took > 100*time.Millisecond {
		t.Fatalf("Do on a full queue = %v after %v, want ErrFull at once", err, took)
	}
	release()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	(<-r.held)()
	for _, e := range []chan error{e2, e3} {
		if err := <-e; err != nil {
			t.Fatal(err)
		}
	}
	got := r.seen()
	if len(got) != 2 || len(got[1]) != 2 || got[1][0] != 2 || got[1][1] != 3 {
		t.Fatalf("batches %v, want [[1] [2 3]]: the refused call must not be sent", got)
	}
}

// TestYieldsGatherTheCallsReadyToQueue makes the destination busy (a batch
// of two calls) or leaves it idle (a batch of one), then starts ten callers
// on one P, all of them ready to run before the loop runs again. With
// Yields, at a busy destination, the loop lets each of them queue before
// it gathers, and the ten leave in one batch; without Yields, or at an
// idle destination, the first call to arrive leaves before the other nine
// have run.
func TestYieldsGatherTheCallsReadyToQueue(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	for _, tc := range []struct {
		yields int
		busy   bool
	}{{3, true}, {0, true}, {3, false}} {
		yields, gathered := tc.yields, tc.yields > 0 && tc.busy
		if !gathered && raceEnabled {
			continue // the race detector shuffles which ready goroutine runs next
		}
		for rep := range 20 {
			r := newRecorder()
			b, err := New(Config{Yields: yields}, r.flush, nil)
			if err != nil {
				t.Fatal(err)
			}
			e0, _ := do(b, context.Background(), 0)
			release := <-r.held // holds the slot while two calls queue
			errs := []chan error{e0}
			for i := range 1 + btoi(tc.busy) {
				e, _ := do(b, context.Background(), 1+i)
				errs = append(errs, e)
				waitQueued(t, b, 1+i)
			}
			release()
			(<-r.held)() // 1, or 1 and 2 together: the destination is busy
			for _, e := range errs {
				if err := <-e; err != nil {
					t.Fatal(err)
				}
			}
			var wg sync.WaitGroup
			for i := range 10 {
				wg.Go(func() {
					if err := b.Do(NewCall(context.Background(), []int{10 + i}, make([]int, 1))); err != nil {
						t.Errorf("call %d: %v", 10+i, err)
					}
				})
			}
			for sent := 0; sent < 10; {
				(<-r.held)()
				got := r.seen()
				sent += len(got[len(got)-1])
			}
			wg.Wait()
			b.Close()
			got := r.seen()
			if len(got[1]) != 1+btoi(tc.busy) {
				t.Fatalf("%+v, run %d: batches %v, want the second of %d calls", tc, rep, got, 1+btoi(tc.busy))
			}
			if one := len(got) == 3; one != gathered {
				t.Fatalf("%+v, run %d: batches %v; the last ten in one batch: %v, want %v", tc, rep, got, one, gathered)
			}
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
