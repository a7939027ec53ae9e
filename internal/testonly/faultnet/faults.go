package faultnet

import (
	"fmt"
	"math"
	"time"
)

// Cut cuts the link between a and b in both directions (see the package
// documentation for what happens to streams, dials and packets).
func (n *Network) Cut(a, b string) {
	n.setCuts(true, linkKey{a, b}, linkKey{b, a})
}

// CutOneWay cuts the link from → to only: from's bytes and packets do not
// reach to, while to's still reach from. Dials need both directions.
func (n *Network) CutOneWay(from, to string) {
	n.setCuts(true, linkKey{from, to})
}

// Heal undoes Cut and CutOneWay between a and b, in both directions. It does
// not undo Isolate: use Restore.
func (n *Network) Heal(a, b string) {
	n.setCuts(false, linkKey{a, b}, linkKey{b, a})
}

func (n *Network) setCuts(cut bool, keys ...linkKey) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, k := range keys {
		if k.from == k.to {
			continue
		}
		if cut {
			n.cuts[k] = true
		} else {
			delete(n.cuts, k)
		}
	}
	n.faultsChanged()
}

// Isolate cuts node from every other node, those that exist now and those
// named later, in both directions, until Restore(node) or HealAll.
func (n *Network) Isolate(node string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.isolated[node] = true
	n.faultsChanged()
}

// Restore reconnects node: it undoes Isolate(node) and every Cut and
// CutOneWay that involves node.
func (n *Network) Restore(node string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.isolated, node)
	for k := range n.cuts {
		if k.from == node || k.to == node {
			delete(n.cuts, k)
		}
	}
	n.faultsChanged()
}

// HealAll undoes every Cut, CutOneWay and Isolate. Delays and drop rates
// stay as they are (set them to zero to remove them).
func (n *Network) HealAll() {
	n.mu.Lock()
	defer n.mu.Unlock()
	clear(n.cuts)
	clear(n.isolated)
	n.faultsChanged()
}

// Delay makes the link from → to deliver every byte and packet written from
// now on d after it was written (d = 0 removes the delay). Order is kept
// within a connection and within the packets from one node to another: a
// smaller delay never lets later data overtake earlier data. Dials wait the
// sum of both directions' delays. Delay panics if d is negative.
func (n *Network) Delay(from, to string, d time.Duration) {
	if d < 0 {
		panic(fmt.Sprintf("faultnet: negative delay %v", d))
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.link(from, to).delay.Store(int64(d))
	n.faultsChanged()
}

// Drop makes the link from → to lose each packet with probability p, drawn
// independently per packet (p = 0 removes the loss). Streams are not
// affected. Drop panics if p is not in [0, 1].
func (n *Network) Drop(from, to string, p float64) {
	if !(p >= 0 && p <= 1) {
		panic(fmt.Sprintf("faultnet: drop probability must be in [0, 1], got %v", p))
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.link(from, to).drop.Store(math.Float64bits(p))
}

// Reset breaks every connection established between a and b, in whichever
// direction it was dialed, whatever the state of the link: unread bytes are
// discarded, and every read and write at either end, blocked or later,
// returns ErrReset (wrapped in a *net.OpError). Each end must still be
// closed by its owner. Connections made afterwards are not affected.
func (n *Network) Reset(a, b string) {
	n.mu.Lock()
	var pairs []*pair
	for p := range n.pairs {
		x, y := p.ends[0].local.Node, p.ends[1].local.Node
		if (x == a && y == b) || (x == b && y == a) {
			pairs = append(pairs, p)
		}
	}
	n.mu.Unlock()
	for _, p := range pairs {
		p.reset()
	}
}

// Stats returns the counters of the link from → to.
func (n *Network) Stats(from, to string) LinkStats {
	n.mu.Lock()
	l := n.link(from, to)
	n.mu.Unlock()
	return LinkStats{
		Bytes:          l.bytes.Load(),
		BytesDropped:   l.bytesDropped.Load(),
		Packets:        l.packets.Load(),
		PacketsDropped: l.packetsDropped.Load(),
	}
}

// link returns the state of the link from → to, creating it if needed.
// Callers hold n.mu.
func (n *Network) link(from, to string) *linkState {
	k := linkKey{from, to}
	l := n.links[k]
	if l == nil {
		l = new(linkState)
		l.cut.Store(n.isCut(k))
		n.links[k] = l
	}
	return l
}

// isCut reports whether the link k is cut, explicitly or by isolation.
// Callers hold n.mu.
func (n *Network) isCut(k linkKey) bool {
	return k.from != k.to && (n.cuts[k] || n.isolated[k.from] || n.isolated[k.to])
}

// faultsChanged recomputes every link's effective cut and wakes whoever
// waits for a fault change. Callers hold n.mu.
func (n *Network) faultsChanged() {
	for k, l := range n.links {
		l.cut.Store(n.isCut(k))
	}
	n.changed.notify()
}

// changes returns a channel that is closed at the next fault change.
func (n *Network) changes() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.changed.wait()
}
