package forward

import (
	"context"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/adaptive"
	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
)

// TestAdaptiveConcurrency: an adaptive concurrency limit (AIMD from 4
// within [2, 10], 3 samples a window, cuts × 0.51) on a ring of one. The
// owner grants exactly the current limit; four releases with errors cut
// it to 2 once their window closes; a window of three healthy releases
// that ran 2 at once raises it to 3. Every answer gives the current limit.
func TestAdaptiveConcurrency(t *testing.T) {
	clk := testkit.NewClock(0)
	a := startNode(t, "A", clk, nil)
	setMembers(membersOf(a), a)
	spec := &adaptive.Spec{Algorithm: adaptive.AIMD, Min: 2, Max: 10, Initial: 4, Window: time.Second, MinSamples: 3, Backoff: 0.51}
	acq := Acquire{Key: "c|adaptive", Limit: concurrency(4), Mode: bucket.FailClosed, TTL: time.Minute,
		Adaptive: spec, AdaptiveScope: "route:/slow"}
	ctx := context.Background()
	take := func(n int, wantLimit int64) []string {
		t.Helper()
		var got []string
		for range n {
			res, err := a.r.Acquire(ctx, acq)
			if err != nil || res.Limit != wantLimit || res.Degraded {
				t.Fatalf("acquire: %+v, %v; want limit %d", res, err, wantLimit)
			}
			if res.Allowed {
				got = append(got, res.Lease)
			}
		}
		return got
	}
	release := func(ids []string, o Outcome) {
		t.Helper()
		for _, id := range ids {
			if res, err := a.r.Release(ctx, id, o, 30*time.Millisecond); err != nil || !res.Released {
				t.Fatalf("release %s: %+v, %v", id, res, err)
			}
		}
	}

	leases := take(6, 4)
	if len(leases) != 4 {
		t.Fatalf("window 0: %d of 6 acquires granted, want 4", len(leases))
	}
	release(leases, OutcomeError)
	clk.Advance(time.Second)
	leases = take(4, 2)
	if len(leases) != 2 {
		t.Fatalf("after a window of errors: %d of 4 acquires granted, want 2", len(leases))
	}
	release(leases, OutcomeOK)
	release(take(1, 2), OutcomeOK) // three healthy samples, at most 2 in flight: not app-limited
	clk.Advance(time.Second)
	if leases = take(5, 3); len(leases) != 3 {
		t.Fatalf("after a healthy window: %d of 5 acquires granted, want 3", len(leases))
	}
	if got := a.r.AdaptiveScopes(); len(got) != 1 || got[0] != (AdaptiveScope{Scope: "route:/slow", Limit: 3}) {
		t.Fatalf("scopes %v, want route:/slow at 3", got)
	}
	wantMetric(t, a.reg, "ringlimit_adaptive_changes_total", "scope", "route:/slow", "direction", "down", 1)
	wantMetric(t, a.reg, "ringlimit_adaptive_changes_total", "scope", "route:/slow", "direction", "up", 1)
	wantMetric(t, a.reg, "ringlimit_adaptive_limit", "scope", "route:/slow", 3)
}

// TestAdaptiveConcurrencyReport: a report of a concurrency key counts the
// leases in flight: three healthy reports while 4 of 4 slots are held
// raise the limit to 5 (a window that used the limit is not app-limited).
func TestAdaptiveConcurrencyReport(t *testing.T) {
	clk := testkit.NewClock(0)
	a := startNode(t, "A", clk, nil)
	setMembers(membersOf(a), a)
	spec := &adaptive.Spec{Algorithm: adaptive.AIMD, Min: 2, Max: 10, Initial: 4, Window: time.Second, MinSamples: 3}
	acq := Acquire{Key: "c|reported", Limit: concurrency(4), Mode: bucket.FailClosed, TTL: time.Minute, Adaptive: spec}
	ctx := context.Background()
	for range 4 {
		if res, err := a.r.Acquire(ctx, acq); err != nil || !res.Allowed {
			t.Fatalf("acquire: %+v, %v", res, err)
		}
	}
	for range 3 {
		if res, err := a.r.Report(ctx, acq.Key, acq.Limit, spec, OutcomeOK, 20*time.Millisecond); err != nil || res.Limit != 4 || res.Owner != "A" {
			t.Fatalf("report: %+v, %v", res, err)
		}
	}
	clk.Advance(time.Second)
	if res, err := a.r.Acquire(ctx, acq); err != nil || !res.Allowed || res.Limit != 5 || res.InFlight != 5 {
		t.Fatalf("acquire after the window: %+v, %v; want the fifth slot of 5", res, err)
	}
}
