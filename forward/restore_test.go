package forward

import (
	"context"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/internal/peermsg"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
)

// TestExportRestore: A spends 3 of a key, reserves 2 of another (a
// 1-minute reservation) and 2 of a third whose spend refills within the
// second, and holds a 30s lease of a concurrency key; B keeps A's replica.
// What A exports (no full key; the third key, full again, for its
// reservation) is put back 10s later into a node of its own, D: the spend
// (3), the reservations (settleable for 50s more), the lease (20s left),
// and, from B's export, the replica.
func TestExportRestore(t *testing.T) {
	clk := testkit.NewClock(0)
	a, b := startNode(t, "A", clk, nil), startNode(t, "B", clk, nil)
	formCluster(clk, a, b)
	keys := keysOwnedBy(t, a.r, "A", "keep", 3)
	day := bucket.MustLimit(bucket.TokenBucket, 10, 24*time.Hour, 0)
	var out [1]Result
	if err := a.r.Check(context.Background(), []Check{{Key: keys[0], Limit: day, Cost: 3, Sync: true}}, out[:]); err != nil || !out[0].Allowed {
		t.Fatalf("spend: %+v %v", out[0], err)
	}
	if err := a.r.Check(context.Background(), []Check{{Key: keys[1], Limit: day, Cost: 2, Reserve: time.Minute}}, out[:]); err != nil || out[0].Reservation == "" {
		t.Fatalf("reserve: %+v %v", out[0], err)
	}
	rid := out[0].Reservation
	second := bucket.MustLimit(bucket.TokenBucket, 10, time.Second, 0)
	if err := a.r.Check(context.Background(), []Check{{Key: keys[2], Limit: second, Cost: 2, Reserve: time.Minute}}, out[:]); err != nil || out[0].Reservation == "" {
		t.Fatalf("reserve: %+v %v", out[0], err)
	}
	refilled := out[0].Reservation
	ckey := keysOwnedBy(t, a.r, "A", bucket.NamespaceConcurrency+"keep", 1)[0]
	lease, err := a.r.Acquire(context.Background(), Acquire{Key: ckey, Limit: concurrency(5), Mode: bucket.FailClosed, TTL: 30 * time.Second})
	if err != nil || !lease.Allowed {
		t.Fatalf("acquire: %+v %v", lease, err)
	}
	check1(t, a.r, "full-key", bucket.MustLimit(bucket.TokenBucket, 10, time.Second, 0), 1)
	clk.Advance(time.Second) // full-key is full again: not exported
	saved := a.r.Export()
	byKey := map[string]peermsg.State{}
	for _, st := range saved.Own {
		byKey[st.Key] = st
	}
	if len(saved.Own) != 4 || byKey[keys[0]].Used != 3 || byKey[keys[1]].Used != 2 || len(byKey[keys[1]].Reservations) != 1 ||
		byKey[keys[2]].Used != 0 || len(byKey[keys[2]].Reservations) != 1 || !byKey[ckey].LeaseSet || len(byKey[ckey].Leases) != 1 {
		t.Fatalf("A's export: %+v", saved.Own)
	}
	fromB := b.r.Export()
	if reps := fromB.Replicas["A"]; len(reps) == 0 {
		t.Fatalf("B's export has no replica of A: %+v", fromB)
	}

	clk.Advance(10 * time.Second)
	d := startNode(t, "D", clk, nil)
	setMembers(membersOf(d), d)
	k, ls, reps, _ := d.r.Restore(saved)
	if k != 2 || ls != 1 || reps != 0 { // the key full again brings its reservation, no spend
		t.Fatalf("Restore put back %d keys, %d lease sets, %d replicas; want 2, 1, 0", k, ls, reps)
	}
	if _, used, ok := d.store.Used(keys[0], clk.Now()); !ok || used != 3 {
		t.Fatalf("D's %s: used %d (held %v), want 3", keys[0], used, ok)
	}
	if got := d.r.InFlight(ckey); got != 1 {
		t.Fatalf("D holds %d leases of %s, want 1", got, ckey)
	}
	held := d.r.slots.Held(ckey, clk.Now())
	if len(held) != 1 || held[0].ID != lease.Lease || held[0].Expires.Sub(clk.Now()) != 19*time.Second {
		t.Fatalf("D's lease: %+v; want %s with 19s left (30s less the 1s before the export and the 10s since)", held, lease.Lease)
	}
	if _, err := d.r.Settle(context.Background(), rid, 1); err != nil {
		t.Fatalf("settle on D of the reservation restored: %v", err)
	}
	if _, err := d.r.Settle(context.Background(), rid, 1); err == nil {
		t.Fatal("a second settle on D succeeded")
	}
	if _, err := d.r.Settle(context.Background(), refilled, 1); err != nil {
		t.Fatalf("settle on D of the reservation of a key full again: %v", err)
	}
}

