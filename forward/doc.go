// Package forward routes checks to the node that owns their key. A check
// whose key this node owns goes straight to the local bucket.Store; the
// others go to their owners through Peers (the peer transport, which
// batches them). It is written against interfaces it owns: Owners (the
// hash ring) and Peers (the transport), whose parts each piece declares
// where it uses them: CheckSender, StateMover and ReplicaSender (the data
// plane) and Membership, on the messages of internal/peermsg. The Router
// is in turn the peer service's Handler for the batches other nodes send
// here, and its StatsSource. forward does not import peer: the node wires
// a peer.Pool in as Peers and the Router into a peer.Server.
//
// Its parts, each a small type with its own configuration:
//   - Router (router.go): routing, local decisions, failure modes
//     (degrade.go), the peer Handler (serve.go).
//   - handoff (handoff.go): pushes the state of keys this node no longer
//     owns to their new owners after a ring change, and fetches a key's
//     state from its previous owner during the grace period.
//   - leases (lease.go): token leases a hot key's owner grants to entry
//     nodes.
//   - prelimiter (prelimit.go): the entry node's generous local stage.
//   - reservations (reserve.go): a check with Reserve records a
//     reservation on the key's owner, Router.Settle routes a settle to it
//     (through Config.Settler), and the records travel with the key's
//     replicas and handoffs.
//   - concurrency limits (concurrency*.go): Router.Acquire, Renew and
//     Release decided by the key's owner on its lease table
//     (bucket.Leases), routed there through Config.Leaser; each key's
//     absolute lease set rides the replication rounds and handoffs.
//   - tracing (trace.go): with Config.TracerProvider, a span
//     "ringlimit.forward" around each wait for an owner's answer.
//
// Invariants:
//   - A batch is validated whole before any of it is applied: one bad check
//     fails the batch and changes no state.
//   - Results come back in the order of the checks; checks on one key are
//     applied by its owner in the order they were given.
//   - At most two hops: a receiver whose ring names another owner
//     redirects a check (unless it holds a copy it has not pushed), and
//     the sender sends it once more as a last hop, decided whatever the
//     receiver's ring says, so ring views that are still converging cannot
//     make a check loop. A redirect to a member the sender's ring has just
//     dropped means the receiver's ring is behind: the sender asks it again
//     until it agrees, then as the last hop (catchUp), never from a fresh
//     failure-mode share.
//   - Every peer call has a deadline. When the owner cannot be reached, the
//     check's FailureMode decides, and the Result says Degraded.
//   - Ownership moves without refilling buckets: after every ring change the
//     node pushes the state of keys it no longer owns to their new owners
//     (who keep the more spent of the two), and for Config.Grace after a
//     change an owner with no state for a key asks the key's previous owner
//     before it decides.
//   - A reservation is settled once: its owner marks the record settled
//     before it adjusts the key, copies merge by id with settled winning,
//     and a settled record is kept until its TTL ends. A degraded answer
//     (and a reserve the table has no room for) carries no reservation.
//   - A concurrency slot exists only once the key's successor holds it:
//     every acquire, renew and release on the owner waits for a
//     replication round (shared by the changes waiting together) that
//     carries the key's whole lease set; an acquire or renew not
//     acknowledged is undone, a release stands. A new owner counts the set
//     it holds (a dead owner's replica), or, after a ring change or a
//     return from a minority, the previous owner's set (pushed or fetched)
//     before it decides; nothing stands in for an unreachable owner.
//   - One clock: every decision and every wait reads Config.Clock.
//   - A peek (Check.Peek) is decided by the owner and spends nothing: never
//     from a lease, never counted by the pre-limiter, never held for or
//     marked for replication (peek.go).
//   - A reset (Router.Reset) is the owner's: it forgets the key, records a
//     tombstone and tells every live member, which drop their copies and
//     leases; states carry their sender's tombstone so that none from
//     before the reset is merged after it (reset.go). Export and Restore
//     carry tombstones across a restart, and a member that may have missed
//     one is told it: when it joins, or when a state it sends is refused
//     as older than it (restore.go, tell.go).
//   - An adaptive key's limit is its owner's alone: only the owner runs the
//     key's controller (created from the check's spec, ticked lazily on
//     its checks, reports and releases), decides with its current limit
//     and answers it; the controller's state goes with the key's state to
//     its successors and with a handoff, and a new owner resumes from its
//     copy (adaptive.go).
//
// Shutdown, in order: Leave (after the cluster announced the leave) hands
// every key to its new owner; Quiesce waits for peers to stop sending
// checks here; the node then drains and stops its peer server; Close stops
// the Router's background work; finally the node closes Peers. Close is
// safe to call more than once.
package forward
