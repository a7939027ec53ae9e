package harness_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/clock"
	"github.com/ringlimit/ringlimit/cluster"
	"github.com/ringlimit/ringlimit/internal/testonly/harness"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
	"github.com/ringlimit/ringlimit/node"
)

// gossipNodes is how many nodes TestManyNodesGossip runs: 50, or 20 under
// the race detector. With -race every node's ring rebuild (ring.New: about
// 5ms for 50 members without it, 66ms with it) grows about tenfold, and 50
// nodes that each rebuild their ring on every membership change while the
// others join starve the gossip goroutines of 2 cores long enough for
// failure detection to declare live members dead.
var gossipNodes = map[bool]int{false: 50, true: 20}[raceEnabled]

// TestManyNodesGossip: 50 in-process nodes (20 under -race) on the
// fault-injecting network, each joining the first by gossip, converge on one
// ring, and enforce limits exactly through every node: 100 of 1,000 checks
// on one key, 10 of 30 on each of 10 keys. The convergence time is logged;
// the bound only catches a hang.
//
// Checks fail closed, so that an owner that misses its deadline on a busy
// machine rejects instead of admitting from a local stand-in: the counts of
// admissions stay exact.
func TestManyNodesGossip(t *testing.T) {
	names := make([]string, gossipNodes)
	for i := range names {
		names[i] = fmt.Sprintf("n%02d", i+1)
	}
	opts := harness.Options{Clock: clock.System(), PeerTimeout: 5 * time.Second, Node: func(c *node.Config) {
		c.ClusterTuning = func(cc *cluster.Config) {
			// Failure detection patient enough for 50 nodes sharing a
			// starved CPU with the test (as cmd/node's lanDetection).
			cc.ProbeInterval, cc.ProbeTimeout = 2*time.Second, time.Second
			cc.SuspicionMult, cc.SuspicionMaxTimeoutMult = 6, 6
		}
	}}
	began := time.Now()
	c := harness.StartGossip(t, opts, names...)
	started := time.Since(began)
	converged := testkit.WaitFor(t, 60*time.Second, fmt.Sprintf("%d nodes on one ring", len(names)), c.Converged)
	t.Logf("%d nodes started in %v; every ring holds all %d at one version %v after the last started",
		len(names), started.Round(time.Millisecond), len(names), converged.Round(time.Millisecond))

	l100 := bucket.MustLimit(bucket.TokenBucket, 100, time.Hour, 0)
	var hot harness.Tally
	for i := range 1000 {
		tl := c.Nodes[i%len(c.Nodes)].Check("growth:hot", l100, bucket.FailClosed, 1, 10*time.Second)
		hot.Allowed += tl.Allowed
		hot.Rejected += tl.Rejected
		hot.Degraded += tl.Degraded
		hot.Failed += tl.Failed
	}
	if hot.Allowed != 100 {
		t.Errorf("growth:hot through %d nodes: %+v, want exactly 100 of 1,000 allowed", len(c.Nodes), hot)
	}
	l10 := bucket.MustLimit(bucket.TokenBucket, 10, time.Hour, 0)
	for k := range 10 {
		key := fmt.Sprintf("growth:%d", k)
		var tl harness.Tally
		for i := range 30 {
			r := c.Nodes[(k*7+i)%len(c.Nodes)].Check(key, l10, bucket.FailClosed, 1, 10*time.Second)
			tl.Allowed += r.Allowed
			tl.Degraded += r.Degraded
		}
		if tl.Allowed != 10 {
			t.Errorf("%s through %d nodes: %d of 30 allowed, want exactly 10", key, len(c.Nodes), tl.Allowed)
		}
	}
	t.Logf("exact through %d nodes: growth:hot %d of 1,000 (%d degraded rejections, %d failed); 10 keys 10 of 30 each",
		len(c.Nodes), hot.Allowed, hot.Degraded, hot.Failed)
	if err := c.Converged(); err != nil {
		t.Errorf("after the checks: %v (a member was declared dead meanwhile?)", err)
	}
}
