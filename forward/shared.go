package forward

import (
	"strings"
	"sync"
	"sync/atomic"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/clock"
	"github.com/ringlimit/ringlimit/internal/peermsg"
)

// shared remembers, for a key and another member, the spend both this
// node and that member account for: the last state this node received
// from the member (a replica from the key's owner, a fetched state) or
// gave it (a fetch it answered, a push it acknowledged). It is what lets
// two copies of a key that both spent be merged by adding what each spent
// since, instead of keeping the larger and losing the other's spend:
//
//   - a successor's replica of its owner's key is shared[owner, key], so
//     the spend the successor makes standing in for the owner is its copy
//     minus the replica;
//   - a push sends the spend the receiver has not seen: the copy minus
//     shared[receiver, key];
//   - a new owner that fetched a key from its previous owner holds
//     shared[previous, key], and the previous owner, which answered,
//     holds shared[new owner, key]: the previous owner's later push is
//     only what it spent after the fetch.
//
// Entries are buckets under the key's limit, so that they refill exactly
// like the copies they are compared with. There is one store per member,
// each with its own budget of keys and bytes apart from the node's store
// (a flood of the node's own keys cannot push replicas out). Like every
// store it drops only entries that hold nothing; a new entry that finds
// no room even over the store's allowance for peer state is refused and
// counted (bucket.Store.Refused): a replica missing makes a promotion
// start that key full, a shared entry missing makes the next push send
// the whole spend (counted twice rather than not at all). Safe for
// concurrent use.
//
// A copy of a key and what this node shares about it with another member
// change together: a replica from the owner charges the copy what the
// owner spent since and raises the shared entry, a push reads the copy
// against the entry and raises the entry by what it sends, a stand-in
// adopts a copy from the entry, and a fetch answered sets the entry to the
// copy. Each holds copies while it reads one and writes the other. A push
// that read the copy after a replica charged it, but the entry before the
// replica raised it, would send the owner's own spend back to it; a push's
// entry written after a replica raised it would lower it, and the next
// replica would charge the owner's spend to the copy a second time.
type shared struct {
	copies   sync.Mutex // see above
	capacity int
	shards   int                                      // at most: the node's store's
	memory   int64                                    // bytes per member's store
	mu       sync.Mutex                               // serialises changes to stores
	stores   atomic.Pointer[map[string]*bucket.Store] // by member; replaced whole
	// What the stores forgetAll dropped had refused (see refused).
	goneFull, goneInvalid atomic.Uint64
	// early holds, by member, the keys of fetches this node answered while
	// its ring did not yet hold the asker (guarded by copies): the entries
	// they set were set for the process that asked, and outlive the
	// forgetting of a member that joins (forgetJoined).
	early map[string]map[string]struct{}
}

// maxEarly bounds the keys early remembers for one member; the fetches
// answered beyond it are forgotten at the join with the rest.
const maxEarly = 1 << 16

// noteEarly records that a fetch of key by member, whom this node's ring
// does not hold yet, was answered (copies held).
func (sh *shared) noteEarly(member, key string) {
	if sh.early == nil {
		sh.early = map[string]map[string]struct{}{}
	}
	keys := sh.early[member]
	if keys == nil {
		keys = map[string]struct{}{}
		sh.early[member] = keys
	}
	if len(keys) < maxEarly {
		keys[strings.Clone(key)] = struct{}{}
	}
}

// forgetJoined drops what this node shared with a member that joins its
// ring (shared with an earlier process of that name, which took it along),
// but for the entries set by fetches that member's process made before
// this node's ring held it (noteEarly). Forgotten, the new owner's first
// replica of such a key would charge this node's copy with the spend it
// had fetched from it, and the push that follows would send that spend
// back as the new owner's (TestRingJoinExactWithRoomLeft admitted 70 of
// 100 on such a key).
func (sh *shared) forgetJoined(member string, now clock.Instant) {
	sh.copies.Lock()
	defer sh.copies.Unlock()
	var kept []bucket.Snapshot
	if s := sh.store(member, false); s != nil {
		for key := range sh.early[member] {
			if snap, ok := s.Lookup(key, now); ok {
				kept = append(kept, snap)
			}
		}
	}
	delete(sh.early, member)
	sh.forgetAll(member)
	for i := range kept {
		sh.set(member, kept[i].Key, &kept[i].Limit, now, kept[i].Used, kept[i].Window)
	}
}

func newShared(capacity int, memory int64, shards int) *shared {
	sh := &shared{capacity: capacity, memory: memory, shards: shards}
	sh.stores.Store(&map[string]*bucket.Store{})
	return sh
}

