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
