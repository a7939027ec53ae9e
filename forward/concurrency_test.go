package forward

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
)

func concurrency(n int64) bucket.Limit { return bucket.MustLimit(bucket.Concurrency, n, 0, 0) }

// acquireWave runs n acquires of key at once through the routers given
// in turn and returns the leases granted.
func acquireWave(t *testing.T, n int, a Acquire, via ...*Router) []string {
	t.Helper()
	var mu sync.Mutex
	var got []string
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			res, err := via[i%len(via)].Acquire(context.Background(), a)
			if err != nil {
				t.Errorf("acquire %d: %v", i, err)
				return
			}
			if res.Degraded {
				t.Errorf("acquire %d degraded: %+v", i, res)
			}
			if res.Allowed {
				if res.Lease == "" || res.Limit != a.Limit.Count() {
					t.Errorf("acquire %d: %+v", i, res)
				}
				mu.Lock()
				got = append(got, res.Lease)
				mu.Unlock()
			} else if res.RetryAfter < time.Millisecond {
				t.Errorf("refused acquire %d: retry after %v", i, res.RetryAfter)
			}
		})
	}
	wg.Wait()
	return got
}

// TestAcquireOneNode: a limit of 5 on a ring of one. 50 acquires at once:
// exactly 5 granted; 2 released: exactly 2 of a second wave of 50; a
// double release lowers the count once; the leases never released (2 s
// TTL) free all 5 slots 2 s later on the fake clock.
func TestAcquireOneNode(t *testing.T) {
	clk := testkit.NewClock(0)
	var released atomic.Int64
	a := startNode(t, "A", clk, func(c *nodeConfig) {
		c.OnRelease = func(key string, l bucket.Limit, o Outcome, latency time.Duration) {
			if key == "c|k" && l.Count() == 5 && o == OutcomeError && latency == 42*time.Millisecond {
				released.Add(1)
			}
		}
	})
	setMembers(membersOf(a), a)
	acq := Acquire{Key: "c|k", Limit: concurrency(5), Mode: bucket.FailClosed, TTL: 2 * time.Second}
	first := acquireWave(t, 50, acq, a.r)
	if len(first) != 5 || a.r.InFlight("c|k") != 5 {
		t.Fatalf("first wave: %d granted, %d in flight; want 5", len(first), a.r.InFlight("c|k"))
	}
	for _, id := range first[:2] {
		res, err := a.r.Release(context.Background(), id, OutcomeError, 42*time.Millisecond)
		if err != nil || !res.Released || res.Owner != "A" || res.Limit != 5 {
			t.Fatalf("release: %+v %v", res, err)
		}
	}
	res, err := a.r.Release(context.Background(), first[0], OutcomeOK, 0)
	if err != nil || res.Released || res.InFlight != 3 {
		t.Fatalf("second release: %+v %v, want released false and 3 in flight", res, err)
	}
	if n := released.Load(); n != 2 {
		t.Fatalf("OnRelease told of %d releases, want 2", n)
	}
	second := acquireWave(t, 50, acq, a.r)
	if len(second) != 2 || a.r.InFlight("c|k") != 5 {
		t.Fatalf("second wave: %d granted, %d in flight; want 2 and 5", len(second), a.r.InFlight("c|k"))
	}
	clk.Advance(2 * time.Second)
	if n := a.r.InFlight("c|k"); n != 0 {
		t.Fatalf("after the TTL: %d in flight, want 0", n)
	}
	third := acquireWave(t, 50, acq, a.r)
	if len(third) != 5 {
		t.Fatalf("after the TTL: %d granted, want 5", len(third))
	}
	wantMetric(t, a.reg, "ringlimit_leases_total", "op", "acquire", "result", "granted", 12)
	wantMetric(t, a.reg, "ringlimit_leases_total", "op", "acquire", "result", "refused", 138)
	wantMetric(t, a.reg, "ringlimit_leases_total", "op", "release", "result", "released", 2)
	wantMetric(t, a.reg, "ringlimit_leases_total", "op", "release", "result", "unknown", 1)
	wantMetric(t, a.reg, "ringlimit_leases_in_flight", 5)
}

