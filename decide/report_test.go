package decide

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/adaptive"
	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/forward"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
	"github.com/ringlimit/ringlimit/peer"
	"github.com/ringlimit/ringlimit/policy"
	"github.com/ringlimit/ringlimit/ring"
)

// routerOn is newRouter on the clock clk.
func routerOn(t *testing.T, clk *testkit.Clock) *forward.Router {
	t.Helper()
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

// Reports go to the adaptive layers of a request only: a request with none
// reports 0; one with an adaptive tier and a plain route reports 1, and
// six errors cut the tier's limit from 20 to 18 (backoff 0.9) once its
// window closes, which the next check's answer gives.
func TestReportAdaptiveLayers(t *testing.T) {
	clk := testkit.NewClock(t0)
	router := routerOn(t, clk)
	spec := &adaptive.Spec{Algorithm: adaptive.AIMD, Min: 5, Max: 50, Initial: 20, Window: time.Second, MinSamples: 5}
	l := limit(t, bucket.LimitSpec{Algorithm: "fixed_window", Limit: 20, Per: "1m"})
	tier := policy.Check{Key: "p|tier|a", Limit: l, Cost: 1, Scope: "tier:free", Adaptive: spec}
	route := policy.Check{Key: "p|route|a", Limit: l, Cost: 1, Scope: "route:/x"}
	pol := &fakePolicy{layers: map[string][]policy.Check{"plain": {route}, "adaptive": {route, tier}}}
	d, err := New(Config{Checker: router, Policy: pol, Reporter: router})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if res, err := d.Report(ctx, policy.Request{Policy: "plain"}, forward.OutcomeError, time.Millisecond); err != nil || res != (ReportResult{}) {
		t.Fatalf("report of a request with no adaptive layer: %+v, %v; want reported 0", res, err)
	}
	for range 6 {
		res, err := d.Report(ctx, policy.Request{Policy: "adaptive"}, forward.OutcomeError, time.Millisecond)
		if err != nil || res != (ReportResult{Reported: 1, Limit: 20, Owner: "node-1"}) {
			t.Fatalf("report: %+v, %v; want 1 layer at limit 20 from node-1", res, err)
		}
	}
	if _, err := d.Report(ctx, policy.Request{Policy: "adaptive"}, forward.OutcomeOK, -time.Millisecond); err == nil {
		t.Fatal("a negative latency was reported")
	}
	if _, err := d.Report(ctx, policy.Request{Policy: "none"}, forward.OutcomeOK, 0); err == nil {
		t.Fatal("a request the policy refuses was reported")
	}
	clk.Advance(time.Second)
	a := decideOne(t, d, OpCheck, func(p *Plan) {
		if err := d.AddPolicy(p, "", policy.Request{Policy: "adaptive"}); err != nil {
			t.Fatal(err)
		}
	})
	if !a.Allowed || a.Limit != 18 || a.Scope != "tier:free" {
		t.Fatalf("check after the window: %+v, want allowed under tier:free's limit 18", a)
	}
	noReporter, err := New(Config{Checker: router, Policy: pol})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := noReporter.Report(ctx, policy.Request{Policy: "adaptive"}, forward.OutcomeOK, 0); !errors.Is(err, forward.ErrUnavailable) {
		t.Fatalf("report without a Reporter: %v, want unavailable", err)
	}
}
