package bucket

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/ringlimit/ringlimit/clock"
)

func newStore(t testing.TB, maxKeys, shards int) *Store {
	t.Helper()
	s, err := NewStore(StoreConfig{MaxKeys: maxKeys, Shards: shards})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustTake(t testing.TB, s *Store, key string, l *Limit, now clock.Instant, cost int64) Decision {
	t.Helper()
	d, err := s.Take(key, l, now, cost)
	if err != nil {
		t.Fatalf("Take(%q, %v, %d, %d): %v", key, l, now, cost, err)
	}
	return d
}

func TestStoreConfigValidate(t *testing.T) {
	for _, c := range []StoreConfig{{Shards: 3}, {Shards: -1}, {MaxKeys: 2, Shards: 4}, {MaxKeys: -1}} {
		if _, err := NewStore(c); err == nil {
			t.Errorf("NewStore(%+v) accepted", c)
		}
	}
	s, err := NewStore(StoreConfig{})
	if err != nil || s.Capacity() != DefaultMaxKeys || len(s.shards) != DefaultShards {
		t.Fatalf("zero config: capacity %d shards %d, %v", s.Capacity(), len(s.shards), err)
	}
}

func TestStoreBadInputChangesNothing(t *testing.T) {
	s := newStore(t, 16, 1)
	lim := MustLimit(TokenBucket, 5, time.Second, 5)
	long := string(make([]byte, MaxKeyLen+MaxNamespaceLen+1)) // a request's longest key in its namespace, and one byte more
	for _, c := range []struct {
		key  string
		lim  Limit
		cost int64
	}{
		{"", lim, 1}, {long, lim, 1}, {"k", lim, 0}, {"k", lim, -3}, {"k", lim, 6}, {"k", Limit{}, 1},
	} {
		if _, err := s.Take(c.key, &c.lim, 0, c.cost); err == nil {
			t.Fatalf("Take(len %d, %v, cost %d) accepted", len(c.key), c.lim, c.cost)
		}
	}
	if s.Len() != 0 {
		t.Fatalf("bad input stored %d keys", s.Len())
	}
	if d := mustTake(t, s, "k", &lim, 0, 5); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("first valid check = %+v, want a full bucket", d)
	}
}

func TestStoreLRUEviction(t *testing.T) {
	s := newStore(t, 4, 1)
	lim := MustLimit(FixedWindow, 3, time.Hour, 0)
	for _, k := range []string{"a", "b", "c", "d"} {
		mustTake(t, s, k, &lim, 0, 3) // every key spent
	}
	// Every key has spent in this window: a new key finds no room and is
	// refused, changing nothing.
	if _, err := s.Take("e", &lim, 0, 1); !errors.Is(err, ErrFull) {
		t.Fatalf("new key in a store of spent keys: %v, want ErrFull", err)
	}
	if s.Len() != 4 || s.Evictions() != 0 || s.Full() != 1 || s.Has("e") {
		t.Fatalf("len %d evictions %d full %d, want 4, 0 and 1", s.Len(), s.Evictions(), s.Full())
	}
	for _, k := range []string{"a", "b", "c", "d"} {
		if d := mustTake(t, s, k, &lim, 0, 1); d.Allowed {
			t.Fatalf("%s lost its state: %+v", k, d)
		}
	}
	// Past the window every key holds nothing: a new key evicts the least
	// recently used.
	hour := clock.Instant(time.Hour)
	mustTake(t, s, "a", &lim, hour, 1) // a is now the most recent; b the least
	mustTake(t, s, "e", &lim, hour, 1) // evicts b
	if s.Len() != 4 || s.Evictions() != 1 || s.Has("b") {
		t.Fatalf("len %d evictions %d, want 4 and 1, b gone", s.Len(), s.Evictions())
	}
	// b starts over, full, and evicts c, the least recent.
	if d := mustTake(t, s, "b", &lim, hour, 1); !d.Allowed || d.Remaining != 2 {
		t.Fatalf("evicted b = %+v, want a fresh window with 2 remaining", d)
	}
	if s.Evictions() != 2 || s.Has("c") {
		t.Fatalf("evictions %d, want 2, c gone", s.Evictions())
	}
	// d holds nothing, a, e and b have spent: d goes, then nothing can.
	mustTake(t, s, "f", &lim, hour, 1)
	if _, err := s.Take("g", &lim, hour, 1); !errors.Is(err, ErrFull) || s.Full() != 2 {
		t.Fatalf("g: %v full %d, want ErrFull and 2", err, s.Full())
	}
	for _, k := range []string{"a", "e", "b", "f"} {
		if _, used, ok := s.Used(k, hour); !ok || used == 0 {
			t.Fatalf("%s: used %d held %v, want its spend", k, used, ok)
		}
	}
}