// restoredOnBoth forms A and B and restores, on each, a key A owns with
// 700 spent (10,000 a year), as if each had kept a copy in its state file.
func restoredOnBoth(t *testing.T) (clk *testkit.Clock, a, b *node, key string) {
	t.Helper()
	clk = testkit.NewClock(0)
	a, b = startNode(t, "A", clk, nil), startNode(t, "B", clk, nil)
	formCluster(clk, a, b)
	key = keysOwnedBy(t, a.r, "A", "restored", 1)[0]
	lim := bucket.MustLimit(bucket.TokenBucket, 10_000, 8784*time.Hour, 0)
	saved := Saved{At: clk.Now(), Own: []peermsg.State{{Key: key, Limit: lim, Used: 700}}, Replicas: map[string][]peermsg.State{}}
	for _, n := range []*node{a, b} {
		if k, _, _, _ := n.r.Restore(saved); k != 1 {
			t.Fatalf("%s restored %d keys", n.name, k)
		}
	}
	return clk, a, b, key
}

// TestRestoredCopiesCountOnce: A and B both restore the key A owns with
// 700 spent (each node kept a copy in its state file); B hands its whole
// copy to A, which counts nothing of it again: A's copy stays at 700.
func TestRestoredCopiesCountOnce(t *testing.T) {
	clk, a, b, key := restoredOnBoth(t)
	b.r.handoff.trigger()
	// 10ms of the fake clock a poll: at most 20s in the 10s given, inside
	// the minute in which restored copies are counted once.
	advanceUntil(t, clk, 10*time.Millisecond, 10*time.Second, "B's copy handed to A", func() bool {
		return testkit.Metric(t, a.reg, "ringlimit_handoff_keys_received_total") >= 1
	})
	if _, used, _ := a.store.Used(key, clk.Now()); used != 700 {
		t.Fatalf("A's copy after B's whole copy arrived: used %d, want 700 (counted once)", used)
	}
}

// TestRestoredCopyAndReplicaCountOnce: as TestRestoredCopiesCountOnce, but
// A's replica of the key reaches B before B hands its copy to A: B's copy,
// restored with 700, counts nothing of A's whole 700 again, and neither
// does A's after B's handoff.
func TestRestoredCopyAndReplicaCountOnce(t *testing.T) {
	clk, a, b, key := restoredOnBoth(t)
	// B knows it holds a key it does not own (as once its handoff has
	// begun); A's ring change sends every key it owns to B.
	b.r.handoff.mayHoldForeign()
	a.r.repl.ringChanged()
	advanceUntil(t, clk, 10*time.Millisecond, 10*time.Second, "A's replica at B", func() bool {
		used, _ := b.r.shared.used("A", key, clk.Now())
		return used == 700
	})
	if _, used, _ := b.store.Used(key, clk.Now()); used != 700 {
		t.Fatalf("B's copy after A's replica arrived: used %d, want 700 (counted once)", used)
	}
	b.r.handoff.trigger()
	advanceUntil(t, clk, 10*time.Millisecond, 10*time.Second, "B's copy handed to A", func() bool {
		return testkit.Metric(t, a.reg, "ringlimit_handoff_keys_received_total") >= 1
	})
	if _, used, _ := a.store.Used(key, clk.Now()); used != 700 {
		t.Fatalf("A's copy after B's handoff: used %d, want 700 (counted once)", used)
	}
}

// resetRun is what spendExportReset did.
type resetRun struct {
	a, b   *node
	key    string       // A's
	year   bucket.Limit // 1,000 a year
	before Saved        // A's export with 700 spent
	at     int64        // the reset's instant
}

// spendExportReset forms A and B, spends 700 of a key A owns (1,000 a
// year; B keeps the replica), exports A, and a second later resets the
// key through A (previous 300, B confirming).
func spendExportReset(t *testing.T, clk *testkit.Clock) resetRun {
	t.Helper()
	rs := resetRun{a: startNode(t, "A", clk, nil), b: startNode(t, "B", clk, nil), year: bucket.MustLimit(bucket.TokenBucket, 1000, 8784*time.Hour, 0)}
	formCluster(clk, rs.a, rs.b)
	rs.key = keysOwnedBy(t, rs.a.r, "A", "reset", 1)[0]
	var out [1]Result
	if err := rs.a.r.Check(context.Background(), []Check{{Key: rs.key, Limit: rs.year, Cost: 700, Sync: true}}, out[:]); err != nil || !out[0].Allowed {
		t.Fatalf("spend: %+v %v", out[0], err)
	}
	rs.before = rs.a.r.Export()
	clk.Advance(time.Second)
	rs.at = int64(clk.Now())
	if res, err := rs.a.r.Reset(context.Background(), rs.key, rs.year); err != nil || res.Previous != 300 || len(res.Unconfirmed) != 0 {
		t.Fatalf("reset: %+v %v", res, err)
	}
	return rs
}

