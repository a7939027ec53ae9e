package forward

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/internal/peermsg"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
)

// TestReplicaNeverReplacesOwnedLeases: a replica of a key's lease set
// replaces what its successor holds, but a node that owns the key on its
// own ring keeps its set: a member whose ring briefly names itself the
// owner (one rejoining after a partition) sends its stale set, which
// would drop leases the owner granted. The owner merges it instead.
func TestReplicaNeverReplacesOwnedLeases(t *testing.T) {
	clk := testkit.NewClock(0)
	a := startNode(t, "A", clk, nil)
	b := startNode(t, "B", clk, nil)
	setMembers(membersOf(a, b), a, b)
	rg, err := newRing([]string{"A", "B"})
	if err != nil {
		t.Fatal(err)
	}
	key := ""
	for i := 0; key == ""; i++ {
		if k := "c|owned-" + strconv.Itoa(i); ownerIn(rg, "", k) == "A" {
			key = k
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range 3 {
		res, err := a.r.Acquire(ctx, Acquire{Key: key, Limit: concurrency(5), Mode: bucket.FailClosed, TTL: 30 * time.Second})
		if err != nil || !res.Allowed || res.InFlight != int64(i+1) {
			t.Fatalf("acquire %d: %+v %v", i, res, err)
		}
	}
	stale := peermsg.State{Key: key, Limit: concurrency(5), LeaseSet: true}
	if _, err := a.r.Replicate("B", []peermsg.State{stale}); err != nil {
		t.Fatal(err)
	}
	if n := a.r.InFlight(key); n != 3 {
		t.Fatalf("owner A holds %d leases after B's empty replica of its key, want 3", n)
	}
	if n := b.r.InFlight(key); n != 3 {
		t.Fatalf("successor B holds %d leases, want the 3 replicated before each answer", n)
	}
	// A replica of a key the receiver does not own still replaces its set.
	if _, err := b.r.Replicate("A", []peermsg.State{stale}); err != nil {
		t.Fatal(err)
	}
	if n := b.r.InFlight(key); n != 0 {
		t.Fatalf("successor B holds %d leases after its owner's empty set, want 0", n)
	}
}
