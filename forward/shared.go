package forward

import (
	"strings"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/clock"
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
// like the copies they are compared with. The store is bounded (LRU): an
// entry evicted makes the next push send the whole spend, which counts it
// twice rather than not at all.
type shared struct {
	s *bucket.Store
}

// sharedKey is the store key of (member, key), or "" when it would be too
// long (the pair is then not remembered).
func sharedKey(member, key string) string {
	if len(member)+1+len(key) > bucket.MaxKeyLen {
		return ""
	}
	return member + "\x00" + key
}

// splitShared returns the member and key of a store key.
func splitShared(k string) (member, key string) {
	member, key, _ = strings.Cut(k, "\x00")
	return member, key
}

// used returns the spend member and this node both account for on key at
// now (0 when none).
func (sh shared) used(member, key string, now clock.Instant) (int64, bool) {
	k := sharedKey(member, key)
	if k == "" {
		return 0, false
	}
	_, u, ok := sh.s.Used(k, now)
	return u, ok
}

// set records that member and this node both account for used on key.
func (sh shared) set(member, key string, l *bucket.Limit, now clock.Instant, used int64) {
	if k := sharedKey(member, key); k != "" {
		sh.s.Set(k, l, now, used)
	}
}

// raise records that member and this node both account for at least used
// on key.
func (sh shared) raise(member, key string, l *bucket.Limit, now clock.Instant, used int64) {
	if k := sharedKey(member, key); k != "" {
		sh.s.Merge(k, l, now, used)
	}
}

// forget drops what this node shares with member about key.
func (sh shared) forget(member, key string) {
	if k := sharedKey(member, key); k != "" {
		sh.s.Delete(k)
	}
}

// state returns the state this node shares with member about key.
func (sh shared) state(member, key string, now clock.Instant) (bucket.Limit, int64, bool) {
	k := sharedKey(member, key)
	if k == "" {
		return bucket.Limit{}, 0, false
	}
	return sh.s.Used(k, now)
}

// each calls fn for every entry shared with member.
func (sh shared) each(member string, now clock.Instant, fn func(key string, l bucket.Limit, used int64)) {
	sh.s.Range(now, func(batch []bucket.Snapshot) bool {
		for i := range batch {
			if m, key := splitShared(batch[i].Key); m == member {
				fn(key, batch[i].Limit, batch[i].Used)
			}
		}
		return true
	})
}

// forgetAll drops everything shared with member.
func (sh shared) forgetAll(member string, now clock.Instant) {
	var keys []string
	sh.each(member, now, func(key string, _ bucket.Limit, _ int64) { keys = append(keys, key) })
	for _, k := range keys {
		sh.forget(member, k)
	}
}
