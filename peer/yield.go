package peer

import (
	"context"
	"net"
	"sync/atomic"
)

// Nodes that share a CPU (several on one machine, or CPU quotas smaller
// than a core) answer each other sooner when the writer of a message lets
// its reader run. A forwarded check waits on its owner's turn on the CPU,
// then on its entry node's again; a writer that keeps the CPU for the rest
// of its time slice after sending a batch, or an answer, makes that wait a
// whole slice longer. So every write on a peer connection, both ways, is
// followed by a yield of the writing thread (sched_yield(2) on Linux): on a
// CPU no other thread wants, it returns at once. Three nodes on one core
// under the Envoy RLS load, one binary with and without the yield: p99
// 0.886×, 0.835× and 0.811× in three runs (docs/benchmarks.md, "Peer writes
// yield the CPU").

// yieldHook, when set, is called instead of a yield (for the tests).
var yieldHook atomic.Pointer[func()]

// yieldCPU gives the calling thread's CPU to another runnable thread, if
// there is one (schedYield), or calls the tests' hook instead.
func yieldCPU() {
	if f := yieldHook.Load(); f != nil {
		(*f)()
		return
	}
	schedYield()
}

// yieldingConn is a connection whose writes give up the CPU after them.
type yieldingConn struct{ net.Conn }

// Write yields only after a write that succeeded: a failed one woke no
// reader, and the writer is about to tear the connection down.
func (c yieldingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if err == nil {
		yieldCPU()
	}
	return n, err
}

// YieldingListener wraps the listener a peer server serves on so that its
// connections yield the CPU after each write, as a Pool's do. A node serves
// its peer service on one.
func YieldingListener(l net.Listener) net.Listener { return yieldingListener{l} }

type yieldingListener struct{ net.Listener }

func (l yieldingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return yieldingConn{c}, nil
}

// dialYielding is a Pool's dialer: TCP, as gRPC's own, with connections
// that yield the CPU after each write. Config.DialOptions may replace it.
func dialYielding(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return yieldingConn{c}, nil
}
