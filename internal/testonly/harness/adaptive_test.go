package harness_test

import (
	"context"
	"errors"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/ringlimit/ringlimit/adaptive"
	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/forward"
	"github.com/ringlimit/ringlimit/internal/testonly/harness"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
	"github.com/ringlimit/ringlimit/node"
)

// aimd is the adaptive layer of the tests: AIMD from 20 within [5, 50],
// judged every second on at least 5 samples; a cut multiplies by 0.51
// (the limit is rounded down: 20 → 10 → 5).
var aimd = adaptive.Spec{Algorithm: adaptive.AIMD, Min: 5, Max: 50, Initial: 20, Window: time.Second,
	MinSamples: 5, Backoff: 0.51}

// perSecond is the layer's rate limit: a fixed window of a second, aligned
// with the controller's windows on the fake clock. Its count, 20, is only
// where a key starts.
var perSecond = bucket.MustLimit(bucket.FixedWindow, 20, time.Second, 0)

const adaptiveScope = "tier:free"

func adaptiveCheck(t *testing.T, n *harness.Node, key string) forward.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	defer cancel()
	out := make([]forward.Result, 1)
	c := forward.Check{Key: key, Limit: perSecond, Cost: 1, Mode: bucket.FailClosed, Adaptive: &aimd, AdaptiveScope: adaptiveScope}
	if err := n.Router.Check(ctx, []forward.Check{c}, out); err != nil {
		t.Fatalf("check of %s through %s: %v", key, n.Name, err)
	}
	return out[0]
}

// admitted sends each node perNode checks of key, in turn, and returns how
// many were allowed; every answer must give the limit want and owner.
func admitted(t *testing.T, nodes []*harness.Node, key string, perNode int, want int64, owner string) int {
	t.Helper()
	n := 0
	for range perNode {
		for _, nd := range nodes {
			r := adaptiveCheck(t, nd, key)
			if r.Limit != want || r.Owner != owner || r.Degraded {
				t.Fatalf("check through %s: limit %d owner %s degraded %v, want limit %d from %s", nd.Name, r.Limit, r.Owner, r.Degraded, want, owner)
			}
			if r.Allowed {
				n++
			}
		}
	}
	return n
}

// report sends each node perNode reports of outcome o for key.
func report(t *testing.T, nodes []*harness.Node, key string, perNode int, o forward.Outcome) forward.ReportResult {
	t.Helper()
	var last forward.ReportResult
	for range perNode {
		for _, nd := range nodes {
			ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
			res, err := nd.Router.ReportScope(ctx, adaptiveScope, key, perSecond, &aimd, o, 40*time.Millisecond)
			cancel()
			if err != nil {
				t.Fatalf("report through %s: %v", nd.Name, err)
			}
			last = res
		}
	}
	return last
}

// metric returns the value of the gauge or counter name with the labels
// given, as n's registry has it (0 when absent).
func metric(t *testing.T, n *harness.Node, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := n.Reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if labels[lp.GetName()] != lp.GetValue() {
					continue next
				}
			}
			return value(m)
		}
	}
	return 0
}

func value(m *dto.Metric) float64 {
	if m.GetGauge() != nil {
		return m.GetGauge().GetValue()
	}
	return m.GetCounter().GetValue()
}

// TestAdaptiveRateLimit: an adaptive AIMD rate layer on a key C owns, with
// B its successor. Error reports through every node cut the limit to 10
// after one window, then to 5; ok reports from a window that used the
// limit raise it by 1 a window. Checks through every node are admitted
// exactly up to the current limit, and every answer gives it. After a
// replication round C dies: B, the new owner, answers C's current limit
// (7), not Initial (20), and admits exactly that.
func TestAdaptiveRateLimit(t *testing.T) {
	c, clk := startFake(t)
	a, b, own := c.Node("A"), c.Node("B"), c.Node("C")
	all := []*harness.Node{a, b, own}
	key := c.KeyWith("C", "B", "adaptive")

	if got := admitted(t, all, key, 7, 20, "C"); got != 20 {
		t.Fatalf("window 0: %d of 21 checks admitted, want 20", got)
	}
	report(t, all, key, 2, forward.OutcomeError) // 6 samples, all errors
	clk.Advance(time.Second)
	if got := admitted(t, all, key, 4, 10, "C"); got != 10 {
		t.Fatalf("after a window of errors: %d of 12 checks admitted, want 10", got)
	}
	if res := report(t, all, key, 2, forward.OutcomeError); res.Limit != 10 || res.Owner != "C" {
		t.Fatalf("report answered %+v, want limit 10 from C", res)
	}
	clk.Advance(time.Second)
	if got := admitted(t, all, key, 3, 5, "C"); got != 5 {
		t.Fatalf("after a second window of errors: %d of 9 checks admitted, want 5", got)
	}
	down := map[string]string{"scope": adaptiveScope, "direction": "down"}
	if got := metric(t, own, "ringlimit_adaptive_changes_total", down); got != 2 {
		t.Fatalf("C counted %v cuts, want 2", got)
	}
	if got := metric(t, own, "ringlimit_adaptive_limit", map[string]string{"scope": adaptiveScope}); got != 5 {
		t.Fatalf("C's ringlimit_adaptive_limit is %v, want 5", got)
	}
	if got := a.Router.AdaptiveScopes(); len(got) != 0 {
		t.Fatalf("A, which owns no adaptive key, reports scopes %v", got)
	}
	if got := own.Router.AdaptiveScopes(); len(got) != 1 || got[0] != (forward.AdaptiveScope{Scope: adaptiveScope, Limit: 5}) {
		t.Fatalf("C reports scopes %v, want tier:free at 5", got)
	}

	// Healthy windows that used the limit (5 of 5, then 6 of 6) add one each.
	report(t, all, key, 2, forward.OutcomeOK)
	clk.Advance(time.Second)
	if got := admitted(t, all, key, 3, 6, "C"); got != 6 {
		t.Fatalf("after a healthy window: %d of 9 checks admitted, want 6", got)
	}
	report(t, all, key, 2, forward.OutcomeOK)
	clk.Advance(time.Second)
	if got := admitted(t, all, key, 3, 7, "C"); got != 7 {
		t.Fatalf("after a second healthy window: %d of 9 checks admitted, want 7", got)
	}
	if got := metric(t, own, "ringlimit_adaptive_changes_total", map[string]string{"scope": adaptiveScope, "direction": "up"}); got != 2 {
		t.Fatalf("C counted %v raises, want 2", got)
	}

	// C dies after a replication round: B carries its limit on.
	synced(t, c, "C")
	own.Stop()
	harness.SetView([]*harness.Node{a, b}, []*harness.Node{a, b}, "C")
	// B promotes its replicas of C's keys in the background, on the clock
	// of the moment: wait for it before the clock moves on.
	testkit.WaitFor(t, 5*time.Second, "B's copy of the key", func() error {
		if !b.Store.Has(key) {
			return errors.New("not promoted yet")
		}
		return nil
	})
	clk.Advance(time.Second) // a window with no samples: the limit holds
	if got := admitted(t, []*harness.Node{a, b}, key, 4, 7, "B"); got != 7 {
		t.Fatalf("after C died: %d of 8 checks admitted, want 7", got)
	}
}

