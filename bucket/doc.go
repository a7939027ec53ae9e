// Package bucket holds ringlimit's five rate-limiting algorithms, the Decision
// they return and the bounded, sharded key store that keeps their state, and
// the concurrency (in-flight) limit's lease table.
//
// Invariants the package keeps:
//
//   - Algorithms are pure: each one is a function of its state, a Limit, the
//     current time and a cost. Nothing in this package reads a clock, logs,
//     starts a goroutine or touches the network.
//   - Time is a parameter: every check takes now as a clock.Instant on one
//     node's timeline (clock.System in production, a fake in tests), never
//     as a bare int64, so an instant cannot be passed where a cost is. For
//     the buckets, time that goes backwards counts as no time passing: it
//     never removes tokens. The window algorithms never move a key back into
//     an earlier window than the one they hold; within a window, a check is
//     placed at the time it carries.
//   - A key never seen starts full. Refill is computed lazily from elapsed time
//     at check time and capped at capacity.
//   - A rejection spends nothing and still records the refill it computed.
//   - Only a settle (Store.Settle, for a reservation: reserve.go) takes a
//     token bucket below zero, as a debt of at most one capacity that
//     refills like any level; every state that moves between nodes keeps
//     it (a used of up to twice the capacity), and a lease is never
//     granted from it.
//   - Arithmetic is exact: bucket levels are integers in units of 1/den of a
//     token, so retry-after is exact and rounded up to the millisecond, and a
//     check at now+RetryAfter with the same cost is admitted.
//   - The Store is bounded in keys and bytes (keys counted with their length),
//     and drops only keys that hold nothing: full again, or past their window.
//     A key that has spent is never evicted to make room; a new key that finds
//     none is refused (ErrFull) and its caller decides it in its failure mode.
//     State from peers never drops a spent key either, and a negative used or
//     spend from a peer is refused. Which shard a key lands in is seeded per
//     process, so no caller can aim keys at one shard.
//   - Keys live in namespaces (keyspace.go): every key the store holds
//     begins with a tag the node chose (inline, policy, RLS, RLS override,
//     concurrency), and an inline key carries its limit's Spec, so that no
//     request can name another namespace's bucket, and a check that names
//     another limit for an inline key gets a bucket of its own. The Store
//     converts a key's spend when the same key comes with another limit
//     (an operator's reload), never refilling it.
//   - Peek answers exactly what Take would answer at the same instant and
//     changes nothing: no key inserted, no LRU move, no change mark, no
//     log or window change (peek_test.go checks it against Take).
//   - A Concurrency limit is acquired, never checked: every Store
//     operation refuses it (an error wrapping ErrLimit) and changes
//     nothing. Its leases live in a Leases table, bounded in records and
//     bytes: a key never holds more unexpired leases than its limit on the
//     table's clock, and a lease counts for nothing from its expiry on.
//     Lease ids name their key (lease_id.go), as reservation ids do.
//   - A reset key leaves a tombstone (tombstone.go): a state from before
//     the reset, received later, is refused by Admit, so that the spend
//     does not come back; tombstones are bounded per shard.
//
// # Usage
//
//	lim, err := bucket.NewLimit(bucket.TokenBucket, 10, time.Second, 50)
//	if err != nil { ... }
//	store, err := bucket.NewStore(bucket.DefaultStoreConfig())
//	if err != nil { ... }
//	clk := clock.System() // one per node, shared by every check
//	d, err := store.Take("user:42", &lim, clk.Now(), 1)
//
// A limit a user wrote (an API request, a policy or RLS file) is read with
// LimitSpec.Parse, whose errors name the field where the input has it:
//
//	set, err := (&bucket.LimitSpec{Limit: 10, Per: "1s", Burst: 50}).Parse("limit")
//	// set.Limit, set.FailureMode, set.Lease, set.Sync
//
// For a single key without a store, New(lim) returns a Bucket.
package bucket
