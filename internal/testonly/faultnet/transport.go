package faultnet

import (
	"container/heap"
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// maxQueuedPackets bounds the packets waiting (for a delay, or for
// memberlist to read them) at one Transport, like a UDP receive buffer:
// packets beyond it are dropped.
const maxQueuedPackets = 4096

var _ memberlist.NodeAwareTransport = (*Transport)(nil)

// Transport is a memberlist transport for one node of a Network: set it as
// memberlist.Config.Transport. Packets and streams go through the Network's
// links, so its faults apply to gossip as to any other traffic.
//
// The node's memberlist address is "127.77.x.y:7946", a fake loopback IP per
// node (memberlist wants an IP and a port); it is never bound, and nothing is
// sent on a real network. FinalAdvertiseAddr returns it whatever
// AdvertiseAddr and BindAddr say. Join other nodes at their Addr.
//
// A node has at most one Transport at a time; after Shutdown (which
// memberlist's Shutdown calls) the node may get a new one, at the same
// address, as a restarted process would. Shutdown closes the node's gossip
// connections, as a process exit does.
//
// Concurrency: safe for concurrent use. One goroutine per Transport feeds
// PacketCh; it stops at Shutdown or Network.Close.
type Transport struct {
	net      *Network
	address  Addr
	ip       net.IP
	packetCh chan *memberlist.Packet
	streamCh chan net.Conn
	stop     chan struct{} // closed by Shutdown
	loopDone chan struct{}

	dead bool // guarded by net.mu: shut down, accepts and dials nothing

	mu      sync.Mutex           // guards the fields below
	queue   packetQueue          // by due time
	seq     uint64               // tie-break: order of sending
	lastDue map[string]time.Time // per sender, so that delivery keeps order
	wake    chan struct{}        // capacity 1: the queue changed
}

// Transport returns a memberlist transport for node. It fails if the node
// has a Transport that is not shut down, or after Close.
func (n *Network) Transport(node string) (*Transport, error) {
	if err := checkNode(node); err != nil {
		return nil, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, fmt.Errorf("faultnet: transport for %s: %w", node, net.ErrClosed)
	}
	if n.transports[node] != nil {
		return nil, fmt.Errorf("faultnet: node %s already has a Transport that is not shut down", node)
	}
	ni, err := n.node(node)
	if err != nil {
		return nil, err
	}
	t := &Transport{
		net:      n,
		address:  Addr{Node: node, HostPort: net.JoinHostPort(ni.ip, strconv.Itoa(gossipPort))},
		ip:       net.ParseIP(ni.ip),
		packetCh: make(chan *memberlist.Packet),
		streamCh: make(chan net.Conn),
		stop:     make(chan struct{}),
		loopDone: make(chan struct{}),
		lastDue:  make(map[string]time.Time),
		wake:     make(chan struct{}, 1),
	}
	n.transports[node] = t
	n.endpoints[t.address.HostPort] = t
	n.wg.Add(1)
	go t.deliverPackets()
	return t, nil
}

// Addr returns the node's memberlist address, "127.77.x.y:7946", to Join.
func (t *Transport) Addr() Addr { return t.address }

// FinalAdvertiseAddr returns the node's fake IP and port; the arguments are
// ignored.
func (t *Transport) FinalAdvertiseAddr(string, int) (net.IP, int, error) {
	return slices.Clone(t.ip), gossipPort, nil
}

// WriteTo sends a packet to addr (see WriteToAddress).
func (t *Transport) WriteTo(b []byte, addr string) (time.Time, error) {
	return t.WriteToAddress(b, memberlist.Address{Addr: addr})
}

// WriteToAddress sends a packet to a.Addr; a.Name is ignored (addresses
// route). It never blocks. As with UDP, a packet that is lost (cut link,
// Drop, nobody at the address, receiver's queue full) is not an error; it
// is counted in LinkStats.PacketsDropped when the address is a node's.
func (t *Transport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	now := time.Now()
	if isDone(t.stop) {
		return now, fmt.Errorf("faultnet: write to %s: transport of %s is shut down", a.Addr, t.address.Node)
	}
	n := t.net
	n.mu.Lock()
	to, key, err := n.resolve(a.Addr)
	var dst *Transport
	var link *linkState
	if err == nil {
		link = n.link(t.address.Node, to)
		if d := n.transports[to]; d != nil && d.address.HostPort == key {
			dst = d
		}
	}
	n.mu.Unlock()
	switch {
	case link == nil:
		return now, nil // not a node's address: lost on the way
	case dst == nil || link.cut.Load() || link.lose():
		link.packetsDropped.Add(1)
		return now, nil
	}
	dst.enqueue(t.address, link, b, now)
	return now, nil
}

// PacketCh returns the channel of packets received by this node.
func (t *Transport) PacketCh() <-chan *memberlist.Packet { return t.packetCh }

// DialTimeout connects to addr (see DialAddressTimeout).
func (t *Transport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

// DialAddressTimeout connects to the Transport at a.Addr as Network.Dial
// does, within timeout (none if ≤ 0); a.Name is ignored.
func (t *Transport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	ctx := context.Background()
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	return t.net.dial(ctx, t.address.Node, a.Addr, t)
}

// StreamCh returns the channel of connections accepted by this node.
func (t *Transport) StreamCh() <-chan net.Conn { return t.streamCh }

// Shutdown stops the Transport: packets queued for it are dropped, its
// address is freed, and its connections are closed. It returns once its
// goroutine has stopped. A second call does nothing.
func (t *Transport) Shutdown() error {
	n := t.net
	n.mu.Lock()
	if t.dead {
		n.mu.Unlock()
		<-t.loopDone
		return nil
	}
	t.dead = true
	close(t.stop)
	if n.transports[t.address.Node] == t {
		delete(n.transports, t.address.Node)
	}
	if n.endpoints[t.address.HostPort] == t {
		delete(n.endpoints, t.address.HostPort)
	}
	var mine []*conn
	for p := range n.pairs {
		for _, c := range p.ends {
			if c.owner == t {
				mine = append(mine, c)
			}
		}
	}
	n.mu.Unlock()

	<-t.loopDone
	for _, c := range mine {
		c.Close()
	}
	return nil
}

func (t *Transport) addr() Addr        { return t.address }
func (t *Transport) owner() *Transport { return t }
func (t *Transport) shut()             { t.Shutdown() }

func (t *Transport) deliver(ctx context.Context, cancel <-chan struct{}, c *conn) error {
	select {
	case t.streamCh <- c:
		return nil
	case <-t.stop:
		return ErrRefused
	case <-ctx.Done():
		return ctx.Err()
	case <-cancel:
		return net.ErrClosed
	case <-t.net.done:
		return net.ErrClosed
	}
}

// enqueue queues a packet for delivery at now + the link's delay, never
// before an earlier packet from the same sender.
func (t *Transport) enqueue(from Addr, link *linkState, b []byte, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if isDone(t.stop) || len(t.queue) >= maxQueuedPackets {
		link.packetsDropped.Add(1)
		return
	}
	due := now.Add(link.delayed())
	if last := t.lastDue[from.Node]; due.Before(last) {
		due = last
	}
	t.lastDue[from.Node] = due
	t.seq++
	heap.Push(&t.queue, &packet{due: due, seq: t.seq, buf: append([]byte(nil), b...), from: from, link: link})
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// deliverPackets hands due packets to PacketCh, in order, until Shutdown or
// Network.Close.
func (t *Transport) deliverPackets() {
	defer t.net.wg.Done()
	defer close(t.loopDone)
	defer t.dropQueued()
	for {
		var next *packet
		wait := time.Duration(-1)
		t.mu.Lock()
		if len(t.queue) > 0 {
			if d := time.Until(t.queue[0].due); d > 0 {
				wait = d
			} else {
				next = heap.Pop(&t.queue).(*packet)
			}
		}
		t.mu.Unlock()

		if next != nil {
			if next.link.cut.Load() { // cut while in flight
				next.link.packetsDropped.Add(1)
				continue
			}
			// Counted first, so that whoever receives it sees it counted.
			next.link.packets.Add(1)
			select {
			case t.packetCh <- &memberlist.Packet{Buf: next.buf, From: next.from, Timestamp: time.Now()}:
				continue
			case <-t.stop:
			case <-t.net.done:
			}
			next.link.packets.Add(^uint64(0))
			next.link.packetsDropped.Add(1)
			return
		}

		var timer *time.Timer
		var fire <-chan time.Time
		if wait >= 0 {
			timer = time.NewTimer(wait)
			fire = timer.C
		}
		select {
		case <-t.wake:
		case <-fire:
		case <-t.stop:
		case <-t.net.done:
		}
		if timer != nil {
			timer.Stop()
		}
		if isDone(t.stop) || isDone(t.net.done) {
			return
		}
	}
}

func (t *Transport) dropQueued() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range t.queue {
		p.link.packetsDropped.Add(1)
	}
	t.queue = nil
}

// packet is a packet on its way.
type packet struct {
	due  time.Time
	seq  uint64
	buf  []byte
	from Addr
	link *linkState
}

// packetQueue is a min-heap of packets by (due, seq).
type packetQueue []*packet

func (q packetQueue) Len() int { return len(q) }
func (q packetQueue) Less(i, j int) bool {
	if !q[i].due.Equal(q[j].due) {
		return q[i].due.Before(q[j].due)
	}
	return q[i].seq < q[j].seq
}
func (q packetQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *packetQueue) Push(x any)   { *q = append(*q, x.(*packet)) }
func (q *packetQueue) Pop() any {
	old := *q
	p := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	return p
}
