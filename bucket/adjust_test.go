package bucket

import (
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/clock"
)

func TestSetAndCharge(t *testing.T) {
	for _, alg := range []Algorithm{TokenBucket, LeakyBucket, FixedWindow, SlidingWindowLog, SlidingWindowCounter} {
		t.Run(alg.String(), func(t *testing.T) {
			s, err := NewStore(StoreConfig{MaxKeys: 16, Shards: 1})
			if err != nil {
				t.Fatal(err)
			}
			l, err := NewLimit(alg, 100, time.Hour, 100)
			if err != nil {
				t.Fatal(err)
			}
			now := clock.Instant(time.Hour) // inside one fixed window
			used := func() int64 {
				t.Helper()
				_, u, ok := s.Used("k", now)
				if !ok {
					t.Fatal("k not held")
				}
				return u
			}
			if err := s.Charge("k", &l, now, 30); err != nil || used() != 30 {
				t.Fatalf("charge of a new key: used %d, err %v; want 30", used(), err)
			}
			if err := s.Charge("k", &l, now, 25); err != nil || used() != 55 {
				t.Fatalf("second charge: used %d, err %v; want 55", used(), err)
			}
			if err := s.Charge("k", &l, now, 80); err != nil || used() != 100 {
				t.Fatalf("charge beyond capacity: used %d, err %v; want 100", used(), err)
			}
			if err := s.Set("k", &l, now, 12); err != nil || used() != 12 {
				t.Fatalf("set: used %d, err %v; want 12", used(), err)
			}
			if err := s.Charge("k", &l, now, 0); err != nil || used() != 12 {
				t.Fatalf("charge of 0: used %d, err %v; want 12", used(), err)
			}
			d, _ := s.Take("k", &l, now, 88)
			if !d.Allowed || d.Remaining != 0 {
				t.Fatalf("take of the 88 left: %+v", d)
			}
			if err := s.Set("", &l, now, 1); err == nil {
				t.Fatal("Set accepted an empty key")
			}
			if err := s.Charge("k2", &Limit{}, now, 1); err == nil || s.Has("k2") {
				t.Fatal("Charge accepted a zero limit or stored the key")
			}
		})
	}
}

func TestMergeEachMatchesMerge(t *testing.T) {
	l := MustLimit(TokenBucket, 100, time.Hour, 100)
	w := MustLimit(FixedWindow, 100, time.Hour, 0)
	type st struct {
		key  string
		l    *Limit
		used int64
	}
	states := []st{{"a", &l, 5}, {"b", &l, 7}, {"", &l, 1}, {"c", &Limit{}, 1}, {"a", &l, 3}, {"d", &w, 9}, {"e", &l, 0}}
	for i := range 200 {
		states = append(states, st{fmt.Sprintf("k%d", i), &l, int64(i % 50)})
	}
	one, _ := NewStore(StoreConfig{MaxKeys: 1024, Shards: 16})
	each, _ := NewStore(StoreConfig{MaxKeys: 1024, Shards: 16, Track: true})
	now := clock.Instant(time.Hour)
	one.Merge("b", &l, now, 9) // held before: the larger stays
	each.Merge("b", &l, now, 9)
	each.Changed(now, false, func([]Snapshot) {})
	merged := 0
	for _, s := range states {
		if one.Merge(s.key, s.l, now, s.used) == nil {
			merged++
		}
	}
	if got := each.MergeEach(now, len(states), func(i int) (string, *Limit, int64) {
		return states[i].key, states[i].l, states[i].used
	}); got != merged {
		t.Fatalf("MergeEach merged %d, Merge %d", got, merged)
	}
	if one.Len() != each.Len() {
		t.Fatalf("%d keys held, want %d", each.Len(), one.Len())
	}
	one.Range(now, func(batch []Snapshot) bool {
		for _, b := range batch {
			if _, u, ok := each.Used(b.Key, now); !ok || u != b.Used {
				t.Errorf("%s: used %d (held %v), want %d", b.Key, u, ok, b.Used)
			}
		}
		return true
	})
	// b kept its 9; every key that took a state is marked, b is not.
	reported := map[string]bool{}
	each.Changed(now, false, func(batch []Snapshot) {
		for _, b := range batch {
			reported[b.Key] = true
		}
	})
	if reported["b"] || !reported["a"] || !reported["k199"] {
		t.Fatalf("marked after MergeEach: b %v, a %v, k199 %v; want false, true, true", reported["b"], reported["a"], reported["k199"])
	}
}
