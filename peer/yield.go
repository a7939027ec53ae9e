package peer

import (
	"context"
	"net"
	"sync/atomic"
)

// Nodes that share a CPU (several on one machine, or CPU quotas smaller
// than a core) answer each other sooner when the writer of a batch lets its
// reader run. A forwarded check waits on its owner's turn on the CPU; a
// sender that keeps the CPU for the rest of its time slice after sending a
// batch makes that wait a whole slice longer. So every write on a
// connection a Pool dialed (batches of checks, replication's copies,
// fetches, handoffs) is followed by a yield of the writing thread
// (sched_yield(2) on Linux): on a CPU no other thread wants, it returns at
// once. The side that answers does not yield. Three nodes on one core
// under the Envoy RLS load, one binary either way: yielding on the dialing
// side only made 1.059×, 1.14× and 1.231× the calls/s of yielding on both
// sides, at 0.968×, 0.912× and 0.805× their p99, in three runs; yielding on
// both sides had cut the p99 to 0.886×, 0.835× and 0.811× of no yield
// (docs/benchmarks.md, "Peer writes yield the CPU").

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

// yieldingConn is a dialed connection whose writes give up the CPU after
// them.
type yieldingConn struct{ net.Conn }

func (c yieldingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	yieldCPU()
	return n, err
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
