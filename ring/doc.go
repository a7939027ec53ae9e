// Package ring maps keys to the cluster member that owns them, with
// consistent hashing with bounded loads (github.com/buraksezer/consistent
// v0.10.0, hashed with github.com/cespare/xxhash/v2).
//
// Keys hash into a fixed number of partitions (xxhash(key) mod Partitions).
// A key of the inline namespace, "i|" + limit spec + "|" + key, hashes as
// its last part alone: its owner is the owner of the caller's key.
// Each member is placed on a hash circle ReplicationFactor times, and each
// partition goes to the first member clockwise from the partition's own
// hash that still has room: no member owns more than
// ceil(floor(Partitions/members) × Load) partitions. When one member joins
// or leaves, only about 1/N of the keys change owner.
//
// Invariants the package keeps:
//
//   - Pure: no goroutines, no clocks, no network, no logging, no global
//     state. A Ring is a function of its Config and its member names, and the
//     order of the names does not matter.
//   - Immutable snapshot: a Ring's ownership never changes after New returns
//     it, so it is safe for concurrent use; Owner takes no lock. A membership
//     change builds a new Ring; callers swap it in (for example with an
//     atomic.Pointer). The zero Ring and a nil *Ring are empty rings.
//   - Successors are exact: successor i of a key is its owner on the ring
//     built under the same Config over the members minus the owner and
//     successors 1..i-1, so a node that replicates a key to its successor
//     sends it where ownership moves when the owner leaves. Those smaller
//     rings are built on first use and cached on the Ring, under a lock.
//   - Owner is the hot path: one xxhash and one index into a partition table
//     built by New. It takes no lock and allocates nothing, and it answers
//     exactly what the library's LocateKey answers for the same members
//     (for an inline key, for the caller's key it carries).
//   - Version identifies the ownership mapping: two nodes that see the same
//     member names under the same Config compute the same Version, whatever
//     the order they learned the names in; any change of members (or of
//     Config) changes it, up to 64-bit hash collisions. The empty ring's
//     Version is 0 and no other ring's is.
//   - Errors, not panics, and never a corrupt ring.
//
// # Library hazards this package defends against
//
// The library is wrapped because, used directly, it can corrupt itself or
// panic:
//
//   - It places replica i of member m at hash(fmt.Sprintf("%s%d", m, i)), so
//     "node-1" replica 12 and "node-11" replica 2 are the same point: the
//     second silently replaces the first, and removing either member later
//     deletes the other's point, after which the library dereferences nil.
//     Here each member is given to the library under a collision-free
//     encoding of its name (length-prefixed and terminated: "6:node-1|"), so
//     the replica strings of different members never coincide. New also
//     counts the distinct replica points and returns ErrHashCollision if two
//     of them share a 64-bit hash, rather than build a ring that is wrong.
//   - It panics ("not enough room to distribute partitions") when it cannot
//     spread the partitions, for example when there are more members than
//     partitions. New refuses that case up front with ErrTooManyMembers,
//     Config.Validate refuses the settings under which the library can get
//     stuck (Load ≤ 1, ReplicationFactor < 2), and any panic that still comes
//     out of the library is recovered and returned as an error.
//   - It panics in New when given an empty, non-nil member list; an empty
//     ring is handled here without calling it.
//   - It returns a nil Member from LocateKey on an empty ring; Owner returns
//     ErrNoMembers instead.
//   - It panics on a nil Hasher; this package always passes xxhash.
//
// # Usage
//
//	r, err := ring.New(ring.DefaultConfig(), []string{"node-1", "node-2", "node-3"})
//	if err != nil { ... }
//	owner, err := r.Owner("user:42") // "node-2", say
//	next := r.Successors("user:42", 1) // who owns it once node-2 leaves
//
// On each membership change, build a new Ring from the full member list
// and compare Version values to tell whether two views agree.
package ring