// collidingKeys finds a key starting with px and another starting with py
// whose hashes share the low 32 bits, the tag the index stores.
func collidingKeys(t *testing.T, px, py string) (string, string) {
	t.Helper()
	seen := map[uint32]string{}
	for i := range 1 << 20 {
		k := px + strconv.Itoa(i)
		tag := uint32(hasher{x: 1}.sum(k))
		if other, ok := seen[tag]; ok && px == py {
			return other, k
		}
		seen[tag] = k
	}
	for i := range 1 << 22 {
		k := py + strconv.Itoa(i)
		if other, ok := seen[uint32(hasher{x: 1}.sum(k))]; ok && other != k {
			return other, k
		}
	}
	t.Fatalf("no tag collision between keys starting with %q and %q", px, py)
	return "", ""
}

func TestStoreHashCollision(t *testing.T) {
	// Two keys with the same tag share nothing: both live in the index,
	// told apart by their keys, and evicting one leaves the other found.
	// Short keys are compared in the entry, long ones in the long pages,
	// and a short key never matches a long one.
	short, long := "k", strings.Repeat("k", inlineKey)
	for _, c := range []struct{ name, px, py string }{
		{"short", short, short},
		{"long", long, long},
		{"short-long", short, long},
	} {
		t.Run(c.name, func(t *testing.T) { testHashCollision(t, c.px, c.py) })
	}
}

func testHashCollision(t *testing.T, px, py string) {
	x, y := collidingKeys(t, px, py)
	var hx, hy uint64
	var sh shard
	sh.init(2, 1<<20, hasher{x: 1})
	hx, hy = sh.hasher.sum(x), sh.hasher.sum(y)
	lim := MustLimit(FixedWindow, 2, time.Hour, 0)
	if _, d, _ := sh.take(hx, x, &lim, 0, 2); !d.Allowed {
		t.Fatal(d)
	}
	if _, d, _ := sh.take(hy, y, &lim, 0, 1); !d.Allowed || d.Remaining != 1 {
		t.Fatalf("%s shares %s's state: %+v", y, x, d)
	}
	if sh.idx.n != 2 {
		t.Fatalf("index holds %d keys, want 2", sh.idx.n)
	}
	if _, d, _ := sh.take(hx, x, &lim, 0, 1); d.Allowed {
		t.Fatalf("%s lost its state: %+v", x, d)
	}
	// Both have spent in this window: a third key finds no room.
	if _, _, ok := sh.take(sh.hasher.sum("z"), "z", &lim, 0, 1); ok {
		t.Fatal("a new key evicted a key that has spent")
	}
	// Past the window both hold nothing; x is most recent, y least: a
	// third key evicts y.
	later := int64(2 * time.Hour)
	sh.take(hx, x, &lim, later, 1)
	sh.take(sh.hasher.sum("z"), "z", &lim, later, 1)
	if sh.idx.n != 2 || sh.n != 2 || sh.lookup(hy, y) != none || sh.lookup(hx, x) == none {
		t.Fatalf("after evicting %s: index %d n %d", y, sh.idx.n, sh.n)
	}
	if _, d, _ := sh.take(hy, y, &lim, 2*later, 1); !d.Allowed || d.Remaining != 1 {
		t.Fatalf("%s after eviction = %+v, want fresh", y, d)
	}
}

func TestStoreLimitChangeKeepsSpent(t *testing.T) {
	s := newStore(t, 16, 1)
	small := MustLimit(TokenBucket, 10, time.Hour, 10)
	big := MustLimit(TokenBucket, 20, time.Hour, 20)
	window := MustLimit(FixedWindow, 20, time.Hour, 0)
	mustTake(t, s, "k", &small, 0, 4)
	// 4 spent of 10 carry over into 20: 16 left, 15 after this check.
	if d := mustTake(t, s, "k", &big, 0, 1); !d.Allowed || d.Remaining != 15 {
		t.Fatalf("upgrade = %+v, want 15 remaining", d)
	}
	// Back to 10: 5 spent, 5 left, 4 after this check. Alternating limits
	// never refills the bucket.
	if d := mustTake(t, s, "k", &small, 0, 1); !d.Allowed || d.Remaining != 4 {
		t.Fatalf("downgrade = %+v, want 4 remaining", d)
	}
	// Another algorithm: 6 spent becomes a window count of 6.
	if d := mustTake(t, s, "k", &window, 0, 1); !d.Allowed || d.Remaining != 13 {
		t.Fatalf("to fixed window = %+v, want 13 remaining", d)
	}
	if s.Len() != 1 {
		t.Fatalf("len %d, want 1", s.Len())
	}
}

