package decide

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/forward"
	"github.com/ringlimit/ringlimit/policy"
)

// leaseFixture is a Decider on one real router with a policy of a tier of
// 3 (rate) and two concurrency layers: /export (2 in flight) and, for
// "two", also a global ceiling of 3 in flight.
type leaseFixture struct {
	d      *Decider
	router *forward.Router
	tier   policy.Check
}

func newLeaseFixture(t *testing.T) *leaseFixture {
	t.Helper()
	router := newRouter(t)
	conc := func(n int64) bucket.Limit { return limit(t, bucket.LimitSpec{Algorithm: "concurrency", Limit: n}) }
	tier := policy.Check{Key: "p|tier|u", Limit: limit(t, bucket.LimitSpec{Limit: 3, Per: "1h"}), Cost: 1, Scope: "tier:free"}
	export := policy.Check{Key: "p|route|u", Limit: conc(2), Cost: 1, Scope: "route:/export", FailureMode: bucket.FailClosed,
		LeaseTTL: time.Minute, MaxLeaseTTL: 5 * time.Minute}
	ceiling := policy.Check{Key: "p|global|all", Limit: conc(3), Cost: 1, Scope: "global", FailureMode: bucket.FailClosed,
		LeaseTTL: 30 * time.Second, MaxLeaseTTL: time.Minute}
	shadow := export
	shadow.Key, shadow.Scope, shadow.DryRun, shadow.Limit = "p|route|shadow", "route:/shadow", true, conc(1)
	pol := &fakePolicy{layers: map[string][]policy.Check{
		"mixed":  {export, tier},
		"two":    {export, ceiling},
		"shadow": {shadow, tier},
		"rate":   {tier},
	}}
	d, err := New(Config{Checker: router, Policy: pol, Leaser: router})
	if err != nil {
		t.Fatal(err)
	}
	return &leaseFixture{d: d, router: router, tier: tier}
}

// decide runs one policy request of op with ttl and answers it.
func (f *leaseFixture) decide(t *testing.T, op Op, name string, ttl time.Duration) Answer {
	t.Helper()
	p := GetPlan(op)
	defer p.Release()
	p.LeaseTTL = ttl
	if err := f.d.AddPolicy(p, "", policy.Request{Policy: name}); err != nil {
		t.Fatalf("AddPolicy %s: %v", name, err)
	}
	answers, err := f.d.Decide(context.Background(), "test", p)
	if err != nil {
		t.Fatalf("Decide %s: %v", name, err)
	}
	return answers[0]
}

// tierLeft peeks at the tier: what remains after a peek of 1.
func (f *leaseFixture) tierLeft(t *testing.T) int64 {
	t.Helper()
	out := make([]forward.Result, 1)
	c := forward.Check{Key: f.tier.Key, Limit: f.tier.Limit, Cost: 1, Peek: true}
	if err := f.router.Check(context.Background(), []forward.Check{c}, out); err != nil {
		t.Fatal(err)
	}
	return out[0].Remaining
}

