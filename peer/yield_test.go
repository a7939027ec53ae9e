package peer

import (
	"context"
	"io"
	"net"
	"sync/atomic"
	"testing"
)

// countYields makes yields count instead, until the test ends.
func countYields(t *testing.T) *atomic.Int64 {
	var n atomic.Int64
	f := func() { n.Add(1) }
	yieldHook.Store(&f)
	t.Cleanup(func() { yieldHook.Store(nil) })
	return &n
}

// Each write on a peer connection, the dialed side's or the accepted
// side's, is followed by one yield of the CPU; reads yield nothing.
func TestPeerConnectionsYieldAfterWrites(t *testing.T) {
	yields := countYields(t)
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := YieldingListener(raw)
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			t.Error(err)
		}
		accepted <- c
	}()
	client, err := dialYielding(context.Background(), raw.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server := <-accepted
	if server == nil {
		t.FailNow()
	}
	defer server.Close()
	exchange := func(from, to net.Conn, msg string) {
		if _, err := from.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(to, got); err != nil || string(got) != msg {
			t.Fatalf("read %q, %v; want %q", got, err, msg)
		}
	}
	for _, msg := range []string{"batch-1", "batch-2", "batch-3"} {
		exchange(client, server, msg)
	}
	if n := yields.Load(); n != 3 {
		t.Fatalf("after 3 writes of the dialed side: %d yields, want 3", n)
	}
	exchange(server, client, "answer-1")
	exchange(server, client, "answer-2")
	if n := yields.Load(); n != 5 {
		t.Fatalf("after 2 writes of the accepted side: %d yields in all, want 5", n)
	}
	// A write that fails (here, on a connection already closed) yields
	// nothing.
	client.Close()
	if _, err := client.Write([]byte("late")); err == nil {
		t.Fatal("a write on a closed connection succeeded")
	}
	if n := yields.Load(); n != 5 {
		t.Fatalf("after a failed write: %d yields in all, want 5", n)
	}
}