// TestRenewAndRequestID: a renew moves the expiry on; a renew of an
// expired lease is ErrLeaseNotFound; an acquire repeating a live lease's
// request id gets that lease, not a second slot.
func TestRenewAndRequestID(t *testing.T) {
	clk := testkit.NewClock(0)
	a := startNode(t, "A", clk, nil)
	setMembers(membersOf(a), a)
	ctx := context.Background()
	acq := Acquire{Key: "c|k", Limit: concurrency(2), Mode: bucket.FailClosed, TTL: 2 * time.Second, RequestID: "req-1"}
	one, err := a.r.Acquire(ctx, acq)
	if err != nil || !one.Allowed || one.InFlight != 1 || one.ExpiresIn != 2*time.Second || one.Owner != "A" {
		t.Fatalf("acquire: %+v %v", one, err)
	}
	again, err := a.r.Acquire(ctx, acq)
	if err != nil || again.Lease != one.Lease || again.InFlight != 1 {
		t.Fatalf("repeated acquire: %+v %v, want lease %s and 1 in flight", again, err, one.Lease)
	}
	clk.Advance(time.Second)
	ren, err := a.r.Renew(ctx, one.Lease, 5*time.Second)
	if err != nil || !ren.Allowed || ren.ExpiresIn != 5*time.Second || ren.InFlight != 1 || ren.Limit != 2 {
		t.Fatalf("renew: %+v %v", ren, err)
	}
	clk.Advance(4 * time.Second) // 2 s after the first TTL would have ended
	if n := a.r.InFlight("c|k"); n != 1 {
		t.Fatalf("renewed lease: %d in flight, want 1", n)
	}
	clk.Advance(time.Second)
	if _, err := a.r.Renew(ctx, one.Lease, 5*time.Second); !errors.Is(err, ErrLeaseNotFound) {
		t.Fatalf("renew of an expired lease: %v", err)
	}
	wantMetric(t, a.reg, "ringlimit_leases_total", "op", "renew", "result", "not_found", 1)
}

// TestAcquireBadInput: bad input is ErrInvalid and changes nothing; a
// check that names a concurrency limit is refused whole.
func TestAcquireBadInput(t *testing.T) {
	clk := testkit.NewClock(0)
	a := startNode(t, "A", clk, nil)
	setMembers(membersOf(a), a)
	ctx := context.Background()
	ok := Acquire{Key: "c|k", Limit: concurrency(2), Mode: bucket.FailClosed, TTL: time.Second}
	for name, tweak := range map[string]func(*Acquire){
		"token bucket":    func(a *Acquire) { a.Limit = hourly(2) },
		"no limit":        func(a *Acquire) { a.Limit = bucket.Limit{} },
		"local":           func(a *Acquire) { a.Mode = bucket.Local },
		"ttl too short":   func(a *Acquire) { a.TTL = 999 * time.Millisecond },
		"ttl too long":    func(a *Acquire) { a.TTL = time.Hour + time.Millisecond },
		"request id long": func(a *Acquire) { a.RequestID = strings.Repeat("x", bucket.MaxRequestIDLen+1) },
		"empty key":       func(a *Acquire) { a.Key = "" },
	} {
		bad := ok
		tweak(&bad)
		if _, err := a.r.Acquire(ctx, bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if _, err := a.r.Renew(ctx, "l1.nope", time.Second); !errors.Is(err, ErrInvalid) {
		t.Errorf("renew of a malformed id: %v", err)
	}
	if _, err := a.r.Release(ctx, "r1.Y3xr.AAAAAAAAAAAAAAAA", OutcomeOK, 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("release of a reservation id: %v", err)
	}
	lease, err := a.r.Acquire(ctx, ok)
	if err != nil || !lease.Allowed {
		t.Fatalf("acquire: %+v %v", lease, err)
	}
	if _, err := a.r.Renew(ctx, lease.Lease, 2*time.Hour); !errors.Is(err, ErrInvalid) {
		t.Errorf("renew for 2h: %v", err)
	}
	if _, err := a.r.Release(ctx, lease.Lease, Outcome(3), 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("release with outcome 3: %v", err)
	}
	out := make([]Result, 2)
	err = a.r.Check(ctx, []Check{{Key: "i|k", Limit: hourly(5), Cost: 1}, {Key: "c|k", Limit: concurrency(2), Cost: 1}}, out)
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "checks[1].limit.algorithm") {
		t.Fatalf("check of a concurrency limit: %v", err)
	}
	if a.store.Len() != 0 || a.r.InFlight("c|k") != 1 {
		t.Fatalf("after bad input: %d keys stored, %d in flight; want 0 and 1", a.store.Len(), a.r.InFlight("c|k"))
	}
}

func wantMetric(t *testing.T, reg prometheus.Gatherer, name string, args ...any) {
	t.Helper()
	labels := make([]string, 0, len(args)-1)
	for _, a := range args[:len(args)-1] {
		labels = append(labels, a.(string))
	}
	want := float64(args[len(args)-1].(int))
	if got := testkit.Metric(t, reg, name, labels...); got != want {
		t.Errorf("%s%v = %v, want %v", name, labels, got, want)
	}
}