// TestExportRestoreTombstone: A spends 700 of a key it owns and exports;
// the key is reset (B, told, records the tombstone too) and A and B export
// again: both carry the tombstone (nothing spent, ResetAt the reset's
// instant). D restores A's export from after the reset (the tombstone),
// then the one from before (700 spent): the older state is refused, and
// so is a replica from before the reset arriving later. E restores them
// in the other order: the tombstone drops the 700 restored first.
func TestExportRestoreTombstone(t *testing.T) {
	clk := testkit.NewClock(0)
	rs := spendExportReset(t, clk)
	a, b, key, year, before, at := rs.a, rs.b, rs.key, rs.year, rs.before, rs.at
	clk.Advance(time.Second)
	for _, n := range []*node{a, b} {
		saved := n.r.Export()
		if len(saved.Own) != 1 || saved.Own[0].Key != key || saved.Own[0].Used != 0 || saved.Own[0].ResetAt != at ||
			saved.Own[0].Limit != year {
			t.Fatalf("%s's export after the reset: %+v; want only %s's tombstone at %d", n.name, saved.Own, key, at)
		}
	}
	after := a.r.Export()

	d := startNode(t, "D", clk, nil)
	setMembers(membersOf(d), d)
	if k, _, _, tombs := d.r.Restore(after); k != 0 || tombs != 1 {
		t.Fatalf("D restored %d keys, %d tombstones from the export after the reset; want 0, 1", k, tombs)
	}
	if got := d.store.Tombstone(key, clk.Now()); got != at {
		t.Fatalf("D's tombstone of %s: %d, want %d", key, got, at)
	}
	if k, _, _, _ := d.r.Restore(before); k != 0 {
		t.Fatalf("D restored %d keys from the export before the reset; want 0 (refused)", k)
	}
	if _, used, ok := d.store.Used(key, clk.Now()); ok {
		t.Fatalf("D holds %s with %d spent, want it full", key, used)
	}
	if d.r.admit(&peermsg.State{Key: key, Limit: year, Used: 700}, clk.Now()) {
		t.Fatal("D admitted a replica from before the reset")
	}

	e := startNode(t, "E", clk, nil)
	setMembers(membersOf(e), e)
	if k, _, _, _ := e.r.Restore(before); k != 1 {
		t.Fatalf("E restored %d keys from the export before the reset; want 1", k)
	}
	if k, _, _, tombs := e.r.Restore(after); k != 0 || tombs != 1 {
		t.Fatalf("E restored %d keys, %d tombstones from the export after the reset; want 0, 1", k, tombs)
	}
	if _, used, ok := e.store.Used(key, clk.Now()); ok {
		t.Fatalf("E holds %s with %d spent after the tombstone, want it full", key, used)
	}
}

// TestRefusedReplicaTellsReset: A spends 700 of a key it owns and exports,
// then resets the key (B records the tombstone). A restarts on that export
// (700 spent, no tombstone) back on the same ring, so that no ring change
// tells it the reset: its next replica, 1 more spent, is refused by B,
// which tells A the reset; A then holds the tombstone and the key counts
// from full: a check of 1 leaves 999.
func TestRefusedReplicaTellsReset(t *testing.T) {
	clk := testkit.NewClock(0)
	rs := spendExportReset(t, clk)
	a, b, key, year, before, at := rs.a, rs.b, rs.key, rs.year, rs.before, rs.at
	var out [1]Result
	a.stop()
	a2 := startNode(t, "A", clk, nil)
	if k, _, _, _ := a2.r.Restore(before); k != 1 {
		t.Fatalf("A restored %d keys, want 1", k)
	}
	setMembers(membersOf(a2, b), a2, b)
	clk.Advance(testGrace)
	if err := a2.r.Check(context.Background(), []Check{{Key: key, Limit: year, Cost: 1, Sync: true}}, out[:]); err != nil || out[0].Remaining != 299 {
		t.Fatalf("A's check on its restored copy: %+v %v; want 299 left", out[0], err)
	}
	testkit.Eventually(t, 10*time.Second, "B tells A the reset", func() bool { return a2.store.Tombstone(key, clk.Now()) == at })
	if got := check1(t, a2.r, key, year, 1); !got.Allowed || got.Remaining != 999 {
		t.Fatalf("A's check after it was told the reset: %+v, want 999 left", got)
	}
}
