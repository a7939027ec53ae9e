package bucket

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/ringlimit/ringlimit/clock"
)

// peekDump is everything a store holds that a Peek must not change: each
// shard's keys in LRU order with their entries and logs, its counts, its
// limit table and its change marks.
type peekDump struct {
	Len      int
	Bytes    int64
	Pending  int64
	Shards   []peekShard
	Full     uint64
	Evicted  uint64
	Capacity int
}

type peekShard struct {
	Order  []string
	Entry  []entry
	Logs   map[string][]logRun
	N      int
	Bytes  int64
	Limits int
	Bits   []uint64
	Marked []uint32
	Counts []slotCount
	Free   []uint32
}

func dumpStore(s *Store) peekDump {
	d := peekDump{Len: s.Len(), Bytes: s.Bytes(), Pending: s.Pending(), Full: s.Full(), Evicted: s.Evictions(), Capacity: s.Capacity()}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		ps := peekShard{Logs: map[string][]logRun{}, N: sh.n, Bytes: sh.bytes, Limits: len(sh.limits),
			Bits: slices.Clone(sh.track.bits), Marked: slices.Clone(sh.track.marked),
			Counts: slices.Clone(sh.track.counts), Free: slices.Clone(sh.free)}
		for j := sh.head; j != none; j = sh.at(j).next {
			k := sh.key(j)
			ps.Order = append(ps.Order, k)
			ps.Entry = append(ps.Entry, *sh.at(j))
			if log, ok := sh.logs[j]; ok {
				ps.Logs[k] = slices.Clone(log)
			}
		}
		sh.mu.Unlock()
		d.Shards = append(d.Shards, ps)
	}
	return d
}

// TestPropPeekIsTake: for random histories on a few keys under every
// algorithm (and limits that change under a key), a Peek answers exactly
// what a Take at the same instant then answers, and changes nothing the
// store holds: keys, LRU order, states, logs, sizes, change marks. A Peek
// of a key the store never held answers a full key's decision and inserts
// nothing.
func TestPropPeekIsTake(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		s, err := NewStore(StoreConfig{MaxKeys: 8, Shards: 2, Track: true, Seed: 7})
		if err != nil {
			rt.Fatal(err)
		}
		var lims []Limit
		for _, alg := range []Algorithm{TokenBucket, LeakyBucket, FixedWindow, SlidingWindowCounter, SlidingWindowLog} {
			n := rapid.Int64Range(1, 20).Draw(rt, "limit")
			per := time.Duration(rapid.Int64Range(1, 3000).Draw(rt, "per_ms")) * time.Millisecond
			burst := int64(0)
			if alg == TokenBucket {
				burst = rapid.Int64Range(0, 25).Draw(rt, "burst")
			}
			lims = append(lims, MustLimit(alg, n, per, burst))
		}
		keys := []string{"a", "b", "c", "a-key-longer-than-twenty-three-bytes"}
		now := clock.Instant(rapid.Int64Range(0, int64(time.Hour)).Draw(rt, "start"))
		steps := rapid.IntRange(1, 60).Draw(rt, "steps")
		for i := range steps {
			now = now.Add(time.Duration(rapid.Int64Range(-5, 1500).Draw(rt, "step_ms")) * time.Millisecond)
			key := rapid.SampledFrom(keys).Draw(rt, "key")
			l := lims[rapid.IntRange(0, len(lims)-1).Draw(rt, "lim")]
			cost := rapid.Int64Range(1, l.Capacity()).Draw(rt, "cost")

			unknown := "never-" + key
			before := dumpStore(s)
			fresh, err := s.Peek(unknown, &l, now, cost)
			if err != nil {
				rt.Fatalf("step %d: Peek(%q): %v", i, unknown, err)
			}
			got, err := s.Peek(key, &l, now, cost)
			if err != nil {
				rt.Fatalf("step %d: Peek(%q): %v", i, key, err)
			}
			if after := dumpStore(s); !reflect.DeepEqual(before, after) {
				rt.Fatalf("step %d: Peek changed the store:\nbefore %+v\nafter  %+v", i, before, after)
			}
			want, err := s.Take(key, &l, now, cost)
			if err != nil {
				rt.Fatalf("step %d: Take(%q): %v", i, key, err)
			}
			if got != want {
				rt.Fatalf("step %d: Peek(%q, %v, cost %d) = %+v, Take = %+v", i, key, l, cost, got, want)
			}
			// A key never held answers as a new key's first Take does.
			blank, _ := NewStore(StoreConfig{MaxKeys: 8, Shards: 2})
			if first, _ := blank.Take(unknown, &l, now, cost); fresh != first {
				rt.Fatalf("step %d: Peek of an unknown key = %+v, a first Take = %+v", i, fresh, first)
			}
		}
	})
}

func TestPeekRefusesBadInput(t *testing.T) {
	s, err := NewStore(StoreConfig{MaxKeys: 8, Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	l := MustLimit(TokenBucket, 10, time.Second, 0)
	for _, tc := range []struct {
		key  string
		l    Limit
		cost int64
	}{{"", l, 1}, {"k", Limit{}, 1}, {"k", l, 0}, {"k", l, 11}, {"k", l, -1}} {
		if _, err := s.Peek(tc.key, &tc.l, 0, tc.cost); err == nil {
			t.Errorf("Peek(%q, %v, %d): no error", tc.key, tc.l, tc.cost)
		}
	}
	if s.Len() != 0 {
		t.Fatalf("Len = %d after refused peeks, want 0", s.Len())
	}
}

// TestPeekFullStore: a key the store has no room for is answered full and
// not inserted.
func TestPeekFullStore(t *testing.T) {
	s, err := NewStore(StoreConfig{MaxKeys: 2, Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	l := MustLimit(TokenBucket, 10, time.Minute, 0)
	for _, k := range []string{"a", "b"} {
		if _, err := s.Take(k, &l, 0, 5); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Take("c", &l, 0, 1); err != ErrFull {
		t.Fatalf("Take(c) = %v, want ErrFull", err)
	}
	d, err := s.Peek("c", &l, 0, 1)
	if err != nil || !d.Allowed || d.Remaining != 9 {
		t.Fatalf("Peek(c) = %+v, %v; want allowed, remaining 9", d, err)
	}
	if s.Len() != 2 || s.Has("c") {
		t.Fatalf("Len = %d, Has(c) = %v after Peek; want 2, false", s.Len(), s.Has("c"))
	}
}

func TestStoreReset(t *testing.T) {
	s, err := NewStore(StoreConfig{MaxKeys: 8, Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	l := MustLimit(TokenBucket, 10, time.Minute, 0)
	if _, err := s.Take("k", &l, 0, 7); err != nil {
		t.Fatal(err)
	}
	prev, held, err := s.Reset("k", &l, 0)
	if err != nil || !held || prev != 3 {
		t.Fatalf("Reset = %d, %v, %v; want 3, true, nil", prev, held, err)
	}
	if s.Len() != 0 {
		t.Fatalf("Len = %d after Reset, want 0", s.Len())
	}
	if d, _ := s.Take("k", &l, 0, 1); d.Remaining != 9 {
		t.Fatalf("after Reset: remaining %d, want 9", d.Remaining)
	}
	if prev, held, _ := s.Reset("other", &l, 0); held || prev != 10 {
		t.Fatalf("Reset(unknown) = %d, %v; want 10, false", prev, held)
	}
}
