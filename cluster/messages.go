package cluster

import (
	"encoding/binary"
	"sync"

	"github.com/hashicorp/memberlist"
)

// Messages is cluster-wide state that rides the gossip (Config.Messages):
// small messages broadcast to every member, and the whole state exchanged
// with one member at a time in memberlist's push/pull syncs (every
// Config.PushPullInterval with a random member, and when a member joins, so a
// member that joins late, or missed a broadcast, catches up).
//
// Delivery: a broadcast reaches every member that is alive while it spreads
// (each member that hears it passes it on), normally once. It is best effort:
// a member that is down or cut off then misses it and only catches up at its
// next push/pull sync. A copy that arrives after the member forgot it (it
// remembers the last 4096 broadcasts) is delivered again, so applying a
// message twice must be harmless. A member never receives its own broadcasts.
// Order is not kept.
//
// Concurrency: memberlist calls the methods from its own goroutines, often
// several at once (Receive from the packet handler, LocalState and MergeState
// from TCP handlers), and possibly before New has returned. They must be safe
// for concurrent use, must not block (slow ones delay gossip and push/pull
// syncs), and must not call Close. Calling Broadcast from them is allowed.
type Messages interface {
	// Receive is a broadcast from another member (the bytes given to its
	// Broadcast). msg is only valid during the call: copy what you keep.
	// The bytes come off the network: validate them.
	Receive(msg []byte)
	// LocalState returns this member's whole state, sent to a member in a
	// push/pull sync over TCP. At most MaxStateLen bytes: a bigger state is
	// not sent (and logged). Nil: nothing to send.
	LocalState() []byte
	// MergeState is a member's whole state (its LocalState), received in a
	// push/pull sync. state is only valid during the call.
	MergeState(state []byte)
}

// MaxBroadcastLen is the largest msg Broadcast sends, in bytes. A broadcast
// travels in a single UDP gossip packet (memberlist's UDPBufferSize, 1400
// bytes), next to memberlist's own messages; 1024 bytes leave room for this
// package's frame header (17 bytes), memberlist's framing (5 bytes), its
// encryption (up to 45 bytes) and the longest cluster label (257 bytes).
const MaxBroadcastLen = 1024

// MaxStateLen is the largest state LocalState may return, in bytes.
// memberlist refuses a push/pull whose user state exceeds 20 MiB (and the
// whole sync fails with it, membership included); 16 MiB leaves the rest to
// the member list.
const MaxStateLen = 16 << 20

// A broadcast on the wire (memberlist user message):
//
//	byte 0      frame version (frameVersion)
//	bytes 1..8  origin: random, chosen by the sending Cluster at New
//	bytes 9..16 sequence number of the broadcast at its origin
//	bytes 17..  the message
//
// (origin, sequence) identifies a broadcast, so that a member delivers it
// once however many copies it hears, and passes on only the first.
const (
	frameVersion   = 1
	frameHeaderLen = 17
)

// Broadcast limits.
const (
	// seenCapacity is how many broadcast ids a member remembers.
	seenCapacity = 4096
	// maxQueued bounds the broadcasts waiting to be gossiped; beyond it the
	// most retransmitted ones are dropped (they reached most members).
	maxQueued = 1024
)

// msgID identifies one broadcast.
type msgID struct{ origin, seq uint64 }

// Broadcast queues msg to be gossiped to every member (see Messages for the
// delivery guarantees); it returns at once. Each member passes it on a few
// times (memberlist's retransmit count, which grows with log10 of the
// cluster size). A msg longer than MaxBroadcastLen is not sent: the error is
// logged. msg is copied. Broadcast is safe for concurrent use, and a no-op
// after Close.
func (c *Cluster) Broadcast(msg []byte) {
	if c.isClosed.Load() {
		return
	}
	if len(msg) > MaxBroadcastLen {
		c.log.Error("cluster: broadcast not sent: too long", "bytes", len(msg), "max", MaxBroadcastLen)
		return
	}
	id := msgID{origin: c.origin, seq: c.seq.Add(1)}
	c.seen.add(id) // our own copies, relayed back, are not delivered
	frame := make([]byte, frameHeaderLen, frameHeaderLen+len(msg))
	frame[0] = frameVersion
	binary.BigEndian.PutUint64(frame[1:9], id.origin)
	binary.BigEndian.PutUint64(frame[9:17], id.seq)
	c.enqueue(append(frame, msg...))
}