func TestStoreConcurrentExact(t *testing.T) {
	// Time stands still, so no refill: whatever the interleaving, one key
	// admits exactly its capacity and every distinct key exactly its own.
	s := newStore(t, 1<<12, 16)
	const workers, tries = 16, 500
	for alg := range rateAlgorithms {
		lim := MustLimit(alg, 100, time.Hour, 0)
		var shared atomic.Int64
		own := make([]int64, workers)
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				mine := fmt.Sprintf("%v-own-%d", alg, w)
				for range tries {
					if d := mustTake(t, s, alg.String()+"-shared", &lim, 1e12, 1); d.Allowed {
						shared.Add(1)
					}
					if d := mustTake(t, s, mine, &lim, 1e12, 1); d.Allowed {
						own[w]++
					}
				}
			})
		}
		wg.Wait()
		if shared.Load() != 100 {
			t.Fatalf("%v: shared key admitted %d, want 100", alg, shared.Load())
		}
		for w, n := range own {
			if n != 100 {
				t.Fatalf("%v: worker %d's key admitted %d, want 100", alg, w, n)
			}
		}
	}
}

func TestStoreAgreesWithBucket(t *testing.T) {
	// The store and a standalone Bucket run the same algorithm code; over a
	// fixed pseudo-random sequence they give identical decisions.
	for alg := range rateAlgorithms {
		lim := MustLimit(alg, 7, 300*time.Millisecond, 9)
		s := newStore(t, 8, 1)
		b := New(lim)
		now, x := clock.Instant(1e15), uint64(1)
		for i := range 2000 {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			now = now.Add(time.Duration(x % uint64(90*time.Millisecond)))
			cost := int64(x>>40)%lim.Capacity() + 1
			got := mustTake(t, s, "k", &lim, now, cost)
			want, _ := b.TakeAt(now, cost)
			if got != want {
				t.Fatalf("%v step %d: store %+v, bucket %+v", alg, i, got, want)
			}
		}
	}
}

func TestStoreRefund(t *testing.T) {
	for alg := range rateAlgorithms {
		s := newStore(t, 16, 1)
		lim := MustLimit(alg, 10, time.Hour, 0)
		now := clock.Instant(1e15)
		mustTake(t, s, "k", &lim, now, 7)
		if err := s.Refund("k", &lim, now, 3); err != nil {
			t.Fatal(err)
		}
		// 7 spent, 3 given back: 6 of 10 left, 5 after this check.
		if d := mustTake(t, s, "k", &lim, now, 1); !d.Allowed || d.Remaining != 5 {
			t.Fatalf("%v: after a refund of 3 = %+v, want 5 remaining", alg, d)
		}
		// A refund never overfills.
		if err := s.Refund("k", &lim, now, 10); err != nil {
			t.Fatal(err)
		}
		if d := mustTake(t, s, "k", &lim, now, 10); !d.Allowed || d.Remaining != 0 {
			t.Fatalf("%v: after an over-refund = %+v, want exactly full", alg, d)
		}
		// Nothing happens for a key not held or held under another limit.
		other := MustLimit(alg, 20, time.Hour, 0)
		if err := s.Refund("k", &other, now, 5); err != nil {
			t.Fatal(err)
		}
		if err := s.Refund("missing", &lim, now, 5); err != nil || s.Has("missing") {
			t.Fatalf("%v: refund of a missing key created it (%v)", alg, err)
		}
		if d := mustTake(t, s, "k", &lim, now, 1); d.Allowed {
			t.Fatalf("%v: a refund under another limit gave tokens back: %+v", alg, d)
		}
	}
}

