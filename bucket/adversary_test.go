package bucket

// The store against the clients it limits and the peers it trusts: a
// flood aimed at one shard, a byte budget filled with long keys, peer
// states that must not drop spent keys, and peer values (used, spend) that
// must not wrap into a refill.

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	"pgregory.net/rapid"

	"github.com/ringlimit/ringlimit/clock"
)

// fataler is what the helpers need of a *testing.T or a *rapid.T.
type fataler interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

func mustStore(t fataler, cfg StoreConfig) *Store {
	t.Helper()
	s, err := NewStore(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// usedOf returns key's used at now, failing when the store lost it.
func usedOf(t fataler, s *Store, key string, now clock.Instant) int64 {
	t.Helper()
	_, used, ok := s.Used(key, now)
	if !ok {
		t.Fatalf("%s lost", key)
	}
	return used
}

// TestStoreShardFloodKeepsSpentKey aims 17,000 new keys at the shard of an
// exhausted key (the test knows the pinned seed, as no client can) in a
// store of 100 keys a shard: the exhausted key stays exhausted, and every
// new key that found no room is counted.
func TestStoreShardFloodKeepsSpentKey(t *testing.T) {
	s := mustStore(t, StoreConfig{MaxKeys: 6400, Shards: 64, Seed: 42})
	lim := MustLimit(TokenBucket, 3, time.Hour, 3)
	mustTake(t, s, "victim", &lim, 0, 3)
	target := s.shardIndex(s.hash("victim"))
	full := uint64(0)
	aimed := 0
	for i := 0; aimed < 17_000; i++ {
		k := "aimed:" + strconv.Itoa(i)
		if s.shardIndex(s.hash(k)) != target {
			continue
		}
		aimed++
		if _, err := s.Take(k, &lim, clock.Instant(i), 1); errors.Is(err, ErrFull) {
			full++
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if d := mustTake(t, s, "victim", &lim, 0, 1); d.Allowed {
		t.Fatalf("exhausted key after %d keys aimed at its shard: %+v, want refused", aimed, d)
	}
	if s.Full() != full || full != uint64(aimed-99) {
		t.Fatalf("Full() = %d, counted %d, want %d (all but the 99 that fit)", s.Full(), full, aimed-99)
	}
}

// TestStoreSeedSpreadsAimedKeys picks keys that an unseeded xxhash puts in
// one shard (what a client could compute): under the store's per-process
// seed they spread over the shards.
func TestStoreSeedSpreadsAimedKeys(t *testing.T) {
	s := mustStore(t, StoreConfig{Shards: 64})
	var keys []string
	for i := 0; len(keys) < 6400; i++ {
		if k := "aimed:" + strconv.Itoa(i); xxhash.Sum64String(k)>>58 == 7 {
			keys = append(keys, k)
		}
	}
	per := make([]int, 64)
	for _, k := range keys {
		per[s.shardIndex(s.hash(k))]++
	}
	for i, n := range per {
		// 100 expected a shard; 200 is more than 9 standard deviations.
		if n > 200 {
			t.Fatalf("shard %d holds %d of %d aimed keys: placement is predictable", i, n, len(keys))
		}
	}
}

// TestStoreBytesBounded fills a 1 MiB store with 1 KiB keys, short keys
// and sliding window logs: the bytes counted never pass the budget, the
// keys that fit are exactly what it allows, and deleting every key gives
// every byte back.
func TestStoreBytesBounded(t *testing.T) {
	const budget = 1 << 20
	s := mustStore(t, StoreConfig{MaxMemory: budget, Shards: 4, Seed: 1})
	tb := MustLimit(TokenBucket, 3, time.Hour, 3)
	lg := MustLimit(SlidingWindowLog, 3, time.Hour, 0)
	var held []string
	for i := range 20_000 {
		k := "k" + strconv.Itoa(i)
		l := &tb
		switch i % 3 {
		case 0:
			k += strings.Repeat("x", MaxKeyLen-len(k))
		case 1:
			l = &lg
		}
		_, err := s.Take(k, l, clock.Instant(i), 1)
		switch {
		case err == nil:
			held = append(held, k)
		case !errors.Is(err, ErrFull):
			t.Fatal(err)
		}
		if b := s.Bytes(); b > budget {
			t.Fatalf("after %d keys: %d bytes counted, budget %d", i+1, b, budget)
		}
	}
	if s.Full() == 0 || s.Bytes() < budget*9/10 {
		t.Fatalf("full %d, bytes %d: the budget was never reached", s.Full(), s.Bytes())
	}
	// A 1 KiB key counts 96 + 1024; a short one 96; a log with one run
	// 96 + 64 + 16.
	t.Logf("%d keys held in %d bytes", len(held), s.Bytes())
	for _, k := range held {
		s.Delete(k)
	}
	if s.Bytes() != 0 || s.Len() != 0 {
		t.Fatalf("after deleting every key: %d bytes, %d keys", s.Bytes(), s.Len())
	}
}

// TestStorePeerStatesNeverEvictSpent fills a store with spent keys, then
// gives it state from peers (a replica promoted, a handoff, a push): no
// spent key is dropped for them; they are kept over the bounds up to the
// allowance (an eighth), and the rest refused and counted.
func TestStorePeerStatesNeverEvictSpent(t *testing.T) {
	s := mustStore(t, StoreConfig{MaxKeys: 64, Shards: 1, Seed: 1})
	lim := MustLimit(FixedWindow, 10, time.Hour, 0)
	for i := range 64 {
		mustTake(t, s, "own"+strconv.Itoa(i), &lim, 0, 5)
	}
	if _, err := s.Take("new", &lim, 0, 1); !errors.Is(err, ErrFull) {
		t.Fatalf("a new key in a full store: %v, want ErrFull", err)
	}
	ops := []func(k string) error{
		func(k string) error { return s.Set(k, &lim, 0, 7) },
		func(k string) error { return s.Charge(k, &lim, 0, 7) },
		func(k string) error { return s.Merge(k, &lim, 0, 7) },
		func(k string) error {
			if s.MergeEach(0, 1, func(int) (string, *Limit, int64) { return k, &lim, 7 }) != 1 {
				return ErrFull
			}
			return nil
		},
	}
	accepted := 0
	for i := range 40 {
		if err := ops[i%len(ops)]("peer" + strconv.Itoa(i)); err == nil {
			accepted++
		} else if !errors.Is(err, ErrFull) {
			t.Fatal(err)
		}
	}
	if accepted != 64/peerAllowance || s.Refused() != uint64(40-accepted) {
		t.Fatalf("accepted %d peer states, refused %d; want %d and %d", accepted, s.Refused(), 64/peerAllowance, 40-64/peerAllowance)
	}
	for i := range 64 {
		if u := usedOf(t, s, "own"+strconv.Itoa(i), 0); u != 5 {
			t.Fatalf("own%d: used %d, want 5", i, u)
		}
	}
	// A peer state that spent nothing takes no room: a key not held is full.
	if err := s.Set("zero", &lim, 0, 0); err != nil || s.Has("zero") {
		t.Fatalf("Set of a fresh key to 0: %v, held %v; want nothing stored", err, s.Has("zero"))
	}
}

// TestStorePeerValuesCannotRefill hands an exhausted key the values a
// hostile or broken peer could send: 2^63-1 must not wrap into a refill,
// and negatives are refused and counted, changing nothing.
func TestStorePeerValuesCannotRefill(t *testing.T) {
	for alg := range rateAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			s := mustStore(t, StoreConfig{MaxKeys: 64, Shards: 1})
			lim := MustLimit(alg, 10, time.Hour, 0)
			mustTake(t, s, "k", &lim, 0, 10)
			mustTake(t, s, "half", &lim, 0, 5)
			steps := []struct {
				name string
				call func() error
				err  error
			}{
				{"Charge(2^63-1)", func() error { return s.Charge("k", &lim, 0, math.MaxInt64) }, nil},
				{"Charge(half, 2^63-1)", func() error { return s.Charge("half", &lim, 0, math.MaxInt64) }, nil},
				{"Charge(-1)", func() error { return s.Charge("k", &lim, 0, -1) }, ErrSpend},
				{"Charge(-2^63)", func() error { return s.Charge("k", &lim, 0, math.MinInt64) }, ErrSpend},
				{"Set(-1)", func() error { return s.Set("k", &lim, 0, -1) }, ErrSpend},
				{"Set(2^63-1)", func() error { return s.Set("k", &lim, 0, math.MaxInt64) }, nil},
				{"Merge(-2^63)", func() error { return s.Merge("k", &lim, 0, math.MinInt64) }, ErrSpend},
				{"MergeEach(-1)", func() error {
					s.MergeEach(0, 1, func(int) (string, *Limit, int64) { return "k", &lim, -1 })
					return nil
				}, nil},
			}
			for i, st := range steps {
				if err := st.call(); !errors.Is(err, st.err) {
					t.Fatalf("step %d: %s = %v, want %v", i, st.name, err, st.err)
				}
				full := lim.maxUsed() // a token bucket may hold a debt of one capacity (settle.go)
				for _, k := range []string{"k", "half"} {
					if u := usedOf(t, s, k, 0); u != full && (k == "k" || i > 0) {
						t.Fatalf("step %d: after %s, %s used %d, want %d", i, st.name, k, u, full)
					}
				}
				if d := mustTake(t, s, "k", &lim, 0, 1); d.Allowed {
					t.Fatalf("step %d: after %s the exhausted key admitted %+v", i, st.name, d)
				}
			}
			if s.Invalid() != 5 {
				t.Fatalf("Invalid() = %d, want 5", s.Invalid())
			}
		})
	}
}

// TestStoreIdleIsExact checks, for every algorithm, random checks and peer
// states at random times, that each key's idle instant is right: a key
// that still holds spend at a time is never taken for idle then (it
// would be dropped), and at its idle instant it holds nothing.
func TestStoreIdleIsExact(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		alg := Algorithm(rapid.IntRange(0, int(rateAlgorithms)-1).Draw(rt, "alg"))
		count := rapid.Int64Range(1, 20).Draw(rt, "count")
		per := time.Duration(rapid.Int64Range(int64(time.Millisecond), int64(time.Minute)).Draw(rt, "per"))
		burst := rapid.Int64Range(0, 30).Draw(rt, "burst")
		lim, err := NewLimit(alg, count, per, burst)
		if err != nil {
			rt.Skip(err)
		}
		s := mustStore(rt, StoreConfig{MaxKeys: 64, Shards: 1, Seed: 1})
		now := int64(0)
		for i := range rapid.IntRange(1, 30).Draw(rt, "steps") {
			now += rapid.Int64Range(-int64(per)/4, int64(per)).Draw(rt, fmt.Sprint("dt", i))
			at := clock.Instant(now)
			switch rapid.IntRange(0, 3).Draw(rt, fmt.Sprint("op", i)) {
			case 0:
				s.Take("k", &lim, at, rapid.Int64Range(1, lim.Capacity()).Draw(rt, fmt.Sprint("cost", i)))
			case 1:
				s.Charge("k", &lim, at, rapid.Int64().Draw(rt, fmt.Sprint("spend", i)))
			case 2:
				s.Set("k", &lim, at, rapid.Int64().Draw(rt, fmt.Sprint("used", i)))
			case 3:
				s.Refund("k", &lim, at, rapid.Int64Range(1, lim.Capacity()).Draw(rt, fmt.Sprint("refund", i)))
			}
			sh := &s.shards[0]
			j := sh.lookup(sh.hasher.sum("k"), "k")
			if j == none {
				continue
			}
			idle := sh.at(j).idle
			probe := now + rapid.Int64Range(0, 3*int64(per)).Draw(rt, fmt.Sprint("probe", i))
			if u := usedOf(rt, s, "k", clock.Instant(probe)); u > 0 && probe >= idle {
				rt.Fatalf("step %d: used %d at %d, but idle from %d", i, u, probe, idle)
			}
			if idle > now && idle < math.MaxInt64 {
				if u := usedOf(rt, s, "k", clock.Instant(idle)); u != 0 {
					rt.Fatalf("step %d: used %d at its idle instant %d", i, u, idle)
				}
			}
		}
	})
}