// enqueue hands a frame to memberlist's gossip, bounding the queue.
func (c *Cluster) enqueue(frame []byte) {
	c.queue.QueueBroadcast(broadcast(frame))
	if n := c.queue.NumQueued(); n > maxQueued {
		c.queue.Prune(maxQueued)
		c.log.Warn("cluster: broadcast queue full, dropped the most retransmitted", "queued", n, "max", maxQueued)
	}
}

// receive handles a user message from memberlist: a broadcast heard for the
// first time is passed on and delivered, a copy is dropped.
func (c *Cluster) receive(frame []byte) {
	if len(frame) < frameHeaderLen || frame[0] != frameVersion {
		c.log.Warn("cluster: ignoring a broadcast that is not ours", "bytes", len(frame))
		return
	}
	if len(frame)-frameHeaderLen > MaxBroadcastLen {
		c.log.Warn("cluster: ignoring an oversized broadcast", "bytes", len(frame)-frameHeaderLen, "max", MaxBroadcastLen)
		return
	}
	id := msgID{origin: binary.BigEndian.Uint64(frame[1:9]), seq: binary.BigEndian.Uint64(frame[9:17])}
	if !c.seen.add(id) {
		return
	}
	if !c.isClosed.Load() {
		c.enqueue(append([]byte(nil), frame...)) // memberlist reuses frame
	}
	if c.cfg.Messages != nil {
		c.cfg.Messages.Receive(frame[frameHeaderLen:])
	}
}

// localState is the user state this member sends in a push/pull sync.
func (c *Cluster) localState() []byte {
	if c.cfg.Messages == nil {
		return nil
	}
	state := c.cfg.Messages.LocalState()
	if len(state) > MaxStateLen {
		c.log.Error("cluster: state not sent in push/pull: too long", "bytes", len(state), "max", MaxStateLen)
		return nil
	}
	return state
}

// mergeState takes a member's user state from a push/pull sync.
func (c *Cluster) mergeState(state []byte) {
	if c.cfg.Messages == nil || len(state) == 0 {
		return
	}
	c.cfg.Messages.MergeState(state)
}

// numOnRing is the cluster size that sets the retransmit count: the members
// this one sees alive or suspect, at least 1.
func (c *Cluster) numOnRing() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, r := range c.members {
		if r.m.State.onRing() {
			n++
		}
	}
	return max(n, 1)
}

// broadcast is one frame in memberlist's queue. Every frame is distinct, so
// it never invalidates another (memberlist.UniqueBroadcast).
type broadcast []byte

var _ memberlist.UniqueBroadcast = broadcast(nil)

func (b broadcast) Invalidates(memberlist.Broadcast) bool { return false }
func (b broadcast) Message() []byte                       { return b }
func (b broadcast) Finished()                             {}
func (b broadcast) UniqueBroadcast()                      {}

// seenSet remembers the last seenCapacity broadcast ids. Safe for concurrent
// use.
type seenSet struct {
	mu   sync.Mutex // guards ids, ring, next
	ids  map[msgID]struct{}
	ring []msgID // insertion order, oldest at next once full
	next int
}

func newSeenSet() *seenSet {
	return &seenSet{ids: make(map[msgID]struct{}, seenCapacity), ring: make([]msgID, 0, seenCapacity)}
}

// add records id and reports whether it is new.
func (s *seenSet) add(id msgID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.ids[id]; ok {
		return false
	}
	if len(s.ring) < seenCapacity {
		s.ring = append(s.ring, id)
	} else {
		delete(s.ids, s.ring[s.next])
		s.ring[s.next] = id
		s.next = (s.next + 1) % seenCapacity
	}
	s.ids[id] = struct{}{}
	return true
}