// TestIndexAgainstMap drives the index with random inserts and removes of
// crowded tags (many share a probe run) and checks every slot is found
// exactly where a map says it is.
func TestIndexAgainstMap(t *testing.T) {
	var x index
	x.init(4)
	model := map[uint32]uint32{} // slot -> tag
	find := func(tag, slot uint32) bool {
		mask := uint32(len(x.cells) - 1)
		for p := tag & mask; x.cells[p] != 0; p = (p + 1) & mask {
			if x.cells[p] == cell(tag, slot) {
				return true
			}
		}
		return false
	}
	seed := uint64(42)
	next := func() uint64 {
		seed ^= seed << 13
		seed ^= seed >> 7
		seed ^= seed << 17
		return seed
	}
	var slot uint32
	for step := range 3000 {
		if r := next(); len(model) > 0 && r%3 == 0 {
			// Remove a random present slot.
			k := uint32(next() % uint64(slot))
			tag, ok := model[k]
			if !ok {
				continue
			}
			x.remove(tag, k)
			delete(model, k)
		} else {
			tag := uint32(next() % 64) // few tags: long shared runs
			if r%7 == 0 {
				tag |= uint32(next()) << 8
			}
			x.insert(tag, slot)
			model[slot] = tag
			slot++
		}
		if x.n != len(model) {
			t.Fatalf("step %d: index holds %d, model %d", step, x.n, len(model))
		}
		if step%97 == 0 {
			for k, tag := range model {
				if !find(tag, k) {
					t.Fatalf("step %d: slot %d (tag %d) not found", step, k, tag)
				}
			}
		}
	}
}

func TestStoreGrant(t *testing.T) {
	s := newStore(t, 16, 1)
	lim := MustLimit(TokenBucket, 10, time.Second, 20)
	var zero clock.Instant
	// A key never seen is full: a grant of up to 8 takes 8, leaving 12.
	if n := s.Grant("k", &lim, 0, 8); n != 8 {
		t.Fatalf("grant = %d, want 8", n)
	}
	if n := s.Grant("k", &lim, 0, 100); n != 12 {
		t.Fatalf("second grant = %d, want the 12 left", n)
	}
	if n := s.Grant("k", &lim, 0, 5); n != 0 {
		t.Fatalf("grant of an empty bucket = %d, want 0", n)
	}
	// 250 ms refill 2.5 tokens: whole tokens only.
	if n := s.Grant("k", &lim, zero.Add(250*time.Millisecond), 5); n != 2 {
		t.Fatalf("grant after 250ms = %d, want 2", n)
	}
	// 0.5 left, +0.4 by 290 ms: not a whole token; by 300 ms there is one.
	if d := mustTake(t, s, "k", &lim, zero.Add(290*time.Millisecond), 1); d.Allowed {
		t.Fatalf("at 290ms the bucket holds 0.9 tokens, yet %+v", d)
	}
	if d := mustTake(t, s, "k", &lim, zero.Add(300*time.Millisecond), 1); !d.Allowed {
		t.Fatalf("at 300ms the bucket holds 1 token, yet %+v", d)
	}
	window := MustLimit(FixedWindow, 10, time.Second, 0)
	if n := s.Grant("w", &window, 0, 5); n != 0 || s.Has("w") {
		t.Fatalf("grant on a window limit = %d, want 0 and no state", n)
	}
}

func TestEntryIsOneCacheLine(t *testing.T) {
	if n := unsafe.Sizeof(entry{}); n != 64 {
		t.Fatalf("entry is %d bytes, want 64", n)
	}
	// No pointers, so that the collector does not scan the pages.
	var scan func(reflect.Type) bool
	scan = func(ty reflect.Type) bool {
		switch ty.Kind() {
		case reflect.Struct:
			for i := range ty.NumField() {
				if scan(ty.Field(i).Type) {
					return true
				}
			}
			return false
		case reflect.Array:
			return scan(ty.Elem())
		case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
			return false
		default:
			return true
		}
	}
	if scan(reflect.TypeFor[entry]()) {
		t.Fatal("entry holds a pointer")
	}
}

