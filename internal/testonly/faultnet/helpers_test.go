package faultnet_test

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ringlimit/ringlimit/internal/testonly/faultnet"
)

// patience bounds every wait that should succeed; it is long so that a slow
// machine under -race does not fail, and a passing test never waits for it.
const patience = 10 * time.Second

// pollEvery is the polling step of the transport's drain loop.
const pollEvery = 10 * time.Millisecond

// newNet returns a Network that is closed, and checked for leaked
// goroutines, when the test ends.
func newNet(t *testing.T) *faultnet.Network {
	t.Helper()
	t.Cleanup(func() { goleak.VerifyNone(t) }) // registered first: runs last
	n := faultnet.New()
	t.Cleanup(n.Close)
	return n
}

// connect dials from node `from` to a fresh listener on node `to` and
// returns both ends: the dialer's and the acceptor's.
func connect(t *testing.T, n *faultnet.Network, from, to string) (client, server net.Conn) {
	t.Helper()
	lis, err := n.Listen(to)
	if err != nil {
		t.Fatalf("Listen(%s): %v", to, err)
	}
	t.Cleanup(func() { lis.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	client, err = n.Dial(ctx, from, lis.Addr().String())
	if err != nil {
		t.Fatalf("Dial(%s → %s): %v", from, lis.Addr(), err)
	}
	t.Cleanup(func() { client.Close() })
	server, err = lis.Accept() // the dial queued it: no wait
	if err != nil {
		t.Fatalf("Accept: %v", err)
	}
	t.Cleanup(func() { server.Close() })
	return client, server
}

func write(t *testing.T, c net.Conn, s string) {
	t.Helper()
	if err := c.SetWriteDeadline(time.Now().Add(patience)); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Write([]byte(s)); err != nil || n != len(s) {
		t.Fatalf("Write(%q) on %v = %d, %v; want %d, nil", s, c.LocalAddr(), n, err, len(s))
	}
}

// readExactly reads exactly len(want) bytes within patience and compares
// them with want.
func readExactly(t *testing.T, c net.Conn, want string) {
	t.Helper()
	if err := c.SetReadDeadline(time.Now().Add(patience)); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(want))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("ReadFull on %v: %v (got %q so far)", c.LocalAddr(), err, got)
	}
	if string(got) != want {
		t.Fatalf("read %q on %v, want %q", got, c.LocalAddr(), want)
	}
}

// readNothing checks that nothing can be read from c for d.
func readNothing(t *testing.T, c net.Conn, d time.Duration) {
	t.Helper()
	if err := c.SetReadDeadline(time.Now().Add(d)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read on %v = %d (%q), %v; want 0 and a deadline error", c.LocalAddr(), n, buf[:n], err)
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("Read error %v is not a net.Error with Timeout()", err)
	}
}
