package faultnet

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// StreamBuffer is how many bytes one direction of a connection holds between
// its writer and its reader, whether they wait for a cut link to heal, for a
// delay, or for the reader. A writer blocks while the buffer is full, as a
// TCP writer does once the send and receive buffers fill.
const StreamBuffer = 256 << 10

// endpoint is where a dial can land: a listener or a Transport.
type endpoint interface {
	addr() Addr
	owner() *Transport // nil for a listener
	// deliver hands over the accepting end of a new connection, or fails.
	// It may block until ctx ends or cancel is closed.
	deliver(ctx context.Context, cancel <-chan struct{}, c *conn) error
	shut()
}

// Dial connects from node `from` to the listener or Transport at addr (see
// Listen and Transport for the address forms). It blocks while the link is
// cut in either direction, then for the sum of both directions' delays, and
// fails with ErrRefused (wrapped) when nothing listens at addr. ctx bounds the
// whole dial.
func (n *Network) Dial(ctx context.Context, from, addr string) (net.Conn, error) {
	return n.dial(ctx, from, addr, nil)
}

// Dialer returns Dial bound to node from, in the form that
// grpc.WithContextDialer takes:
//
//	grpc.NewClient("passthrough:///"+addr,
//		grpc.WithContextDialer(n.Dialer("node-2")),
//		grpc.WithTransportCredentials(insecure.NewCredentials()))
func (n *Network) Dialer(from string) func(ctx context.Context, addr string) (net.Conn, error) {
	return func(ctx context.Context, addr string) (net.Conn, error) {
		return n.Dial(ctx, from, addr)
	}
}

func (n *Network) dial(ctx context.Context, from, addr string, owner *Transport) (net.Conn, error) {
	var cancel <-chan struct{}
	if owner != nil {
		cancel = owner.stop
	}
	if err := checkNode(from); err != nil {
		return nil, err
	}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil, opError("dial", nil, nil, net.ErrClosed)
	}
	to, key, err := n.resolve(addr)
	if err == nil {
		_, err = n.node(from)
	}
	if err != nil {
		n.mu.Unlock()
		return nil, err
	}
	fwd, back := n.link(from, to), n.link(to, from)
	n.mu.Unlock()
	dst := Addr{Node: to, HostPort: key}

	// The handshake needs both directions: wait until both are up.
	for {
		if !fwd.cut.Load() && !back.cut.Load() {
			break
		}
		changed := n.changes()
		if !fwd.cut.Load() && !back.cut.Load() {
			break
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, opError("dial", nil, dst, ctx.Err())
		case <-cancel:
			return nil, opError("dial", nil, dst, net.ErrClosed)
		case <-n.done:
			return nil, opError("dial", nil, dst, net.ErrClosed)
		}
	}
	if rtt := fwd.delayed() + back.delayed(); rtt > 0 {
		t := time.NewTimer(rtt)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, opError("dial", nil, dst, ctx.Err())
		case <-cancel:
			t.Stop()
			return nil, opError("dial", nil, dst, net.ErrClosed)
		case <-n.done:
			t.Stop()
			return nil, opError("dial", nil, dst, net.ErrClosed)
		}
	}

	n.mu.Lock()
	if n.closed || (owner != nil && owner.dead) {
		n.mu.Unlock()
		return nil, opError("dial", nil, dst, net.ErrClosed)
	}
	ep := n.endpoints[key]
	if ep == nil || (ep.owner() != nil && ep.owner().dead) {
		n.mu.Unlock()
		return nil, opError("dial", nil, dst, ErrRefused)
	}
	ni, _ := n.node(from) // known: created above
	host := from
	if owner != nil {
		host = ni.ip
	}
	src := Addr{Node: from, HostPort: net.JoinHostPort(host, strconv.Itoa(ni.ephemeral))}
	if ni.ephemeral++; ni.ephemeral > 65535 {
		ni.ephemeral = firstEphemeralPort
	}
	p := newPair(n, src, ep.addr(), fwd, back, owner, ep.owner())
	n.pairs[p] = struct{}{}
	n.mu.Unlock()

	if err := ep.deliver(ctx, cancel, p.ends[1]); err != nil {
		p.ends[0].Close()
		p.ends[1].Close()
		return nil, opError("dial", src, dst, err)
	}
	return p.ends[0], nil
}

