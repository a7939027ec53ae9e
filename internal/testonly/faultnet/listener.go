package faultnet

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
)

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
