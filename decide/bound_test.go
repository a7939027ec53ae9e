package decide

import (
	"context"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/forward"
)

// nopChecker admits every check, decided by nobody.
type nopChecker struct{}

func (nopChecker) Check(_ context.Context, checks []forward.Check, out []forward.Result) error {
	for i := range checks {
		out[i] = forward.Result{}
		out[i].Allowed = true
	}
	return nil
}

// TestBoundDeadline: a request's checks run under the server's deadline
// (Config.CheckTimeout) unless the caller's ends sooner, which then stands as is
// and costs no allocation.
func TestBoundDeadline(t *testing.T) {
	a, err := New(Config{Checker: nopChecker{}, CheckTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	ctx := a.Bound(context.Background())
	d, ok := ctx.Deadline()
	// A 64th of the timeout is the tick its deadline is rounded up to.
	if left := d.Sub(start); !ok || left < 2*time.Second || left > 2*time.Second+2*time.Second/64 {
		t.Errorf("no caller deadline: deadline in %v (%v), want from 2s to 2s and a 64th", left, ok)
	}
	later, cancelLater := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelLater()
	ctx = a.Bound(later)
	d, _ = ctx.Deadline()
	if left := time.Until(d); ctx == later || left > 2*time.Second+2*time.Second/64 {
		t.Errorf("caller deadline in 10s: deadline in %v, want within 2s and a 64th", left)
	}
	sooner, cancelSooner := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancelSooner()
	if ctx := a.Bound(sooner); ctx != sooner {
		t.Error("caller deadline in 50ms: wrapped, want the caller's context as is")
	}
	if allocs := testing.AllocsPerRun(100, func() { a.Bound(sooner) }); allocs != 0 {
		t.Errorf("caller deadline sooner: %v allocations, want 0", allocs)
	}
	// No deadline of the caller's: one allocation, the context itself;
	// the timer is the tick's.
	if allocs := testing.AllocsPerRun(100, func() { a.Bound(later) }); allocs > 1 {
		t.Errorf("caller deadline later: %v allocations, want at most 1", allocs)
	}
	off, err := New(Config{Checker: nopChecker{}})
	if err != nil {
		t.Fatal(err)
	}
	if ctx := off.Bound(later); ctx != later {
		t.Error("CheckTimeout 0: wrapped, want the caller's context as is")
	}
}