// Listen returns a stream listener on node, at a fresh address "node:port"
// (ports 1, 2, … per node, skipping those in use), of network "faultnet".
// Dial and Dialer reach it from any node. Closing the listener frees the
// address; connections already accepted stay open.
func (n *Network) Listen(node string) (net.Listener, error) {
	if err := checkNode(node); err != nil {
		return nil, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	ni, err := n.node(node)
	if err != nil {
		return nil, err
	}
	for range 65535 {
		port := ni.nextPort
		if ni.nextPort++; ni.nextPort > 65535 {
			ni.nextPort = 1
		}
		key := net.JoinHostPort(node, strconv.Itoa(port))
		if n.endpoints[key] == nil {
			return n.listenLocked(node, key)
		}
	}
	return nil, fmt.Errorf("faultnet: node %s has no free port", node)
}

// ListenAt returns a stream listener at addr, "node:port" with port in
// [1, 65535], for a node that restarts at the address it had (see Listen).
// It fails if the address is in use.
func (n *Network) ListenAt(addr string) (net.Listener, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	node, key, err := n.resolve(addr)
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(key, node+":") || key == node+":0" {
		return nil, fmt.Errorf("faultnet: listen at %q: want node:port with a port in [1, 65535]", addr)
	}
	if n.endpoints[key] != nil {
		return nil, fmt.Errorf("faultnet: listen at %s: address in use", addr)
	}
	return n.listenLocked(node, key)
}

func (n *Network) listenLocked(node, key string) (net.Listener, error) {
	if n.closed {
		return nil, opError("listen", nil, nil, net.ErrClosed)
	}
	l := &listener{net: n, address: Addr{Node: node, HostPort: key}}
	n.endpoints[key] = l
	return l, nil
}

// listener is a stream listener on one node.
//
// Concurrency: safe for concurrent use, as net.Listener requires.
type listener struct {
	net     *Network
	address Addr

	mu     sync.Mutex // guards the fields below
	queue  []*conn    // dialed, not yet accepted
	closed bool
	wake   signal
}

func (l *listener) Addr() net.Addr    { return l.address }
func (l *listener) addr() Addr        { return l.address }
func (l *listener) owner() *Transport { return nil }
func (l *listener) shut()             { l.Close() }
func (l *listener) Accept() (net.Conn, error) {
	for {
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			return nil, opError("accept", nil, l.address, net.ErrClosed)
		}
		if len(l.queue) > 0 {
			c := l.queue[0]
			l.queue[0] = nil
			l.queue = l.queue[1:]
			l.mu.Unlock()
			return c, nil
		}
		wake := l.wake.wait()
		l.mu.Unlock()
		select {
		case <-wake:
		case <-l.net.done:
			return nil, opError("accept", nil, l.address, net.ErrClosed)
		}
	}
}

// Close stops accepting and frees the address; connections dialed but not
// yet accepted are reset. A second Close does nothing.
func (l *listener) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	pending := l.queue
	l.queue = nil
	l.wake.notify()
	l.mu.Unlock()

	l.net.mu.Lock()
	if l.net.endpoints[l.address.HostPort] == l {
		delete(l.net.endpoints, l.address.HostPort)
	}
	l.net.mu.Unlock()
	for _, c := range pending {
		c.pair.reset()
		c.Close()
	}
	return nil
}

func (l *listener) deliver(_ context.Context, _ <-chan struct{}, c *conn) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrRefused
	}
	l.queue = append(l.queue, c)
	l.wake.notify()
	return nil
}

// pair is one connection: two ends and two pipes.
type pair struct {
	ends   [2]*conn     // [0] dialed, [1] accepted
	closed atomic.Int32 // ends closed
}

func newPair(n *Network, src, dst Addr, fwd, back *linkState, srcOwner, dstOwner *Transport) *pair {
	there := &pipe{net: n, link: fwd}
	here := &pipe{net: n, link: back}
	p := &pair{}
	p.ends[0] = &conn{net: n, pair: p, local: src, remote: dst, in: here, out: there, owner: srcOwner}
	p.ends[1] = &conn{net: n, pair: p, local: dst, remote: src, in: there, out: here, owner: dstOwner}
	return p
}