// store returns member's store, creating it when create is set (nil
// otherwise when there is none).
func (sh *shared) store(member string, create bool) *bucket.Store {
	if s := (*sh.stores.Load())[member]; s != nil || !create {
		return s
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	cur := *sh.stores.Load()
	if s := cur[member]; s != nil {
		return s
	}
	// No more shards than the node's store: each shard holds its share of
	// the capacity, and copies land in shards unevenly, so more, smaller
	// shards would refuse copies that the node's own store, with the same
	// capacity, would take.
	shards := min(16, max(sh.shards, 1))
	for shards > 1 && (sh.capacity < shards || sh.memory < int64(shards)*4096) {
		shards /= 2
	}
	s, err := bucket.NewStore(bucket.StoreConfig{MaxKeys: sh.capacity, MaxMemory: sh.memory, Shards: shards})
	if err != nil { // capacity came from a valid store
		panic(err)
	}
	next := make(map[string]*bucket.Store, len(cur)+1)
	for k, v := range cur {
		next[k] = v
	}
	next[member] = s
	sh.stores.Store(&next)
	return s
}

// used returns the spend member and this node both account for on key at
// now (0 when none).
func (sh *shared) used(member, key string, now clock.Instant) (int64, bool) {
	st, ok := sh.state(member, key, now)
	return st.Used, ok
}

// state returns the state this node shares with member about key (its
// Limit, Used and, for a fixed window, Window).
func (sh *shared) state(member, key string, now clock.Instant) (bucket.Snapshot, bool) {
	if s := sh.store(member, false); s != nil {
		return s.Lookup(key, now)
	}
	return bucket.Snapshot{}, false
}

// set records that member and this node both account for used on key,
// counted in the fixed window starting at window (0: the current one; see
// bucket.Store.MergeWindow).
func (sh *shared) set(member, key string, l *bucket.Limit, now clock.Instant, used, window int64) {
	sh.store(member, true).SetWindow(key, l, now, used, window)
}

// raise records that member and this node both account for at least used
// on key, counted as set counts it.
func (sh *shared) raise(member, key string, l *bucket.Limit, now clock.Instant, used, window int64) {
	sh.store(member, true).MergeWindow(key, l, now, used, window)
}

// raiseAll raises, as raise does, every state of states.
func (sh *shared) raiseAll(member string, now clock.Instant, states []peermsg.State) {
	sh.store(member, true).MergeEachWindow(now, len(states), func(i int) (string, *bucket.Limit, int64, int64) {
		return states[i].Key, &states[i].Limit, states[i].Used, states[i].Window
	})
}

// forget drops what this node shares with member about key.
func (sh *shared) forget(member, key string) {
	if s := sh.store(member, false); s != nil {
		s.Delete(key)
	}
}

// forgetAll drops everything shared with member.
func (sh *shared) forgetAll(member string) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	cur := *sh.stores.Load()
	if cur[member] == nil {
		return
	}
	next := make(map[string]*bucket.Store, len(cur))
	for k, v := range cur {
		if k != member {
			next[k] = v
		}
	}
	sh.stores.Store(&next)
	sh.goneFull.Add(cur[member].Refused())
	sh.goneInvalid.Add(cur[member].Invalid())
}

// each calls fn for every entry shared with member.
func (sh *shared) each(member string, now clock.Instant, fn func(st *bucket.Snapshot)) {
	sh.rangeStore(member, now, false, fn)
}

// eachHeld is each of the states holding spend at now (Store.RangeHeld).
func (sh *shared) eachHeld(member string, now clock.Instant, fn func(st *bucket.Snapshot)) {
	sh.rangeStore(member, now, true, fn)
}

func (sh *shared) rangeStore(member string, now clock.Instant, held bool, fn func(st *bucket.Snapshot)) {
	s := sh.store(member, false)
	if s == nil {
		return
	}
	walk := s.Range
	if held {
		walk = s.RangeHeld
	}
	walk(now, func(batch []bucket.Snapshot) bool {
		for i := range batch {
			fn(&batch[i])
		}
		return true
	})
}

// refused returns how many states the members' stores refused (no room,
// or negative).
func (sh *shared) refused() (full, invalid uint64) {
	full, invalid = sh.goneFull.Load(), sh.goneInvalid.Load()
	for _, s := range *sh.stores.Load() {
		full += s.Refused()
		invalid += s.Invalid()
	}
	return full, invalid
}

// len returns how many entries are shared with every member.
func (sh *shared) len() int {
	n := 0
	for _, s := range *sh.stores.Load() {
		n += s.Len()
	}
	return n
}
