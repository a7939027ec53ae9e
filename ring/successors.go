package ring

import (
	"slices"
	"sync"

	"github.com/cespare/xxhash/v2"
)

// withoutCache holds the rings over a Ring's members minus some of them,
// built by Successors on first use. Each is keyed by the set it leaves
// out, as a bitmask over the indexes of the sorted member names (bit i of
// byte i/8 for member i), so that a lookup needs no allocation. The zero
// value is ready to use; mu guards rings.
type withoutCache struct {
	mu    sync.RWMutex
	rings map[string]*Ring
}

// Successors returns up to n distinct members that would own key, in order,
// if the owner and the successors before each left: Successors(key,1)[0] is
// the owner of key on the ring without its owner (exactly: ring.New over the
// same Config and members minus the owner, then Owner(key)). Fewer when the
// ring has fewer members.
//
// Successor i is the owner of key on the ring built under the same Config
// over the members minus the owner and successors 1..i-1. Those smaller
// rings are built on first use and cached on r, so the first calls cost a
// New each; later calls take a read lock and allocate only the returned
// slice. It is nil when n ≤ 0 or the ring has fewer than two members.
func (r *Ring) Successors(key string, n int) []string {
	if r == nil || n <= 0 || len(r.names) < 2 {
		return nil
	}
	return r.AppendSuccessors(make([]string, 0, min(n, len(r.names)-1)), key, n)
}

// AppendSuccessors appends Successors(key, n) to dst and returns the
// extended slice; it allocates nothing when dst has room.
func (r *Ring) AppendSuccessors(dst []string, key string, n int) []string {
	if r == nil || n <= 0 || len(r.names) < 2 {
		return dst
	}
	n = min(n, len(r.names)-1)
	p := xxhash.Sum64String(placement(key)) % uint64(len(r.table))

	// The set left out so far, as a bitmask of member indexes.
	var small [32]byte
	var mask []byte
	if need := (len(r.names) + 7) / 8; need <= len(small) {
		mask = small[:need]
	} else {
		mask = make([]byte, need)
	}
	name := r.table[p]
	for found := 0; found < n; found++ {
		i, _ := slices.BinarySearch(r.names, name)
		mask[i/8] |= 1 << (i % 8)
		sub := r.without(mask)
		if sub == nil {
			break // the library could not spread the partitions: see without
		}
		name = sub.table[p]
		dst = append(dst, name)
	}
	return dst
}

// without returns the ring over r's members minus those set in mask,
// building and caching it on first use. It returns nil in the unexpected
// case that New fails for the smaller member set (it cannot have too many
// members or colliding points when r has not; the library could still, in
// principle, fail to place a partition).
func (r *Ring) without(mask []byte) *Ring {
	c := &r.subs
	c.mu.RLock()
	sub, ok := c.rings[string(mask)] // no allocation for the lookup
	c.mu.RUnlock()
	if ok {
		return sub
	}

	members := make([]string, 0, len(r.names))
	for i, name := range r.names {
		if mask[i/8]&(1<<(i%8)) == 0 {
			members = append(members, name)
		}
	}
	sub, err := New(r.cfg, members)
	if err != nil {
		sub = nil
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	if prev, ok := c.rings[string(mask)]; ok {
		return prev // another caller built it first
	}
	if c.rings == nil {
		c.rings = make(map[string]*Ring)
	}
	c.rings[string(mask)] = sub
	return sub
}

// SuccessorTable returns, for each partition in partition order, the member
// that would own it if its owner left (what Successors(key, 1) answers for
// every key of the partition), in a new slice the caller may keep. It is
// nil when the ring has fewer than two members; an entry is "" in the
// unexpected case that the smaller ring could not be built (see without).
func (r *Ring) SuccessorTable() []string {
	if r == nil || len(r.names) < 2 {
		return nil
	}
	out := make([]string, len(r.table))
	mask := make([]byte, (len(r.names)+7)/8)
	for p, name := range r.table {
		i, _ := slices.BinarySearch(r.names, name)
		clear(mask)
		mask[i/8] |= 1 << (i % 8)
		if sub := r.without(mask); sub != nil {
			out[p] = sub.table[p]
		}
	}
	return out
}