// TestAdaptiveHandoffOnLeave: with replication off (so that no replica
// can stand for the handoff), C, the key's owner, leaves the ring after
// cutting the key's limit to 10; the new owner, A, takes the controller
// with the key's handoff and answers 10, not Initial (20), and admits
// exactly 10 in the next window.
func TestAdaptiveHandoffOnLeave(t *testing.T) {
	clk := testkit.NewClock(0)
	c := harness.Start(t, harness.Options{PeerTimeout: peerTimeout, Clock: clk,
		Node: func(cfg *node.Config) { cfg.Replication = 0 }}, "A", "B", "C")
	a, b, own := c.Node("A"), c.Node("B"), c.Node("C")
	all := []*harness.Node{a, b, own}
	key := c.KeyWith("C", "A", "leave")
	if got := admitted(t, all, key, 1, 20, "C"); got != 3 {
		t.Fatalf("window 0: %d of 3 checks admitted, want 3", got)
	}
	report(t, all, key, 2, forward.OutcomeError)
	clk.Advance(time.Second)
	if got := admitted(t, all, key, 1, 10, "C"); got != 3 {
		t.Fatalf("after a window of errors: %d of 3 checks admitted, want 3", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	harness.SetView([]*harness.Node{a, b}, []*harness.Node{a, b})
	if err := own.Router.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second) // a window with no samples: the limit holds
	if got := admitted(t, []*harness.Node{a, b}, key, 6, 10, "A"); got != 10 {
		t.Fatalf("after C left: %d of 12 checks admitted, want 10", got)
	}
}

// TestAdaptiveReportRedirect: A's ring lacks C, so A sends the report of
// C's key to B, whose ring names C: B redirects, and C, asked as the last
// hop, observes it. Six such errors cut C's limit to 10.
func TestAdaptiveReportRedirect(t *testing.T) {
	c, clk := startFake(t)
	a, b, own := c.Node("A"), c.Node("B"), c.Node("C")
	key := c.KeyWith("C", "B", "redirect")
	harness.SetView([]*harness.Node{a}, []*harness.Node{a, b})
	if res := report(t, []*harness.Node{a}, key, 6, forward.OutcomeError); res.Owner != "C" || res.Limit != 20 {
		t.Fatalf("report through A: %+v, want observed by C at 20", res)
	}
	clk.Advance(time.Second)
	if got := admitted(t, []*harness.Node{b, own}, key, 1, 10, "C"); got != 2 {
		t.Fatalf("after the window: %d of 2 checks admitted, want 2", got)
	}
}

// TestAdaptiveStandIn: C, the owner, dies after a replication round with
// the key's limit cut to 10, and no one has been told yet: A's checks
// fall to B, C's successor, which stands in with its replica's limit (10,
// not the layer's 20) and admits exactly that in the next window.
func TestAdaptiveStandIn(t *testing.T) {
	c, clk := startFake(t)
	a, b, own := c.Node("A"), c.Node("B"), c.Node("C")
	all := []*harness.Node{a, b, own}
	key := c.KeyWith("C", "B", "standin")
	admitted(t, all, key, 1, 20, "C")
	report(t, all, key, 2, forward.OutcomeError)
	clk.Advance(time.Second)
	if got := admitted(t, all, key, 1, 10, "C"); got != 3 {
		t.Fatalf("after a window of errors: %d of 3 checks admitted, want 3", got)
	}
	synced(t, c, "C")
	own.Stop()
	clk.Advance(time.Second)
	if got := admitted(t, []*harness.Node{a}, key, 12, 10, "B"); got != 10 {
		t.Fatalf("with C dead and unannounced: %d of 12 checks admitted, want 10", got)
	}
}
