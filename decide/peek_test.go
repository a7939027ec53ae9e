package decide

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/forward"
	"github.com/ringlimit/ringlimit/policy"
)

// decideOne plans one unit with plan under op and returns its answer.
func decideOne(t *testing.T, d *Decider, op Op, plan func(*Plan)) Answer {
	t.Helper()
	p := GetPlan(op)
	defer p.Release()
	plan(p)
	answers, err := d.Decide(context.Background(), "test", p)
	if err != nil {
		t.Fatal(err)
	}
	a := answers[0]
	a.WouldReject = slices.Clone(a.WouldReject)
	return a
}

// A peeked policy request combines its two layers as a check would, and
// spends nothing: tier 10/min with 4 spent, route 5/min with 5 spent, and
// a dry-run layer 1/min exhausted. The peek of cost 1 is refused by the
// route (retry 12 s), names the dry-run layer in would_reject without
// counting it, and refunds nothing; a peek of the tier alone answers
// allowed, remaining 5 (6 left, 1 peeked), again and again.
func TestPeekPolicy(t *testing.T) {
	router := newRouter(t)
	tier := policy.Check{Key: "p|tier|a", Limit: limit(t, bucket.LimitSpec{Limit: 10, Per: "1m"}), Cost: 1, Scope: "tier:free"}
	route := policy.Check{Key: "p|route|a", Limit: limit(t, bucket.LimitSpec{Limit: 5, Per: "1m"}), Cost: 1, Scope: "route:/x"}
	shadow := policy.Check{Key: "p|shadow|a", Limit: limit(t, bucket.LimitSpec{Limit: 1, Per: "1m"}), Cost: 1, Scope: "global", DryRun: true}
	pol := &fakePolicy{layers: map[string][]policy.Check{"both": {tier, route, shadow}, "tier": {tier}}}
	var dry [][]string
	d, err := New(Config{Checker: router, Policy: pol, CountDryRun: func(s []string) { dry = append(dry, s) }})
	if err != nil {
		t.Fatal(err)
	}
	spend := func(c policy.Check, n int64) {
		out := make([]forward.Result, 1)
		if err := router.Check(context.Background(), []forward.Check{{Key: c.Key, Limit: c.Limit, Cost: n}}, out); err != nil || !out[0].Allowed {
			t.Fatalf("spend %d of %s: %+v, %v", n, c.Key, out[0], err)
		}
	}
	spend(tier, 4)
	spend(route, 5)
	spend(shadow, 1)
	named := func(name string) func(*Plan) {
		return func(p *Plan) {
			if err := d.AddPolicy(p, "", policy.Request{Policy: name}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := range 3 {
		a := decideOne(t, d, OpPeek, named("both"))
		if a.Allowed || a.Remaining != 0 || a.Scope != "route:/x" || a.RetryAfter != 12*time.Second || !a.Peek ||
			!slices.Equal(a.WouldReject, []string{"global"}) {
			t.Fatalf("peek %d of both: %+v; want refused by route:/x, remaining 0, retry 12s, would_reject [global]", i, a)
		}
		a = decideOne(t, d, OpPeek, named("tier"))
		if !a.Allowed || a.Remaining != 5 || a.Scope != "tier:free" {
			t.Fatalf("peek %d of tier: %+v; want allowed, remaining 5", i, a)
		}
	}
	if len(dry) != 0 {
		t.Errorf("CountDryRun called with %q, want never for peeks", dry)
	}
	// Nothing was spent or refunded: a check of the tier now takes the
	// 5th of its 10.
	if a := decideOne(t, d, OpCheck, named("tier")); !a.Allowed || a.Remaining != 5 || a.Peek {
		t.Fatalf("check of tier after the peeks: %+v; want allowed, remaining 5", a)
	}
}
