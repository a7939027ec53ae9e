package faultnet

import (
	"context"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
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
