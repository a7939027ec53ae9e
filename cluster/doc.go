// Package cluster is ringlimit's membership layer: it wraps
// github.com/hashicorp/memberlist (SWIM gossip) to join a cluster, detect
// failed members, leave gracefully, and advertise each member's peer gRPC
// address. It publishes the members that belong on the hash ring through the
// small Listener interface; cmd/node feeds them into package ring. It also
// carries cluster-wide state (incident overrides) for a Messages given in
// Config: small broadcasts gossiped to every member, and the whole state in
// memberlist's push/pull syncs. It imports no other ringlimit package but the
// leaf clock (Config.Clock, its one time source).
//
// Invariants the package keeps:
//
//   - Every member advertises its peer gRPC address (and its public gRPC
//     address, if set) in its gossip metadata; a
//     member whose metadata does not decode is never admitted.
//   - Alive is exactly the alive and suspect members, sorted by name: a
//     suspect member keeps its keys until it is declared dead. The Listener
//     is told every member with its state (what Members returns), so that it
//     can tell a dead member (which may come back) from a left one.
//   - The Listener is called from one goroutine owned by the Cluster, one call
//     at a time, in order, and only when the list changed; never from
//     memberlist's goroutines, so a slow listener cannot stall failure
//     detection. Nothing is told before the first join (a member given
//     seeds is not a cluster of its own); a member that joins is told every
//     member its seed knew in one call, not one by one as the seed's answer
//     is merged.
//   - A member that left gracefully is reported as StateLeft, a crashed one as
//     StateDead. (memberlist reports both the same way; the leaving member
//     sets a flag in its metadata before it leaves.) Both stay in Members for
//     Config.DepartedRetention.
//   - New never blocks on, or fails because of, unreachable seeds: joining is
//     retried in the background until one seed answers or Close.
//   - A partition heals: until Leave or Close, every Config.RejoinInterval the
//     member contacts its seeds (hostnames re-resolved) and the members it
//     saw die, unless they are alive. Both sides learn they were declared
//     dead, refute, and become one cluster again. A healthy cluster whose
//     seeds are alive makes no such call.
//   - Close leaves first (unless Leave was called), is idempotent, and leaves
//     no goroutine of this package behind.
//   - A member restarted with the same name and gossip address rejoins and
//     takes its old place, whether it had crashed or left.
//   - A broadcast (at most MaxBroadcastLen bytes, one UDP packet) is passed
//     on by every member that hears it, and delivered to Messages.Receive
//     once per member, never to its sender; a longer one is refused with an
//     error log, not truncated. A member that missed it (down, cut off, or
//     joining later) gets the state at its next push/pull sync, and at its
//     join. The state (at most MaxStateLen bytes) goes over TCP.
//
// # Gossip encryption
//
// With Config.Keys, every gossip packet and stream is encrypted (AES-GCM)
// with the primary key, the first, and the others are tried on what comes
// in; unencrypted gossip is refused. With Config.Label, every packet and
// stream carries the label and a member refuses those with another label (or
// none), so that two clusters sharing a network or a key stay apart. A
// refused member is never listed, and never lists the refusing ones.
//
// To replace key K1 by K2 without any member refusing another's gossip, do
// each step on every member before the next:
//
//  1. AddKey(K2): every member reads K2, still writes K1;
//  2. UseKey(K2): members write K2, which all of them can read;
//  3. RemoveKey(K1): nobody writes K1 any more.
//
// A new member that has only K2 can join once step 1 has reached every
// member. Keyring changes apply to this member only; nothing is gossiped, and
// Config.Keys is not updated. SetKeys does the three steps on one member for
// a whole keyring (what cmd/node does when its key file changes).
//
// # Timings
//
// DefaultLANConfig keeps memberlist's LAN defaults (crash detected in about
// 5 to 10 s). DefaultLocalConfig is tuned for loopback: every survivor drops a
// crashed member within 2 s. Config explains the trade-off: faster detection
// means more false suspicion of members that merely stall (GC, CPU
// starvation), and the suspicion timeout grows with log10 of the cluster size.
//
// # Usage
//
//	cfg := cluster.DefaultLANConfig()
//	cfg.Name = "node-1"
//	cfg.BindAddr = "10.0.0.1:7946"
//	cfg.PeerAddr = "10.0.0.1:9191"
//	cfg.APIAddr = "10.0.0.1:9091"
//	cfg.Seeds = []string{"10.0.0.2:7946", "10.0.0.3:7946"}
//	cfg.Listener = cluster.ListenerFunc(func(all []cluster.Member) { ring.Set(onRing(all)) })
//	cfg.Messages = overrides // Receive, LocalState, MergeState
//	cfg.Clock = clk // the node's one clock, shared by every package
//	cfg.Logger = logger
//	c, err := cluster.New(cfg)
//	if err != nil { ... }
//	defer c.Close(ctx)
//	c.Broadcast(msg) // to every member; Messages.Receive on each of them
//	...
//	// graceful shutdown: leave (peers stop routing to us), hand off, close.
//	err = c.Leave(ctx)
//	...
//	err = c.Close(ctx)
package cluster