func TestStoreKeyLengths(t *testing.T) {
	// Keys up to inlineKey bytes live in the entry, longer ones in the
	// shard's long pages; they must never be confused, and an evicted or
	// deleted long key must leave nothing behind.
	lengths := []int{1, inlineKey - 1, inlineKey, inlineKey + 1, MaxKeyLen}
	var keys []string
	for _, n := range lengths {
		keys = append(keys, strings.Repeat("a", n), strings.Repeat("a", n-1)+"b")
	}
	s := newStore(t, len(keys), 1)
	lim := MustLimit(FixedWindow, 10, time.Hour, 0)
	for i, k := range keys {
		mustTake(t, s, k, &lim, 0, int64(i+1))
	}
	for i, k := range keys {
		if _, used, ok := s.Used(k, 0); !ok || used != int64(i+1) {
			t.Fatalf("key of %d bytes: used %d, %v; want %d", len(k), used, ok, i+1)
		}
	}
	got := map[string]int64{}
	s.Range(0, func(batch []Snapshot) bool {
		for _, sn := range batch {
			got[sn.Key] = sn.Used
		}
		return true
	})
	if len(got) != len(keys) {
		t.Fatalf("Range reported %d keys, want %d", len(got), len(keys))
	}
	for i, k := range keys {
		if got[k] != int64(i+1) {
			t.Fatalf("Range: key of %d bytes used %d, want %d", len(k), got[k], i+1)
		}
	}
	sh := &s.shards[0]
	// longKeys counts the long keys the pages hold, and fails a page that
	// holds none but keeps its buffer.
	longKeys := func() int {
		t.Helper()
		n := 0
		for pg, p := range sh.long {
			if p.n == 0 && p.b != nil {
				t.Fatalf("page %d holds no long key and keeps a buffer of %d bytes", pg, cap(p.b))
			}
			n += p.n
		}
		return n
	}
	if n := longKeys(); n != 4 {
		t.Fatalf("long pages hold %d keys, want 4", n)
	}
	long := keys[len(keys)-1]
	if !s.Delete(long) || s.Has(long) {
		t.Fatal("long key not deleted")
	}
	// x takes the slot the long key freed; y, with the store full again,
	// evicts the least recently used key, keys[0].
	later := clock.Instant(2 * time.Hour) // every key holds nothing
	mustTake(t, s, "x", &lim, later, 1)
	mustTake(t, s, "y", &lim, later, 1)
	if s.Has(keys[0]) || !s.Has("x") || !s.Has("y") {
		t.Fatal("eviction took the wrong key")
	}
	// Evict the other long keys by filling the store with short ones.
	for i := range len(keys) {
		mustTake(t, s, "s"+strconv.Itoa(i), &lim, 2*later, 1)
	}
	if n := longKeys(); n != 0 || s.Len() != len(keys) {
		t.Fatalf("after evicting every long key: long pages hold %d, store %d keys", n, s.Len())
	}
}

func TestStoreLongKeyOperations(t *testing.T) {
	// A slot that held a short key takes a long one, and every operation
	// that finds a key by name works on it.
	s := newStore(t, 2, 1)
	tb := MustLimit(TokenBucket, 10, time.Hour, 0)
	long := strings.Repeat("L", inlineKey+9)
	mustTake(t, s, "short", &tb, 0, 1)
	if !s.Delete("short") {
		t.Fatal("short key not held")
	}
	mustTake(t, s, long, &tb, 0, 4) // takes the freed slot
	if s.Has("short") || !s.Has(long) {
		t.Fatal("the reused slot answers for the wrong key")
	}
	used := func() int64 {
		t.Helper()
		_, u, ok := s.Used(long, 0)
		if !ok {
			t.Fatal("long key lost")
		}
		return u
	}
	if u := used(); u != 4 {
		t.Fatalf("used %d, want 4", u)
	}
	if n := s.Grant(long, &tb, 0, 3); n != 3 || used() != 7 {
		t.Fatalf("grant took %d (used %d), want 3 (used 7)", n, used())
	}
	if err := s.Refund(long, &tb, 0, 2); err != nil || used() != 5 {
		t.Fatalf("refund: %v, used %d, want 5", err, used())
	}
	if err := s.Merge(long, &tb, 0, 9); err != nil || used() != 9 {
		t.Fatalf("merge: %v, used %d, want 9", err, used())
	}
	// A second long key fills the store; a short one then evicts the least
	// recently used, the first long key, and its page counts one long key.
	later := clock.Instant(2 * time.Hour) // long is full again
	mustTake(t, s, long+"2", &tb, later, 1)
	mustTake(t, s, "short", &tb, later, 1)
	if s.Has(long) || !s.Has(long+"2") || !s.Has("short") {
		t.Fatal("eviction took the wrong key")
	}
	if n := s.shards[0].long[0].n; n != 1 {
		t.Fatalf("the page counts %d long keys, want 1", n)
	}
}
