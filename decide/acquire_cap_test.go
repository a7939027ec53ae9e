package decide

import (
	"context"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/adaptive"
	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/forward"
	"github.com/ringlimit/ringlimit/policy"
)

// TestRenewCappedByLayer: a renew asking 30m of a lease of /export (max
// 5m) lives 5m; of the joined leases of /export and global (max 1m), 1m
// (the shorter). An inline acquire's lease renews for the 30m asked.
func TestRenewCappedByLayer(t *testing.T) {
	f := newLeaseFixture(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		want time.Duration
	}{{"mixed", 5 * time.Minute}, {"two", time.Minute}} {
		a := f.decide(t, OpAcquire, tc.name, 0)
		if !a.Allowed {
			t.Fatalf("acquire %s: %+v", tc.name, a)
		}
		if r, err := f.d.Renew(ctx, a.Lease, 30*time.Minute); err != nil || r.ExpiresIn != tc.want {
			t.Fatalf("renew of %s asking 30m: %+v, %v; want ExpiresIn %v", tc.name, r, err, tc.want)
		}
	}
	p := GetPlan(OpAcquire)
	defer p.Release()
	p.AddAcquire(forward.Acquire{Key: "jobs", Limit: limit(t, bucket.LimitSpec{Algorithm: "concurrency", Limit: 2}), Mode: bucket.FailClosed,
		TTL: 30 * time.Second})
	answers, err := f.d.Decide(ctx, "test", p)
	if err != nil || !answers[0].Allowed {
		t.Fatalf("inline acquire: %+v, %v", answers, err)
	}
	if r, err := f.d.Renew(ctx, answers[0].Lease, 30*time.Minute); err != nil || r.ExpiresIn != 30*time.Minute {
		t.Fatalf("renew of an inline lease asking 30m: %+v, %v; want ExpiresIn 30m", r, err)
	}
}

// TestAcquireAdaptiveLayer: a concurrency layer of 5 whose adaptive limit
// starts at 2 grants exactly 2, each answering limit 2: the layer's spec
// reaches the router.
func TestAcquireAdaptiveLayer(t *testing.T) {
	router := newRouter(t)
	spec := adaptive.Spec{Algorithm: adaptive.AIMD, Min: 1, Max: 5, Initial: 2, Window: time.Second, MinSamples: 3, Backoff: 0.75}
	layer := policy.Check{Key: "p|route|adaptive", Limit: limit(t, bucket.LimitSpec{Algorithm: "concurrency", Limit: 5}), Cost: 1,
		Scope: "route:/export", FailureMode: bucket.FailClosed, LeaseTTL: time.Minute, MaxLeaseTTL: 5 * time.Minute, Adaptive: &spec}
	d, err := New(Config{Checker: router, Policy: &fakePolicy{layers: map[string][]policy.Check{"adaptive": {layer}}}, Leaser: router})
	if err != nil {
		t.Fatal(err)
	}
	f := &leaseFixture{d: d, router: router}
	granted := 0
	for range 4 {
		a := f.decide(t, OpAcquire, "adaptive", 0)
		if a.Limit != 2 {
			t.Fatalf("acquire: %+v, want limit 2", a)
		}
		if a.Allowed {
			granted++
		}
	}
	if granted != 2 {
		t.Fatalf("%d of 4 acquires granted, want 2", granted)
	}
}
