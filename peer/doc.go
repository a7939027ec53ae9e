// Package peer is the transport between ringlimit nodes, both sides of the
// internal Peer gRPC service (proto/peer/v1): a Pool that keeps one
// connection per member and sends it batches of checks, handoffs, replicas
// and fetches; and a Server that decides the batches other nodes send, through
// a Handler the node provides.
//
// Every batch carries the version of the sender's ring (the one given to
// Pool.SetMembers when the batch left), for the receiver to compare with
// its own. A receiver whose ring names another owner for a check answers
// it with Answer.Redirect and spends nothing, unless the check is
// Request.Final (the sender's last hop). A receiver whose store has no room
// for a check's new key answers it with Answer.Full and spends nothing: the
// sender decides it in its failure mode. An owner keeps each key's state
// on its successors with Pool.Replicate (absolute spent values); a
// receiver refuses a batch from a node outside its ring.
//
// Checks travel batched: every check bound for one member that is waiting
// when a slot frees up leaves in the same message (internal/batcher), on one
// Check stream per member that stays open, encoded by hand (wire.go; the
// bytes are those of the generated messages, and wire_test.go checks both
// directions against the generated code). Replicate calls are encoded by
// hand too (replicate.go) when made on content-subtype "ringlimit-peer", as
// Pool makes them; a generated client on the default content-subtype is
// served by the generated code. The keys a Handler is given point into
// reused buffers: it copies those it keeps.
//
// Tracing (trace.go): with Config.PropagateTrace a check sent with a
// sampled span in its context carries that span's W3C trace context
// (Check.trace, 25 bytes); a Server given a TracerProvider
// (ServerConfig.TracerProvider) decides each such check inside a span
// "ringlimit.peer.check", its child. An untraced check's bytes are unchanged, and a node that does not
// know the field skips it.
//
// Invariants:
//   - Every call has a deadline (Config.Timeout): a stream whose oldest
//     batch waited that long breaks, and its batches fail.
//   - A check whose caller gave up while it waited for a batch is never
//     sent.
//   - A received batch is validated whole before any of it is decided: one
//     bad check refuses the batch and changes no state.
//   - Answers come back in the order of the checks.
//   - A redirected check spent nothing on the node that redirected it.
//
// Shutdown: Server.Drain asks peers to end their streams to this node (so
// a graceful gRPC stop need not wait for them); Pool.Close fails the calls
// still waiting and closes every connection. Both are safe to call twice.
package peer