// TestAcquireMixedLayers: a tier of 3 and /export of 2 in flight. Two
// acquires are granted (leases for 1m and the 2m asked, in_flight 1 and
// 2; the answer is the concurrency layer's); the third is refused by
// route:/export, retrying in 1m, and its tier spend is refunded (a peek of
// the tier then leaves 0: 1 was left). After a release, the third is
// granted (the tier is spent); after another release, the fourth is
// refused by tier:free and takes no slot: releasing the third leaves
// in_flight 0.
func TestAcquireMixedLayers(t *testing.T) {
	f := newLeaseFixture(t)
	a := f.decide(t, OpAcquire, "mixed", 0)
	b := f.decide(t, OpAcquire, "mixed", 2*time.Minute)
	if !a.Allowed || !strings.HasPrefix(a.Lease, "l1.") || a.InFlight != 1 || a.Limit != 2 || a.Remaining != 1 || a.Scope != "route:/export" ||
		a.ExpiresIn != time.Minute || len(a.Layers) != 2 {
		t.Fatalf("acquire 1: %+v", a)
	}
	if !b.Allowed || b.InFlight != 2 || b.ExpiresIn != 2*time.Minute {
		t.Fatalf("acquire 2: %+v", b)
	}
	c := f.decide(t, OpAcquire, "mixed", 0)
	if c.Allowed || c.Lease != "" || c.Scope != "route:/export" || c.InFlight != 2 || c.RetryAfter != time.Minute {
		t.Fatalf("acquire 3: %+v", c)
	}
	if left := f.tierLeft(t); left != 0 {
		t.Fatalf("the tier after 2 grants and a refusal: %d left after a peek of 1, want 0 (1 left: the refusal refunded)", left)
	}
	if r, err := f.d.Release(context.Background(), a.Lease, forward.OutcomeOK, 0); err != nil || !r.Released || r.InFlight != 1 {
		t.Fatalf("release: %+v, %v", r, err)
	}
	if c = f.decide(t, OpAcquire, "mixed", 0); !c.Allowed || c.InFlight != 2 {
		t.Fatalf("acquire 3 after a release: %+v", c)
	}
	if r, err := f.d.Release(context.Background(), b.Lease, forward.OutcomeOK, 0); err != nil || !r.Released || r.InFlight != 1 {
		t.Fatalf("release of b: %+v, %v", r, err)
	}
	d := f.decide(t, OpAcquire, "mixed", 0)
	if d.Allowed || d.Scope != "tier:free" || d.Lease != "" {
		t.Fatalf("acquire with the tier spent: %+v", d)
	}
	// The tier's refusal took no slot: one is still free.
	if r, err := f.d.Release(context.Background(), c.Lease, forward.OutcomeOK, 0); err != nil || !r.Released || r.InFlight != 0 {
		t.Fatalf("release of c: %+v, %v (in_flight 0: the refused acquire holds nothing)", r, err)
	}
}

// TestAcquireJoinedLeases: a request through two concurrency layers
// (/export: 2 in flight, max 5m; global: 3, max 1m) asking 90s holds two
// leases joined by a comma; the answer is the tighter layer's (/export:
// limit 2, in_flight 1, 90s; global's lease was capped at 1m). Renew of
// the joined id renews both, Release releases both (released true, then
// false); Renew then is ErrLeaseNotFound, and of a malformed id
// ErrInvalid. A check (OpCheck) through the policy takes leases for the
// layers' lease_ttl; a peek takes none.
func TestAcquireJoinedLeases(t *testing.T) {
	f := newLeaseFixture(t)
	a := f.decide(t, OpAcquire, "two", 90*time.Second)
	ids := strings.Split(a.Lease, LeaseSep)
	if !a.Allowed || len(ids) != 2 || a.Scope != "route:/export" || a.Limit != 2 || a.InFlight != 1 || a.ExpiresIn != 90*time.Second {
		t.Fatalf("acquire: %+v", a)
	}
	r, err := f.d.Renew(context.Background(), a.Lease, 10*time.Second)
	if err != nil || r.ExpiresIn != 10*time.Second || r.Lease != a.Lease {
		t.Fatalf("renew: %+v, %v", r, err)
	}
	for i, want := range []bool{true, false} {
		if rel, err := f.d.Release(context.Background(), a.Lease, forward.OutcomeError, time.Second); err != nil || rel.Released != want {
			t.Fatalf("release %d: %+v, %v", i+1, rel, err)
		}
	}
	if _, err := f.d.Renew(context.Background(), a.Lease, 0); !errors.Is(err, forward.ErrLeaseNotFound) {
		t.Fatalf("renew after release: %v, want ErrLeaseNotFound", err)
	}
	if _, err := f.d.Renew(context.Background(), "l1.x", 0); !errors.Is(err, forward.ErrInvalid) {
		t.Fatalf("renew of a malformed id: %v, want ErrInvalid", err)
	}
	chk := f.decide(t, OpCheck, "two", 0)
	if !chk.Allowed || len(strings.Split(chk.Lease, LeaseSep)) != 2 || chk.InFlight != 1 || chk.ExpiresIn != time.Minute {
		t.Fatalf("check through the policy: %+v", chk)
	}
	if pk := f.decide(t, OpPeek, "two", 0); !pk.Allowed || pk.Lease != "" {
		t.Fatalf("peek through the policy: %+v", pk)
	}
	if _, err := f.d.Release(context.Background(), chk.Lease, forward.OutcomeOK, 0); err != nil {
		t.Fatal(err)
	}
}