// FuzzCharge: no spend a peer sends raises a key's tokens, whatever the
// algorithm and the key's state: used never decreases through Charge, nor
// through Merge or MergeEach; negatives change nothing.
func FuzzCharge(f *testing.F) {
	f.Add(uint8(0), int64(5), int64(math.MaxInt64), int64(0))
	f.Add(uint8(1), int64(10), int64(-1), int64(math.MinInt64))
	f.Add(uint8(4), int64(1), int64(math.MinInt64), int64(math.MaxInt64))
	f.Fuzz(func(t *testing.T, alg uint8, spent, spend, used int64) {
		a := Algorithm(alg % uint8(rateAlgorithms))
		lim := MustLimit(a, 10, time.Hour, 0)
		s := mustStore(t, StoreConfig{MaxKeys: 16, Shards: 1})
		if spent = min(max(spent, 1), 10); true {
			mustTake(t, s, "k", &lim, 0, spent)
		}
		before := usedOf(t, s, "k", 0)
		if err := s.Charge("k", &lim, 0, spend); (err != nil) != (spend < 0) {
			t.Fatalf("Charge(%d) = %v", spend, err)
		}
		after := usedOf(t, s, "k", 0)
		if after < before || after > lim.maxUsed() || (spend < 0 && after != before) {
			t.Fatalf("%v: used %d, Charge(%d), used %d", a, before, spend, after)
		}
		s.Merge("k", &lim, 0, used)
		s.MergeEach(0, 1, func(int) (string, *Limit, int64) { return "k", &lim, used })
		if got := usedOf(t, s, "k", 0); got < after {
			t.Fatalf("%v: used %d, Merge(%d), used %d", a, after, used, got)
		}
	})
}

