package bucket

import (
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/clock"
)

func TestTombstones(t *testing.T) {
	s, err := NewStore(StoreConfig{MaxKeys: 64, Shards: 1, Track: true})
	if err != nil {
		t.Fatal(err)
	}
	l := MustLimit(TokenBucket, 10, 10*time.Second, 0) // refills from empty in 10 s
	now := clock.Instant(time.Hour)
	if _, err := s.Take("k", &l, now, 10); err != nil {
		t.Fatal(err)
	}
	var before []Snapshot
	s.Changed(now, false, func(b []Snapshot) { before = append(before, b...) })
	if len(before) != 1 || before[0].ResetAt != 0 || before[0].Used != 10 {
		t.Fatalf("Changed before the reset = %+v; want k used 10, reset_at 0", before)
	}
	at := int64(now) + 5
	prev, held, err := s.ResetAt("k", &l, now, at)
	if err != nil || !held || prev != 0 {
		t.Fatalf("ResetAt = %d, %v, %v; want 0, true, nil", prev, held, err)
	}
	if got := s.Tombstone("k", now); got != at {
		t.Fatalf("Tombstone = %d, want %d", got, at)
	}
	// A state from before the reset (reset_at 0 or older) is refused; one
	// that knows the reset is taken.
	for _, tc := range []struct {
		resetAt int64
		want    bool
	}{{0, false}, {at - 1, false}, {at, true}} {
		if got, _ := s.Admit("k", &l, now, tc.resetAt); got != tc.want {
			t.Errorf("Admit(reset_at %d) = %v, want %v", tc.resetAt, got, tc.want)
		}
	}
	if s.Has("k") {
		t.Fatal("the reset key is held again")
	}
	// After the refill time the tombstone no longer matters.
	later := clock.Instant(at).Add(10 * time.Second) // the refill time after the reset
	if ok, _ := s.Admit("k", &l, later, 0); !ok || s.Tombstone("k", later) != 0 {
		t.Fatal("a tombstone outlived its limit's refill time")
	}
	// A later reset_at than the store's resets the key here first.
	if _, err := s.Take("j", &l, now, 4); err != nil {
		t.Fatal(err)
	}
	if ok, reset := s.Admit("j", &l, now, at); !ok || !reset || s.Has("j") || s.Tombstone("j", now) != at {
		t.Fatal("Admit of a later reset_at did not reset the key and adopt the tombstone")
	}
	s.Take("j", &l, now, 3)
	var after []Snapshot
	s.Changed(now, false, func(b []Snapshot) { after = append(after, b...) })
	if len(after) != 1 || after[0].Key != "j" || after[0].ResetAt != at || after[0].Used != 3 {
		t.Fatalf("Changed after = %+v; want j used 3 reset_at %d", after, at)
	}
	if _, used, resetAt, ok := s.UsedReset("k", now); ok || used != 0 || resetAt != at {
		t.Fatalf("UsedReset(k) = %d, %d, %v", used, resetAt, ok)
	}
}

// Past the bound in count, the oldest tombstone goes first.
func TestTombstonesBounded(t *testing.T) {
	s, err := NewStore(StoreConfig{MaxKeys: 64, Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	l := MustLimit(TokenBucket, 10, time.Hour, 0)
	for i := range maxTombsPerShard + 10 {
		if _, _, err := s.ResetAt(fmt.Sprint("k", i), &l, 0, int64(i+1)); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.Tombstones(); n != maxTombsPerShard {
		t.Fatalf("Tombstones = %d, want %d", n, maxTombsPerShard)
	}
	if s.Tombstone("k0", 0) != 0 || s.Tombstone("k9", 0) != 0 || s.Tombstone("k10", 0) != 11 {
		t.Fatal("the oldest tombstones were not the ones dropped")
	}
}

// TestRangeTombstones: RangeTombstones reads each tombstone that still
// matters with the limit it was recorded under (ResetAt's and Admit's),
// and recording one it read with Admit on another store gives it the same
// end: matters 1ns before it, not at it.
func TestRangeTombstones(t *testing.T) {
	s, err := NewStore(StoreConfig{MaxKeys: 64, Shards: 4})
	if err != nil {
		t.Fatal(err)
	}
	ten := MustLimit(TokenBucket, 10, 10*time.Second, 0) // refills in 10 s
	day := MustLimit(FixedWindow, 5, 24*time.Hour, 0)    // a day
	now := clock.Instant(time.Hour)
	if _, _, err := s.ResetAt("a", &ten, now, int64(now)); err != nil {
		t.Fatal(err)
	}
	if ok, _ := s.Admit("b", &day, now, int64(now)+1); !ok {
		t.Fatal("Admit refused a state with a tombstone")
	}
	read := func(s *Store, at clock.Instant) map[string]Tomb {
		got := map[string]Tomb{}
		s.RangeTombstones(at, func(b []Tomb) bool {
			for _, tb := range b {
				got[tb.Key] = tb
			}
			return true
		})
		return got
	}
	got := read(s, now)
	if len(got) != 2 || got["a"] != (Tomb{Key: "a", Limit: ten, At: int64(now)}) || got["b"] != (Tomb{Key: "b", Limit: day, At: int64(now) + 1}) {
		t.Fatalf("RangeTombstones = %+v", got)
	}
	if later := read(s, now.Add(10*time.Second)); len(later) != 1 || later["b"].Key != "b" {
		t.Fatalf("RangeTombstones 10s later = %+v; want only b's (a's ended)", later)
	}
	o, err := NewStore(StoreConfig{MaxKeys: 64, Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, tb := range got { // both, read at now
		o.Admit(tb.Key, &tb.Limit, now, tb.At)
	}
	end := clock.Instant(int64(now) + 1).Add(24 * time.Hour)
	if o.Tombstone("b", end-1) != int64(now)+1 || o.Tombstone("b", end) != 0 || o.Tombstone("a", now) == 0 {
		t.Fatalf("tombstones recorded from RangeTombstones: b %d at its end-1ns, %d at its end; a %d",
			o.Tombstone("b", end-1), o.Tombstone("b", end), o.Tombstone("a", now))
	}
}
