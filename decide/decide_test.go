package decide

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/clock"
	"github.com/ringlimit/ringlimit/forward"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
	"github.com/ringlimit/ringlimit/peer"
	"github.com/ringlimit/ringlimit/policy"
	"github.com/ringlimit/ringlimit/ring"
	"github.com/ringlimit/ringlimit/rls"
)

var t0 = clock.FromTime(time.Date(2026, time.January, 5, 10, 4, 0, 0, time.UTC))

// newRouter is one node alone on a real router and store: it owns every
// key, and its pool never dials.
func newRouter(t *testing.T) *forward.Router {
	t.Helper()
	clk := testkit.NewClock(t0)
	store, err := bucket.NewStore(bucket.StoreConfig{MaxKeys: 1 << 10, Shards: 4})
	if err != nil {
		t.Fatal(err)
	}
	peers, err := peer.NewPool(peer.Config{Self: "node-1", Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	router, err := forward.New(forward.Config{Self: "node-1", Store: store, Clock: clk, Peers: peers,
		NewRing: func(members []string) (forward.Owners, error) { return ring.New(ring.DefaultConfig(), members) }})
	if err != nil {
		peers.Close(context.Background())
		t.Fatal(err)
	}
	t.Cleanup(func() {
		router.Close(context.Background())
		peers.Close(context.Background())
	})
	return router
}

// limit parses spec or fails the test.
func limit(t *testing.T, spec bucket.LimitSpec) bucket.Limit {
	t.Helper()
	s, err := spec.Parse("limit")
	if err != nil {
		t.Fatal(err)
	}
	return s.Limit
}

// fakePolicy resolves each policy name to fixed layers.
type fakePolicy struct {
	layers map[string][]policy.Check
}

func (f *fakePolicy) Resolve(req policy.Request) ([]policy.Check, error) {
	l, ok := f.layers[req.Policy]
	if !ok {
		return nil, errors.New("no such policy")
	}
	return slices.Clone(l), nil
}

func (f *fakePolicy) Current() *policy.Set { return &policy.Set{Version: "v7"} }

// recorder is an Observer that keeps what it is told.
type recorder struct {
	mu       sync.Mutex
	batches  []string // surface and number of checks
	answered []string // scope of each answer
}

func (r *recorder) Checked(surface string, checks []forward.Check, _ []forward.Result, _ time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.batches = append(r.batches, surface)
}

func (r *recorder) Answered(ans *Answer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.answered = append(r.answered, ans.Scope)
}

// step is one Decide and the answer (of its first unit) it must give.
type step struct {
	plan      func(t *testing.T, d *Decider, p *Plan)
	allowed   bool
	remaining int64
	scope     string
	retry     time.Duration
}

func run(t *testing.T, d *Decider, steps []step) {
	t.Helper()
	for i, s := range steps {
		p := GetPlan(OpCheck)
		s.plan(t, d, p)
		answers, err := d.Decide(context.Background(), "test", p)
		if err != nil {
			t.Fatalf("step %d: Decide: %v", i, err)
		}
		a := answers[0]
		if a.Allowed != s.allowed || a.Remaining != s.remaining || a.Scope != s.scope || a.RetryAfter != s.retry {
			t.Errorf("step %d: allowed %v remaining %d scope %q retry %v, want %v %d %q %v",
				i, a.Allowed, a.Remaining, a.Scope, a.RetryAfter, s.allowed, s.remaining, s.scope, s.retry)
		}
		p.Release()
	}
}

func TestInline(t *testing.T) {
	router := newRouter(t)
	rec := &recorder{}
	d, err := New(Config{Checker: router, Observer: rec, Self: "node-1"})
	if err != nil {
		t.Fatal(err)
	}
	l := limit(t, bucket.LimitSpec{Limit: 2, Per: "1s"})
	inline := func(cost int64) func(*testing.T, *Decider, *Plan) {
		return func(_ *testing.T, _ *Decider, p *Plan) {
			p.AddInline(forward.Check{Key: bucket.InlineKey("user:1", &l), Limit: l, Cost: cost})
		}
	}
	run(t, d, []step{
		{inline(1), true, 1, ScopeInline, 0},
		{inline(1), true, 0, ScopeInline, 0},
		{inline(1), false, 0, ScopeInline, 500 * time.Millisecond},
	})
	if want := []string{"test", "test", "test"}; !slices.Equal(rec.batches, want) {
		t.Errorf("batches %q, want %q", rec.batches, want)
	}
	if want := []string{ScopeInline, ScopeInline, ScopeInline}; !slices.Equal(rec.answered, want) {
		t.Errorf("answered %q, want %q", rec.answered, want)
	}
	if got, want := d.Activity(), (Activity{Checks: 3, Refused: 1}); got != want {
		t.Errorf("Activity %+v, want %+v", got, want)
	}
}

// Two layers: the route refuses the second request, and the tier, which
// admitted it, is refunded: the tier alone then has 8 left of 10, not 7.
func TestPolicyRefund(t *testing.T) {
	router := newRouter(t)
	tier := policy.Check{Key: "p|tier|a", Limit: limit(t, bucket.LimitSpec{Limit: 10, Per: "1m"}), Cost: 1, Scope: "tier:free"}
	route := policy.Check{Key: "p|route|a", Limit: limit(t, bucket.LimitSpec{Limit: 1, Per: "1m"}), Cost: 1, Scope: "route:/x"}
	pol := &fakePolicy{layers: map[string][]policy.Check{"both": {tier, route}, "tier": {tier}}}
	var dry [][]string
	d, err := New(Config{Checker: router, Policy: pol, CountDryRun: func(s []string) { dry = append(dry, s) }})
	if err != nil {
		t.Fatal(err)
	}
	named := func(name string) func(*testing.T, *Decider, *Plan) {
		return func(t *testing.T, d *Decider, p *Plan) {
			if err := d.AddPolicy(p, "", policy.Request{Policy: name}); err != nil {
				t.Fatal(err)
			}
		}
	}
	run(t, d, []step{
		{named("both"), true, 0, "route:/x", 0},
		{named("both"), false, 0, "route:/x", time.Minute},
		{named("tier"), true, 8, "tier:free", 0},
	})
	if len(dry) != 0 {
		t.Errorf("CountDryRun called with %q, want never", dry)
	}
	if got, want := d.Activity(), (Activity{Checks: 5, Refused: 1}); got != want {
		t.Errorf("Activity %+v, want %+v (refunds not counted)", got, want)
	}
}

// A dry-run layer that would reject does not: the answer is the enforced
// layer's, names the dry-run scope, and CountDryRun is told of it.
func TestPolicyDryRun(t *testing.T) {
	router := newRouter(t)
	tier := policy.Check{Key: "p|tier|b", Limit: limit(t, bucket.LimitSpec{Limit: 5, Per: "1m"}), Cost: 2, Scope: "tier:free"}
	shadow := policy.Check{Key: "p|route|b", Limit: limit(t, bucket.LimitSpec{Limit: 3, Per: "1m"}), Cost: 2, Scope: "route:/export", DryRun: true}
	pol := &fakePolicy{layers: map[string][]policy.Check{"p": {tier, shadow}}}
	var dry [][]string
	d, err := New(Config{Checker: router, Policy: pol, CountDryRun: func(s []string) { dry = append(dry, s) }})
	if err != nil {
		t.Fatal(err)
	}
	var a Answer
	for range 2 {
		p := GetPlan(OpCheck)
		if err := d.AddPolicy(p, "", policy.Request{Policy: "p"}); err != nil {
			t.Fatal(err)
		}
		answers, err := d.Decide(context.Background(), "test", p)
		if err != nil {
			t.Fatal(err)
		}
		a = answers[0]
		p.Release()
	}
	// The second request: the tier had 3 left, the dry-run route 1.
	if !a.Allowed || a.Remaining != 1 || a.Scope != "tier:free" || a.Version != "v7" || !slices.Equal(a.WouldReject, []string{"route:/export"}) {
		t.Errorf("answer %+v, want allowed, remaining 1, scope tier:free, version v7, would reject route:/export", a)
	}
	if want := [][]string{{"route:/export"}}; len(dry) != 1 || !slices.Equal(dry[0], want[0]) {
		t.Errorf("CountDryRun %q, want %q", dry, want)
	}
}

func TestNoPolicy(t *testing.T) {
	d, err := New(Config{Checker: newRouter(t)})
	if err != nil {
		t.Fatal(err)
	}
	p := GetPlan(OpCheck)
	defer p.Release()
	if err := d.AddPolicy(p, "request.", policy.Request{Policy: "p"}); !errors.Is(err, ErrNoPolicy) || err.Error() != "request."+ErrNoPolicy.Error() {
		t.Errorf("AddPolicy without a policy: %v, want request.%v", err, ErrNoPolicy)
	}
	if p.Len() != 0 {
		t.Errorf("plan holds %d units after a refused request, want 0", p.Len())
	}
}

// RLS descriptors are each their own answer: one refused does not refund
// another; hits 0 is a peek of one unit (checked, nothing spent, the
// remaining now); hits the limit can never hold are refused without a
// check.
func TestRLS(t *testing.T) {
	router := newRouter(t)
	rec := &recorder{}
	d, err := New(Config{Checker: router, Observer: rec})
	if err != nil {
		t.Fatal(err)
	}
	wide := rls.Rule{Key: "r|d|wide", Limit: limit(t, bucket.LimitSpec{Algorithm: "fixed_window", Limit: 5, Per: "1m"}), RequestsPerUnit: 5}
	narrow := rls.Rule{Key: "r|d|narrow", Limit: limit(t, bucket.LimitSpec{Algorithm: "fixed_window", Limit: 1, Per: "1m"}), RequestsPerUnit: 1}
	type want struct {
		allowed, checked bool
		remaining        int64
	}
	for i, s := range []struct {
		rules []*rls.Rule
		hits  []uint64
		want  []want
	}{
		{[]*rls.Rule{&wide, &narrow}, []uint64{1, 1}, []want{{true, true, 4}, {true, true, 0}}},
		{[]*rls.Rule{&wide, &narrow}, []uint64{1, 1}, []want{{true, true, 3}, {false, true, 0}}},
		{[]*rls.Rule{&wide, &narrow, &wide}, []uint64{0, 2, 6}, []want{{true, true, 3}, {false, false, 0}, {false, false, 0}}},
		{[]*rls.Rule{&narrow}, []uint64{0}, []want{{false, true, 0}}}, // exhausted: a peek says so
		{[]*rls.Rule{&wide}, []uint64{1}, []want{{true, true, 2}}},    // not refunded by the refusal of step 1, nor spent by the peeks
	} {
		p := GetPlan(OpCheck)
		for j, r := range s.rules {
			if err := p.AddRLS("d", r, s.hits[j]); err != nil {
				t.Fatal(err)
			}
		}
		answers, err := d.Decide(context.Background(), "rls", p)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		for j, w := range s.want {
			a := answers[j]
			if a.Allowed != w.allowed || a.Checked != w.checked || a.Remaining != w.remaining || a.Scope != "rls:d" {
				t.Errorf("step %d descriptor %d: allowed %v checked %v remaining %d scope %q, want %v %v %d rls:d",
					i, j, a.Allowed, a.Checked, a.Remaining, a.Scope, w.allowed, w.checked, w.remaining)
			}
		}
		p.Release()
	}
	// Step 3 had one check (the peek). RLS answers are the adapter's to count.
	if want := []string{"rls", "rls", "rls", "rls", "rls"}; !slices.Equal(rec.batches, want) || len(rec.answered) != 0 {
		t.Errorf("batches %q answered %q, want %q and none", rec.batches, rec.answered, want)
	}
	// Peeks (the hits 0 descriptors) are counted apart from checks.
	if got, want := d.Activity(), (Activity{Checks: 5, Refused: 1, Peeks: 2}); got != want {
		t.Errorf("Activity %+v, want %+v", got, want)
	}
	bad := rls.Rule{Key: "", Limit: wide.Limit, RequestsPerUnit: 5}
	p := GetPlan(OpCheck)
	defer p.Release()
	if err := p.AddRLS("d", &bad, 1); err == nil {
		t.Error("AddRLS with an empty key: no error")
	}
}

func TestUnknownOp(t *testing.T) {
	d, err := New(Config{Checker: newRouter(t)})
	if err != nil {
		t.Fatal(err)
	}
	p := GetPlan(Op(9))
	defer p.Release()
	if _, err := d.Decide(context.Background(), "test", p); err == nil {
		t.Error("Decide of an unknown op: no error")
	}
}

func TestNewRefuses(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Error("New without a Checker: no error")
	}
	if _, err := New(Config{Checker: nopChecker{}, CheckTimeout: -time.Second}); err == nil {
		t.Error("New with a negative CheckTimeout: no error")
	}
}

func TestMain(m *testing.M) { testkit.Main(m) }