// reset breaks both directions (see Network.Reset).
func (p *pair) reset() {
	p.ends[0].out.reset()
	p.ends[1].out.reset()
}

// conn is one end of a connection.
//
// Concurrency: safe for concurrent use, as net.Conn requires: reads and
// writes may block at the same time, and Close, Reset and Network.Close wake
// them.
type conn struct {
	net           *Network
	pair          *pair
	local, remote Addr
	in, out       *pipe
	owner         *Transport // the Transport whose Shutdown closes this end, or nil
	rdl, wdl      deadline

	closeOnce sync.Once
}

func (c *conn) Read(b []byte) (int, error) {
	n, err := c.in.read(b, &c.rdl)
	if err != nil && err != io.EOF {
		err = opError("read", c.local, c.remote, err)
	}
	return n, err
}

func (c *conn) Write(b []byte) (int, error) {
	n, err := c.out.write(b, &c.wdl)
	if err != nil {
		err = opError("write", c.local, c.remote, err)
	}
	return n, err
}

// Close sends EOF to the other end (after the bytes written before it, and
// subject to the same faults), discards what this end has not read, and
// makes the other end's writes fail. A second Close returns an error.
func (c *conn) Close() error {
	first := false
	c.closeOnce.Do(func() {
		first = true
		c.out.closeWrite()
		c.in.closeRead()
		c.rdl.set(time.Time{})
		c.wdl.set(time.Time{})
		if c.pair.closed.Add(1) == 2 {
			c.net.mu.Lock()
			delete(c.net.pairs, c.pair)
			c.net.mu.Unlock()
		}
	})
	if !first {
		return opError("close", c.local, c.remote, net.ErrClosed)
	}
	return nil
}

func (c *conn) LocalAddr() net.Addr  { return c.local }
func (c *conn) RemoteAddr() net.Addr { return c.remote }

func (c *conn) SetDeadline(t time.Time) error {
	c.rdl.set(t)
	c.wdl.set(t)
	return nil
}

func (c *conn) SetReadDeadline(t time.Time) error  { c.rdl.set(t); return nil }
func (c *conn) SetWriteDeadline(t time.Time) error { c.wdl.set(t); return nil }

// chunk is bytes written at once, readable from at (zero: at once).
type chunk struct {
	b  []byte
	at time.Time
}

// pipe is one direction of a connection: written at one end, read at the
// other, across one directed link.
type pipe struct {
	net  *Network
	link *linkState

	mu      sync.Mutex // guards the fields below
	chunks  []chunk    // in order
	size    int        // bytes in chunks, ≤ StreamBuffer
	wake    signal     // notified on any change below
	wclosed bool       // the writing end closed: EOF after the chunks, from finAt
	finAt   time.Time
	rclosed bool // the reading end closed
	broken  bool // Reset
}

