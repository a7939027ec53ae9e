package cluster

import (
	"time"

	"github.com/hashicorp/memberlist"
)

// delegate implements memberlist's callback interfaces for a Cluster.
//
// Concurrency: memberlist calls these from several goroutines (the
// EventDelegate ones never concurrently with each other), often while holding
// its own node lock. So every method only updates the Cluster's table under
// Cluster.mu and wakes the event loop without blocking; none of them calls
// back into memberlist or into the Listener. The user-message ones pass
// through to Config.Messages, whose methods must not block either.
type delegate struct {
	c *Cluster
}

var (
	_ memberlist.Delegate      = (*delegate)(nil)
	_ memberlist.EventDelegate = (*delegate)(nil)
	_ memberlist.AliveDelegate = (*delegate)(nil)
	_ memberlist.PingDelegate  = (*delegate)(nil)
)

// NodeMeta advertises our peer, gRPC and HTTP addresses and whether we are leaving.
func (d *delegate) NodeMeta(limit int) []byte {
	b := encodeMeta(meta{peerAddr: d.c.cfg.PeerAddr, apiAddr: d.c.cfg.APIAddr, httpAddr: d.c.cfg.HTTPAddr, leaving: d.c.leaving.Load()})
	if len(b) > limit { // cannot happen: Validate bounds PeerAddr and APIAddr
		return nil
	}
	return b
}

// NotifyMsg is a broadcast from another member (Cluster.Broadcast).
func (d *delegate) NotifyMsg(b []byte) { d.c.receive(b) }

// GetBroadcasts hands memberlist the queued broadcasts that fit beside its
// own messages in one packet.
func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte {
	return d.c.queue.GetBroadcasts(overhead, limit)
}

// LocalState is Config.Messages' state, for a push/pull sync.
func (d *delegate) LocalState(join bool) []byte { return d.c.localState() }

// MergeRemoteState is another member's Config.Messages state, from a
// push/pull sync.
func (d *delegate) MergeRemoteState(buf []byte, join bool) { d.c.mergeState(buf) }

// NotifyAlive admits only members whose metadata decodes (a ringlimit member
// with a usable peer address). Anything else — a member of another
// memberlist-based cluster pointed at our port, an incompatible version — is
// refused and logged.
func (d *delegate) NotifyAlive(peer *memberlist.Node) error {
	if _, err := decodeMeta(peer.Meta); err != nil {
		d.c.log.Warn("cluster: refusing member", "member", peer.Name, "addr", peer.Address(), "err", err)
		return err
	}
	return nil
}

// NotifyJoin: a member became alive (new, or back from dead or left).
func (d *delegate) NotifyJoin(n *memberlist.Node) { d.alive(n) }

// NotifyUpdate: an alive member changed its metadata (for instance it
// announced that it is leaving).
func (d *delegate) NotifyUpdate(n *memberlist.Node) { d.alive(n) }

func (d *delegate) alive(n *memberlist.Node) {
	m, err := decodeMeta(n.Meta)
	if err != nil { // NotifyAlive refused it already; defensive
		d.c.log.Warn("cluster: ignoring member with bad metadata", "member", n.Name, "err", err)
		return
	}
	d.c.upsert(n, m)
}

// NotifyLeave: a member was declared dead or left. n.State cannot tell which
// (memberlist v0.7.0 never sets it), the leaving flag in its metadata does.
func (d *delegate) NotifyLeave(n *memberlist.Node) { d.c.departed(n.Name) }

// AckPayload sends nothing with our acks.
func (d *delegate) AckPayload() []byte { return nil }

// NotifyPingComplete: our probe of other was answered, so if we suspected it,
// we no longer do.
func (d *delegate) NotifyPingComplete(other *memberlist.Node, _ time.Duration, _ []byte) {
	d.c.setState(other.Name, StateAlive, StateSuspect)
}
