package bucket

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/ringlimit/ringlimit/clock"
)

// TestLongKeysProperty drives one shard through random takes, deletes and
// evictions of keys from 1 to MaxKeyLen bytes, so that the long-key
// buffers fill, are renewed and let go, and checks against a model: every
// key held is found with its spend, no other is, Range reports exactly the
// keys held, the pages count their long keys, and a string Range handed
// out earlier still reads the key it named, whatever happened to the key
// and its buffer since.
func TestLongKeysProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		const capacity = 40
		s, err := NewStore(StoreConfig{MaxKeys: capacity, Shards: 1, MaxMemory: 1 << 30})
		if err != nil {
			t.Fatal(err)
		}
		sh := &s.shards[0]
		lim := MustLimit(FixedWindow, 1000, time.Hour, 0)
		model := map[string]int64{}  // key → used, within the current window
		present := map[string]bool{} // keys held: model's, and older ones until evicted
		var now clock.Instant
		type seen struct{ got, want string }
		var handed []seen // strings from Range and what they named
		keyGen := rapid.Custom(func(t *rapid.T) string {
			n := rapid.SampledFrom([]int{1, inlineKey, inlineKey + 1, 40, 200, MaxKeyLen}).Draw(t, "len")
			id := strconv.Itoa(rapid.IntRange(0, 60).Draw(t, "id"))
			return id + strings.Repeat(string(rune('a'+len(id)%26)), n-len(id)%n)[:n-min(len(id), n)]
		})
		for step := range rapid.IntRange(1, 400).Draw(t, "steps") {
			inserted := false // a new key was taken: it may evict one that holds nothing
			switch rapid.IntRange(0, 9).Draw(t, "op") {
			case 0, 1, 2, 3, 4, 5: // take: a new key when the store is full evicts the LRU (every key holds spend until the window ends)
				k := keyGen.Draw(t, "key")
				d, err := s.Take(k, &lim, now, 1)
				switch {
				case errors.Is(err, ErrFull):
					// No room: every key held has spent in this window.
					if present[k] || len(model) < capacity {
						t.Fatalf("step %d: a take of a %d-byte key found the store full with %d of %d keys spent", step, len(k), len(model), len(present))
					}
					continue
				case err != nil || !d.Allowed:
					t.Fatalf("step %d: Take(%d bytes): %v, allowed %v", step, len(k), err, d.Allowed)
				}
				inserted = !present[k]
				model[k]++
				present[k] = true
			case 6: // delete
				k := keyGen.Draw(t, "key")
				held := present[k]
				if got := s.Delete(k); got != held {
					t.Fatalf("step %d: Delete of a %d-byte key: %v, want %v", step, len(k), got, held)
				}
				_ = held
				delete(model, k)
				delete(present, k)
			case 7: // a new window: every key holds nothing, the next new keys evict
				now += clock.Instant(time.Hour)
				clear(model)
			case 8: // Range, keeping what it hands out
				got := map[string]bool{}
				s.Range(now, func(batch []Snapshot) bool {
					for _, sn := range batch {
						got[sn.Key] = true
						handed = append(handed, seen{sn.Key, strings.Clone(sn.Key)})
					}
					return true
				})
				if len(got) != len(present) {
					t.Fatalf("step %d: Range reported %d keys, %d held", step, len(got), len(present))
				}
				for k := range present {
					if !got[k] {
						t.Fatalf("step %d: Range lacks a held %d-byte key", step, len(k))
					}
				}
			case 9: // a key's spend
				k := keyGen.Draw(t, "key")
				_, used, ok := s.Used(k, now)
				if want, held := model[k], present[k]; ok != held || used != want {
					t.Fatalf("step %d: Used of a %d-byte key: %d, %v; want %d, %v", step, len(k), used, ok, want, held)
				}
			}
			evictions := 0
			for k := range present {
				if s.Has(k) {
					continue
				}
				if _, spent := model[k]; spent || !inserted {
					t.Fatalf("step %d: a %d-byte key lost (spent in this window: %v; a new key taken: %v)", step, len(k), spent, inserted)
				}
				delete(present, k)
				evictions++
			}
			if evictions > 1 || len(present) > capacity {
				t.Fatalf("step %d: %d keys evicted for one new key, %d held", step, evictions, len(present))
			}
			for _, h := range handed {
				if h.got != h.want {
					t.Fatalf("step %d: a key Range handed out changed under its holder", step)
				}
			}
			long := 0
			for k := range present {
				if len(k) > inlineKey {
					long++
				}
			}
			counted, inEntries := 0, 0
			for pg, p := range sh.long {
				if p.n == 0 && p.b != nil {
					t.Fatalf("step %d: page %d holds no long key and keeps its buffer", step, pg)
				}
				counted += p.n
			}
			for i := uint32(0); i < sh.used; i++ {
				if e := sh.at(i); e.klen == longKey {
					inEntries++
				}
			}
			if counted != long || inEntries != long {
				t.Fatalf("step %d: pages count %d long keys, entries hold %d, the model %d", step, counted, inEntries, long)
			}
		}
	})
}
