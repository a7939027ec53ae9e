// Package forward routes checks to the node that owns their key. A check
// whose key this node owns goes straight to the local bucket.Store; the
// others travel to their owners.
//
// Invariants:
//   - A batch is validated whole before any of it is applied: one bad check
//     fails the batch and changes no state.
//   - Results come back in the order of the checks.
package forward