// TestStoreConvertToLogNeedsRoom: a key held that a check moves to a
// sliding window log needs room for the log; in a store of spent keys it
// finds none, so the check is refused and the key keeps its state,
// instead of the log passing the budget or the key being lost.
func TestStoreConvertToLogNeedsRoom(t *testing.T) {
	const budget = 4096
	s := mustStore(t, StoreConfig{MaxMemory: budget, Shards: 1, Seed: 1})
	tb := MustLimit(TokenBucket, 3, time.Hour, 3)
	lg := MustLimit(SlidingWindowLog, 3, time.Hour, 0)
	n := 0
	for ; n < 1000; n++ {
		if _, err := s.Take("k"+strconv.Itoa(n), &tb, 0, 2); errors.Is(err, ErrFull) {
			break
		}
	}
	if n == 1000 {
		t.Fatal("1,000 keys of 96 bytes fit in 4 KiB: the budget is not kept")
	}
	d, err := s.Take("k0", &lg, 0, 1)
	if err != nil || d.Allowed || d.RetryAfter != time.Hour {
		t.Fatalf("k0 moved to a log in a full store: %+v, %v; want refused for an hour", d, err)
	}
	if l, used, ok := s.Used("k0", 0); !ok || l != tb || used != 2 || s.Bytes() > budget || s.Len() != n {
		t.Fatalf("k0: %v used %d held %v; bytes %d, keys %d of %d", l, used, ok, s.Bytes(), s.Len(), n)
	}
	// Once the other keys hold nothing, they make room for the log.
	later := clock.Instant(time.Hour)
	if d := mustTake(t, s, "k0", &lg, later, 1); !d.Allowed || s.Bytes() > budget {
		t.Fatalf("k0 moved to a log once the others are full again: %+v, bytes %d", d, s.Bytes())
	}
}
