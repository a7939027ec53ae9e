package forward

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
)

// A release is answered without waiting for a replication round: with the
// successor holding every round, it answers released, 0 in flight, and
// only the acquire before it waited for a round (1 wait); the round it
// started is the one the successor holds.
func TestReleaseAnswersBeforeItsRound(t *testing.T) {
	r, peers, reg, _ := replicatingRouter(t, 10)
	key := ""
	for i := 0; key == ""; i++ {
		if k := fmt.Sprintf("%srel-%d", bucket.NamespaceConcurrency, i); ownerIn(r.view.Load().ring, "A", k) == "A" {
			key = k
		}
	}
	r.cfg.Clock.(*testkit.Clock).Advance(r.cfg.Grace) // no previous owner's set to wait for
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := r.Acquire(ctx, Acquire{Key: key, Limit: concurrency(2), Mode: bucket.FailClosed, TTL: 10 * time.Second})
	if err != nil || !res.Allowed || res.InFlight != 1 {
		t.Fatalf("acquire: %+v %v", res, err)
	}
	rounds := peers.calls()
	// Set before the release's kick, which orders it before the round.
	gate, entered := peers.hold()
	defer close(gate)
	rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
	defer rcancel()
	rel, err := r.Release(rctx, res.Lease, OutcomeOK, time.Millisecond)
	if err != nil || !rel.Released || rel.InFlight != 0 || rctx.Err() != nil {
		t.Fatalf("release: %+v %v (ctx %v), want released at once, 0 in flight", rel, err, rctx.Err())
	}
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("the release started no round")
	}
	if w := testkit.Metric(t, reg, "ringlimit_replication_waits_total"); w != 1 {
		t.Fatalf("%v answers waited for a round, want 1 (the acquire)", w)
	}
	if n := peers.calls(); n != rounds {
		t.Fatalf("%d rounds acknowledged before the held one, want %d", n, rounds)
	}
}
