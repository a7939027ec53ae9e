package forward

import (
	"context"
	"fmt"
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

// startFalseDeath starts A, B and C, all three on every ring, and finds a
// key (prefix and a number) that A owns, B is the successor of, and B owns
// once A is dropped.
func startFalseDeath(t *testing.T, prefix string) (clk *testkit.Clock, a, b, c *node, key string) {
	t.Helper()
	clk = testkit.NewClock(0)
	nodes := startNodes(t, clk, nil, "A", "B", "C")
	a, b, c = nodes[0], nodes[1], nodes[2]
	setMembers(membersOf(a, b, c), a, b, c)
	all, err := newRing([]string{"A", "B", "C"})
	if err != nil {
		t.Fatal(err)
	}
	rest, err := newRing([]string{"B", "C"})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; key == ""; i++ {
		k := prefix + strconv.Itoa(i)
		if ownerIn(all, "", k) == "A" && ownerIn(rest, "", k) == "B" && all.AppendSuccessors(nil, k, 1)[0] == "B" {
			key = k
		}
	}
	return clk, a, b, c, key
}

// TestFalseDeathGrantsNoLeaseTwice: a member that falsely declares a key's
// owner dead takes the key over while the owner, alive, still grants its
// leases. The usurper is the owner's successor, so the owner's lease sets
// reach it as replicas. Were it to take them, the owner, unaware of the
// usurper's own grants, would keep granting on its own count, and the two
// together would hold more leases than the limit. The usurper refuses the
// replicas of a member its ring has dropped: the owner's round fails, and
// its grant with it.
func TestFalseDeathGrantsNoLeaseTwice(t *testing.T) {
	_, a, b, c, key := startFalseDeath(t, "c|false-death-")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const limit = 5
	acq := Acquire{Key: key, Limit: concurrency(limit), Mode: bucket.FailClosed, TTL: 30 * time.Second}
	for i := range 2 {
		res, err := a.r.Acquire(ctx, acq)
		if err != nil || !res.Allowed {
			t.Fatalf("acquire %d through A before the false death: %+v %v", i, res, err)
		}
	}
	if n := b.r.InFlight(key); n != 2 {
		t.Fatalf("successor B holds %d leases, want the 2 A replicated", n)
	}
	// B and C declare A dead; A, alive, still sees all three.
	falseDeath := []Member{{Name: "A", Addr: a.addr, Down: true}, {Name: "B", Addr: b.addr}, {Name: "C", Addr: c.addr}}
	setMembers(falseDeath, b, c)

	granted := map[string]int{"A": 2}
	for i := range 12 {
		via := []*node{a, b}[i%2]
		res, err := via.r.Acquire(ctx, acq)
		if err != nil {
			t.Fatalf("acquire %d through %s: %v", i, via.name, err)
		}
		if res.Allowed {
			granted[via.name]++
		}
	}
	if total := granted["A"] + granted["B"]; total != limit {
		t.Errorf("granted %v: %d leases held at once, want exactly %d", granted, total, limit)
	}
	if granted["A"] != 2 {
		t.Errorf("A granted %d leases after B took the key over, want 0 (its successor refuses its replicas)", granted["A"]-2)
	}
	if n := b.r.InFlight(key); n != limit {
		t.Errorf("B, the key's owner on its ring, holds %d leases, want %d", n, limit)
	}
}

// TestResumedOwnerLearnsSuccessorsLeases: B and C declare A, the key's
// owner, dead, and B grants the key's leases; A's ring never changed
// (a stalled process resuming before it learns it was declared dead), so
// once B and C see it again, A decides on a set that lacks B's grants. B,
// its successor, refuses a replica that would drop them: the round fails
// (undoing what it carried on A), B keeps every lease, and hands A the
// union, after which A refuses what the five held leave no room for and B
// takes A's replicas again.
func TestResumedOwnerLearnsSuccessorsLeases(t *testing.T) {
	clk, a, b, c, key := startFalseDeath(t, "c|resumed-")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const limit = 5
	acq := Acquire{Key: key, Limit: concurrency(limit), Mode: bucket.FailClosed, TTL: 30 * time.Second}
	for i := range 2 {
		if res, err := a.r.Acquire(ctx, acq); err != nil || !res.Allowed {
			t.Fatalf("acquire %d through A: %+v %v", i, res, err)
		}
	}
	stale := leaseState(a.r.slots, key, concurrency(limit), clk.Now()) // A's set: its 2
	setMembers([]Member{{Name: "A", Addr: a.addr, Down: true}, {Name: "B", Addr: b.addr}, {Name: "C", Addr: c.addr}}, b, c)
	for i := range 3 {
		if res, err := b.r.Acquire(ctx, acq); err != nil || !res.Allowed {
			t.Fatalf("acquire %d through B, the owner on its ring: %+v %v", i, res, err)
		}
	}
	setMembers(membersOf(a, b, c), b, c)
	if _, err := b.r.Replicate("A", []peermsg.State{stale}); err == nil {
		t.Fatal("B took A's replica of 2 leases while it holds 3 more A never counted")
	}
	if n := b.r.InFlight(key); n != limit {
		t.Fatalf("B holds %d leases after the refused replica, want %d", n, limit)
	}
	testkit.WaitFor(t, 10*time.Second, "A holding B's leases", func() error {
		if n := a.r.InFlight(key); n != limit {
			return fmt.Errorf("A holds %d leases, want %d", n, limit)
		}
		return nil
	})
	for i := range 3 {
		res, err := a.r.Acquire(ctx, acq)
		if err != nil || res.Allowed || res.Degraded {
			t.Fatalf("acquire %d through A with %d held: %+v %v, want refused", i, limit, res, err)
		}
	}
	full := leaseState(a.r.slots, key, concurrency(limit), clk.Now())
	if _, err := b.r.Replicate("A", []peermsg.State{full}); err != nil {
		t.Fatalf("B refused A's replica naming all %d leases: %v", limit, err)
	}
}
