package bucket

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/clock"
)

// changed drains s and returns each reported key's used.
func changed(s *Store, now clock.Instant) (map[string]int64, clock.Instant) {
	got := map[string]int64{}
	first := s.Changed(now, false, func(batch []Snapshot) {
		for _, b := range batch {
			got[b.Key] = b.Used
		}
	})
	return got, first
}

func TestTrackReportsEachChangedKeyOnce(t *testing.T) {
	s, err := NewStore(StoreConfig{MaxKeys: 8, Shards: 1, Track: true})
	if err != nil {
		t.Fatal(err)
	}
	l := MustLimit(TokenBucket, 3, time.Hour, 3)
	t0 := clock.Instant(time.Hour)
	for range 3 {
		s.Take("a", &l, t0, 1)
	}
	s.Take("b", &l, t0+1, 2)
	if d, _ := s.Take("b", &l, t0+2, 2); d.Allowed {
		t.Fatal("b admitted 4 of 3")
	}
	if n := s.Pending(); n != 2 {
		t.Fatalf("Pending = %d, want 2", n)
	}
	got, first := changed(s, t0+3)
	if want := map[string]int64{"a": 3, "b": 2}; !maps.Equal(got, want) || first != t0 {
		t.Fatalf("Changed = %v first %v, want %v first %v", got, first, want, t0)
	}
	if got, first := changed(s, t0+4); len(got) != 0 || first != 0 || s.Pending() != 0 {
		t.Fatalf("second Changed = %v first %v pending %d, want nothing", got, first, s.Pending())
	}
	// A refused check changes nothing.
	s.Take("a", &l, t0+5, 1)
	if got, _ := changed(s, t0+6); len(got) != 0 {
		t.Fatalf("after a refusal: %v, want nothing", got)
	}
	// Every other kind of change marks the key.
	s.Refund("a", &l, t0+7, 1)
	s.Set("c", &l, t0+7, 1)
	s.Charge("d", &l, t0+7, 2)
	s.Merge("b", &l, t0+7, 1) // less than b has: no change
	if got, _ := changed(s, t0+8); !maps.Equal(got, map[string]int64{"a": 2, "c": 1, "d": 2}) {
		t.Fatalf("after refund, set, charge and a merge that kept b: %v", got)
	}
	tb := MustLimit(TokenBucket, 10, time.Hour, 10)
	if n := s.Grant("e", &tb, t0+9, 4); n != 4 {
		t.Fatalf("Grant = %d", n)
	}
	// A key deleted after it changed is not reported.
	s.Take("b", &l, t0+9, 1)
	s.Delete("e")
	got, _ = changed(s, t0+10)
	if keys := slices.Sorted(maps.Keys(got)); !slices.Equal(keys, []string{"b"}) || got["b"] != 3 {
		t.Fatalf("after a grant to a deleted key and a check of b: %v, want only b with 3", got)
	}
}

