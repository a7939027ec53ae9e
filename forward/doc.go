// Package forward routes checks to the node that owns their key. A check
// whose key this node owns goes straight to the local bucket.Store; the
// others travel to their owners over the internal Peer gRPC service, batched:
// every check bound for one owner that is waiting when a connection slot
// frees up travels in the same RPC (up to MaxBatch), so concurrent checks on
// a hot key are coalesced and the per-RPC cost is shared.
//
// Invariants:
//   - A batch is validated whole before any of it is applied: one bad check
//     fails the batch and changes no state.
//   - Results come back in the order of the checks; checks on one key are
//     applied by its owner in the order they were given.
//   - Hop limit 1: a check received from a peer is decided on this node's
//     store whatever this node's ring says, so ring views that are still
//     converging cannot make a check loop.
//   - Every peer call has a deadline (Config.PeerTimeout). When the owner
//     cannot be reached, the check's FailureMode decides, and the Result says
//     Degraded.
//   - Ownership moves without refilling buckets: after every ring change the
//     node pushes the state of keys it no longer owns to their new owners
//     (who keep the more spent of the two), and for Config.Grace after a
//     change an owner with no state for a key asks the key's previous owner
//     before it decides.
package forward