// TestAcquireDryRunAndNoLayer: a dry-run concurrency layer that is full
// names itself in WouldReject and refuses nothing; an acquire of a policy
// request without a concurrency layer is refused as bad input.
func TestAcquireDryRunAndNoLayer(t *testing.T) {
	f := newLeaseFixture(t)
	first := f.decide(t, OpAcquire, "shadow", 0)
	second := f.decide(t, OpAcquire, "shadow", 0)
	if !first.Allowed || first.Lease == "" || len(first.WouldReject) != 0 {
		t.Fatalf("first: %+v", first)
	}
	if !second.Allowed || second.Lease != "" || len(second.WouldReject) != 1 || second.WouldReject[0] != "route:/shadow" {
		t.Fatalf("second: %+v", second)
	}
	p := GetPlan(OpAcquire)
	defer p.Release()
	if err := f.d.AddPolicy(p, "request.", policy.Request{Policy: "rate"}); !errors.Is(err, ErrNoConcurrencyLayer) ||
		!strings.HasPrefix(err.Error(), "request.") {
		t.Fatalf("acquire without a concurrency layer: %v", err)
	}
}

// TestAcquireInline: an inline acquire's key is in the concurrency
// namespace, so the lease names "c|jobs"; with the limit of 1 held, a
// second is refused with in_flight 1.
func TestAcquireInline(t *testing.T) {
	f := newLeaseFixture(t)
	l := limit(t, bucket.LimitSpec{Algorithm: "concurrency", Limit: 1})
	acquire := func() Answer {
		p := GetPlan(OpAcquire)
		defer p.Release()
		p.AddAcquire(forward.Acquire{Key: "jobs", Limit: l, Mode: bucket.FailClosed, TTL: 30 * time.Second})
		ans, err := f.d.Decide(context.Background(), "test", p)
		if err != nil {
			t.Fatal(err)
		}
		return ans[0]
	}
	a := acquire()
	key, err := bucket.ParseLeaseID(a.Lease)
	if !a.Allowed || err != nil || key != "c|jobs" || a.Scope != ScopeInline || a.InFlight != 1 {
		t.Fatalf("acquire: %+v (key %q, %v)", a, key, err)
	}
	if b := acquire(); b.Allowed || b.InFlight != 1 || b.Lease != "" {
		t.Fatalf("second acquire: %+v", b)
	}
}

// brokenLeaser is the router, except that acquires of key fail.
type brokenLeaser struct {
	*forward.Router
	key string
}

func (b brokenLeaser) Acquire(ctx context.Context, a forward.Acquire) (forward.LeaseResult, error) {
	if a.Key == b.key {
		return forward.LeaseResult{}, forward.ErrUnavailable
	}
	return b.Router.Acquire(ctx, a)
}

// TestAcquireRollback: a batch of two policy requests whose second
// acquire fails changes nothing: the error is returned, the first
// request's lease is released (its layer takes 2 more acquires) and its
// tier spend refunded (the tier still has 2 left after a peek of 1).
func TestAcquireRollback(t *testing.T) {
	f := newLeaseFixture(t)
	conc := limit(t, bucket.LimitSpec{Algorithm: "concurrency", Limit: 1})
	broken := policy.Check{Key: "p|broken", Limit: conc, Cost: 1, Scope: "route:/broken", FailureMode: bucket.FailClosed,
		LeaseTTL: time.Minute, MaxLeaseTTL: time.Minute}
	pol := f.d.policy.(*fakePolicy)
	pol.layers["broken"] = []policy.Check{broken}
	d, err := New(Config{Checker: f.router, Policy: pol, Leaser: brokenLeaser{f.router, "p|broken"}})
	if err != nil {
		t.Fatal(err)
	}
	p := GetPlan(OpCheck)
	defer p.Release()
	for _, name := range []string{"mixed", "broken"} {
		if err := d.AddPolicy(p, "", policy.Request{Policy: name}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := d.Decide(context.Background(), "test", p); !errors.Is(err, forward.ErrUnavailable) {
		t.Fatalf("Decide: %v, want ErrUnavailable", err)
	}
	if left := f.tierLeft(t); left != 2 {
		t.Fatalf("the tier after the rollback: %d left after a peek of 1, want 2", left)
	}
	for i := range 2 {
		if a := f.decide(t, OpAcquire, "mixed", 0); !a.Allowed {
			t.Fatalf("acquire %d after the rollback: %+v (the first request's lease was not released)", i+1, a)
		}
	}
}