func (p *pipe) read(b []byte, dl *deadline) (int, error) {
	for {
		expired := dl.wait()
		var changed <-chan struct{}
		if p.link.cut.Load() {
			changed = p.net.changes() // taken before the check below, so no heal is missed
		}
		p.mu.Lock()
		switch {
		case p.broken:
			p.mu.Unlock()
			return 0, ErrReset
		case p.rclosed || isDone(p.net.done):
			p.mu.Unlock()
			return 0, net.ErrClosed
		case isDone(expired):
			p.mu.Unlock()
			return 0, os.ErrDeadlineExceeded
		case len(b) == 0:
			p.mu.Unlock()
			return 0, nil
		}
		var due time.Duration // > 0: the head becomes readable then
		if !p.link.cut.Load() {
			now := time.Now()
			n := 0
			for n < len(b) && len(p.chunks) > 0 {
				c := &p.chunks[0]
				if c.at.After(now) {
					due = c.at.Sub(now)
					break
				}
				k := copy(b[n:], c.b)
				n += k
				if c.b = c.b[k:]; len(c.b) == 0 {
					p.chunks[0] = chunk{}
					p.chunks = p.chunks[1:]
				}
			}
			if n > 0 {
				p.size -= n
				p.link.bytes.Add(uint64(n))
				p.wake.notify()
				p.mu.Unlock()
				return n, nil
			}
			if len(p.chunks) == 0 && p.wclosed {
				if !p.finAt.After(now) {
					p.mu.Unlock()
					return 0, io.EOF
				}
				due = p.finAt.Sub(now)
			}
		} else if changed == nil {
			// Cut between the two loads above: go round to take changes().
			p.mu.Unlock()
			continue
		}
		wake := p.wake.wait()
		p.mu.Unlock()

		var timer *time.Timer
		var fire <-chan time.Time
		if due > 0 {
			timer = time.NewTimer(due)
			fire = timer.C
		}
		select {
		case <-wake:
		case <-changed:
		case <-fire:
		case <-expired:
		case <-p.net.done:
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

func (p *pipe) write(b []byte, dl *deadline) (int, error) {
	written := 0
	for {
		expired := dl.wait()
		p.mu.Lock()
		switch {
		case p.broken:
			p.mu.Unlock()
			return written, ErrReset
		case p.wclosed || isDone(p.net.done):
			p.mu.Unlock()
			return written, net.ErrClosed
		case p.rclosed:
			p.mu.Unlock()
			return written, syscall.EPIPE
		case isDone(expired):
			p.mu.Unlock()
			return written, os.ErrDeadlineExceeded
		case len(b) == 0:
			p.mu.Unlock()
			return written, nil
		}
		if space := StreamBuffer - p.size; space > 0 {
			k := min(space, len(b))
			var at time.Time
			if d := p.link.delayed(); d > 0 {
				at = time.Now().Add(d)
			}
			if last := len(p.chunks) - 1; last >= 0 && !at.After(p.chunks[last].at) {
				// Readable no sooner than the chunk before it anyway.
				p.chunks[last].b = append(p.chunks[last].b, b[:k]...)
			} else {
				p.chunks = append(p.chunks, chunk{b: append([]byte(nil), b[:k]...), at: at})
			}
			p.size += k
			written += k
			b = b[k:]
			p.wake.notify()
			p.mu.Unlock()
			if len(b) == 0 {
				return written, nil // all queued: what the peer does next is not this write's business
			}
			continue
		}
		wake := p.wake.wait()
		p.mu.Unlock()
		select {
		case <-wake:
		case <-expired:
		case <-p.net.done:
		}
	}
}

// closeWrite is the writer's FIN: EOF once the chunks are read.
func (p *pipe) closeWrite() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.wclosed {
		p.wclosed = true
		if d := p.link.delayed(); d > 0 {
			p.finAt = time.Now().Add(d)
		}
		p.wake.notify()
	}
}

// closeRead is the reader's close: unread bytes are discarded.
func (p *pipe) closeRead() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rclosed = true
	p.discard()
}

func (p *pipe) reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.broken = true
	p.discard()
}

// discard drops the unread bytes. Callers hold p.mu.
func (p *pipe) discard() {
	p.link.bytesDropped.Add(uint64(p.size))
	p.chunks, p.size = nil, 0
	p.wake.notify()
}

// deadline is a read or write deadline: a channel closed when it passes.
//
// Concurrency: safe for concurrent use.
type deadline struct {
	mu    sync.Mutex // guards the fields below
	ch    chan struct{}
	timer *time.Timer
	gen   uint64 // bumped by set, so that a stale timer closes nothing
}

// wait returns a channel that is closed once the deadline has passed.
func (d *deadline) wait() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ch == nil {
		d.ch = make(chan struct{})
	}
	return d.ch
}

// set moves the deadline to t; the zero t means none.
func (d *deadline) set(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.gen++
	if d.timer != nil {
		d.timer.Stop()
		d.timer = nil
	}
	if d.ch == nil || isDone(d.ch) {
		d.ch = make(chan struct{})
	}
	if t.IsZero() {
		return
	}
	wait := time.Until(t)
	if wait <= 0 {
		close(d.ch)
		return
	}
	gen, ch := d.gen, d.ch
	d.timer = time.AfterFunc(wait, func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.gen == gen {
			close(ch)
		}
	})
}

func isDone(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