func TestUntrackedStoreReportsNothing(t *testing.T) {
	s, err := NewStore(StoreConfig{MaxKeys: 4, Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	l := MustLimit(TokenBucket, 3, time.Hour, 3)
	s.Take("a", &l, 1, 1)
	if got, first := changed(s, 2); len(got) != 0 || first != 0 || s.Pending() != 0 {
		t.Fatalf("untracked store reported %v first %v", got, first)
	}
}

func TestChangedSpentOnlySkipsFullKeys(t *testing.T) {
	s, err := NewStore(StoreConfig{MaxKeys: 4, Shards: 1, Track: true})
	if err != nil {
		t.Fatal(err)
	}
	l := MustLimit(TokenBucket, 10, time.Second, 10) // one token every 100ms
	s.Take("refilled", &l, 0, 1)
	s.Take("spent", &l, 0, 1)
	s.Take("spent", &l, 50*clock.Instant(time.Millisecond), 3)
	got := map[string]int64{}
	s.Changed(clock.Instant(150*time.Millisecond), true, func(batch []Snapshot) {
		for _, b := range batch {
			got[b.Key] = b.Used
		}
	})
	// At 150ms "refilled" has its token back; "spent" spent 4, got 1 back.
	if !maps.Equal(got, map[string]int64{"spent": 3}) || s.Pending() != 0 {
		t.Fatalf("Changed(spentOnly) = %v, pending %d; want only spent with 3", got, s.Pending())
	}
}

// TakeUnsent counts the tokens a key admitted that no acknowledged round
// carries: admissions and grants add their cost, refusals and other
// changes nothing; a round (Changed) moves the count into flight, and
// only its acknowledgement (Acked) takes it off. A round that is never
// acknowledged keeps its tokens counted through the next one.
func TestTakeUnsentCountsUnacknowledgedTokens(t *testing.T) {
	s, err := NewStore(StoreConfig{MaxKeys: 4, Shards: 1, Track: true})
	if err != nil {
		t.Fatal(err)
	}
	l := MustLimit(TokenBucket, 20, time.Hour, 20)
	t0 := clock.Instant(time.Hour)
	const (
		none  = iota
		round // Changed: a round hands the key out
		ack   // Acked(the last round)
		both  // a round, acknowledged
	)
	steps := []struct {
		before  int
		cost    int64
		allowed bool
		unacked int64
	}{
		{none, 1, true, 1},
		{none, 2, true, 3},
		{round, 1, true, 4},  // 3 in flight, 1 since
		{ack, 1, true, 2},    // the 3 acknowledged
		{both, 3, true, 3},   // 2 sent and acknowledged
		{round, 1, true, 4},  // 3 in flight
		{round, 1, true, 5},  // a round lost (never acknowledged): 3 + 1 in flight
		{ack, 2, true, 3},    // both acknowledged by the later one's: 1 + 2
		{none, 20, false, 0}, // 12 spent of 20: refused, counts nothing
		{none, 8, true, 11},
		{both, 1, false, 0},
	}
	for i, st := range steps {
		if st.before == round || st.before == both {
			changed(s, t0)
		}
		if st.before == ack || st.before == both {
			s.Acked(s.Round())
		}
		d, unacked, err := s.TakeUnsent("k", &l, t0, st.cost)
		if err != nil || d.Allowed != st.allowed || unacked != st.unacked {
			t.Errorf("step %d: TakeUnsent(cost %d) = allowed %v unacked %d err %v, want %v %d", i, st.cost, d.Allowed, unacked, err, st.allowed, st.unacked)
		}
	}
	// A refund marks without counting; a grant counts what it took.
	s.Refund("k", &l, t0, 4)
	if n := s.Grant("k", &l, t0, 3); n != 3 {
		t.Fatalf("Grant = %d, want 3", n)
	}
	if _, unacked, _ := s.TakeUnsent("k", &l, t0, 1); unacked != 4 {
		t.Errorf("after a refund and a grant of 3: unacked %d, want 4", unacked)
	}
	// A key full again when its round hands it out holds nothing a copy
	// could lack.
	r := MustLimit(TokenBucket, 10, time.Second, 10)
	s.TakeUnsent("r", &r, t0, 5)
	changed(s, t0+clock.Instant(time.Second))
	if _, unacked, _ := s.TakeUnsent("r", &r, t0+clock.Instant(time.Second), 1); unacked != 1 {
		t.Errorf("after a round that found r full: unacked %d, want 1", unacked)
	}
	// Without tracking there is nothing to count.
	u, _ := NewStore(StoreConfig{MaxKeys: 4, Shards: 1})
	if _, unacked, _ := u.TakeUnsent("k", &l, t0, 1); unacked != 0 {
		t.Errorf("untracked store: unacked %d, want 0", unacked)
	}
}

// A key that refills faster than it spends reports no more than it holds
// spent: a crash cannot lose tokens the bucket has refilled since.
func TestTakeUnsentAtMostTheSpendHeld(t *testing.T) {
	s, err := NewStore(StoreConfig{MaxKeys: 4, Shards: 1, Track: true})
	if err != nil {
		t.Fatal(err)
	}
	fast := MustLimit(TokenBucket, 1000, time.Second, 10) // a token a millisecond
	t0 := clock.Instant(time.Hour)
	for i := range 50 {
		_, unacked, _ := s.TakeUnsent("fast", &fast, t0+clock.Instant(i)*clock.Instant(time.Millisecond), 1)
		if unacked != 1 {
			t.Fatalf("check %d, a millisecond after the last: unacked %d, want 1 (what the key holds spent)", i, unacked)
		}
	}
	// The same spends on a key that refills once an hour are all held.
	slow := MustLimit(TokenBucket, 1, time.Hour, 10)
	for i := range 5 {
		_, unacked, _ := s.TakeUnsent("slow", &slow, t0+clock.Instant(i)*clock.Instant(time.Millisecond), 1)
		if want := int64(i + 1); unacked != want {
			t.Fatalf("slow check %d: unacked %d, want %d", i, unacked, want)
		}
	}
}

// A hand-out whose copy was not acknowledged gives its tokens back with
// Mark: acknowledging the round then clears every other key, not that one.
func TestMarkGivesBackUnacknowledgedTokens(t *testing.T) {
	s, err := NewStore(StoreConfig{MaxKeys: 8, Shards: 1, Track: true})
	if err != nil {
		t.Fatal(err)
	}
	l := MustLimit(TokenBucket, 100, time.Hour, 100)
	t0 := clock.Instant(time.Hour)
	for range 4 {
		s.TakeUnsent("ok", &l, t0, 1)
		s.TakeUnsent("lost", &l, t0, 2)
	}
	got := map[string]int64{}
	s.Changed(t0, true, func(batch []Snapshot) {
		for _, b := range batch {
			got[b.Key] = b.Unacked
		}
	})
	if want := map[string]int64{"ok": 4, "lost": 8}; !maps.Equal(got, want) {
		t.Fatalf("Changed handed out %v, want %v", got, want)
	}
	s.Mark("lost", t0, got["lost"])
	s.Acked(s.Round())
	if _, n, _ := s.TakeUnsent("ok", &l, t0, 1); n != 1 {
		t.Errorf("ok after its round was acknowledged: %d unacknowledged, want 1", n)
	}
	if _, n, _ := s.TakeUnsent("lost", &l, t0, 1); n != 9 {
		t.Errorf("lost after its copy was given back: %d unacknowledged, want 8 + 1", n)
	}
}
