package deadline

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type key struct{}

// A request with no deadline of its caller's ends between the timeout and
// the timeout plus a tick after it started, with DeadlineExceeded, and sees
// its caller's values.
func TestBoundEndsAfterTimeout(t *testing.T) {
	const timeout = 128 * time.Millisecond // a tick of 2 ms
	s := New(timeout)
	start := time.Now()
	ctx := s.Bound(context.WithValue(context.Background(), key{}, "v"))
	if v := ctx.Value(key{}); v != "v" {
		t.Errorf("Value = %v, want the caller's v", v)
	}
	d, ok := ctx.Deadline()
	if left := d.Sub(start); !ok || left < timeout || left > timeout+2*time.Millisecond {
		t.Errorf("deadline %v after the start (%v), want from %v to %v", left, ok, timeout, timeout+2*time.Millisecond)
	}
	if err := ctx.Err(); err != nil {
		t.Fatalf("Err before the deadline = %v", err)
	}
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("not done 10s after a deadline of 128ms")
	}
	if took := time.Since(start); took < timeout {
		t.Errorf("done after %v, before the timeout %v", took, timeout)
	}
	if err := ctx.Err(); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Err = %v, want DeadlineExceeded", err)
	}
	if err := context.Cause(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Cause = %v, want DeadlineExceeded", err)
	}
}

// A caller whose deadline comes within the timeout gets its own context
// back; one whose deadline is later gets the sooner of the two.
func TestBoundKeepsASoonerDeadline(t *testing.T) {
	s := New(time.Second)
	sooner, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if ctx := s.Bound(sooner); ctx != sooner {
		t.Error("caller deadline in 100ms: wrapped, want the caller's context")
	}
	later, cancelLater := context.WithTimeout(context.Background(), time.Hour)
	defer cancelLater()
	ctx := s.Bound(later)
	if d, _ := ctx.Deadline(); time.Until(d) > time.Second+time.Second/64 {
		t.Errorf("caller deadline in 1h: deadline in %v, want within a second and a tick", time.Until(d))
	}
	// A caller deadline inside the tick is the one reported.
	within, cancelWithin := context.WithTimeout(context.Background(), time.Second+time.Millisecond)
	defer cancelWithin()
	ctx = s.Bound(within)
	own, _ := within.Deadline()
	if d, _ := ctx.Deadline(); d.After(own) {
		t.Errorf("caller deadline inside the tick: deadline %v after the caller's", d.Sub(own))
	}
}

// The requests of one tick share one deadline: one timer, not one each.
func TestBoundSharesATick(t *testing.T) {
	s := New(64 * time.Second) // a tick of a second
	for range 3 {              // a tick may turn between two calls; not three times running
		a, b := s.Bound(context.Background()), s.Bound(context.Background())
		if a.Done() == b.Done() {
			return
		}
	}
	t.Fatal("three pairs of requests made within microseconds had deadlines of their own")
}

// A caller that gives up does not end its request's context, but Err
// reports it, through contexts derived from it too; a context derived from
// a bound one ends with the shared deadline, with no goroutine of its own.
func TestErrSeesTheCaller(t *testing.T) {
	s := New(64 * time.Millisecond)
	caller, cancel := context.WithCancel(context.Background())
	ctx := s.Bound(caller)
	derived := context.WithValue(ctx, key{}, 1)
	if err := Err(derived); err != nil {
		t.Fatalf("Err before anything ended = %v", err)
	}
	cancel()
	if err := ctx.Err(); err != nil {
		t.Errorf("ctx.Err after the caller gave up = %v, want nil (the shared deadline has not passed)", err)
	}
	for _, c := range []context.Context{ctx, derived} {
		if err := Err(c); !errors.Is(err, context.Canceled) {
			t.Errorf("Err after the caller gave up = %v, want Canceled", err)
		}
	}
	if err := Err(caller); !errors.Is(err, context.Canceled) {
		t.Errorf("Err of a plain context = %v, want its own", err)
	}

	goroutines := runtime.NumGoroutine()
	ctx = s.Bound(context.Background())
	children := make([]context.Context, 100)
	for i := range children {
		var stop context.CancelFunc
		children[i], stop = context.WithCancel(ctx)
		defer stop()
	}
	if n := runtime.NumGoroutine(); n > goroutines {
		t.Errorf("%d goroutines after deriving 100 contexts, %d before", n, goroutines)
	}
	for _, c := range children {
		select {
		case <-c.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("a derived context not done 10s after a deadline of 64ms")
		}
	}
}
