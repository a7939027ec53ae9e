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
