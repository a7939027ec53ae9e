package faultnet_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ringlimit/ringlimit/internal/testonly/faultnet"
)

// hold is how long a test watches a cut link deliver nothing.
const hold = 150 * time.Millisecond

func TestAddresses(t *testing.T) {
	n := newNet(t)
	c, s := connect(t, n, "node-2", "node-1")
	for _, tc := range []struct {
		name string
		got  net.Addr
		node string
		addr string
	}{
		{"client local", c.LocalAddr(), "node-2", "node-2:49152"},
		{"client remote", c.RemoteAddr(), "node-1", "node-1:1"},
		{"server local", s.LocalAddr(), "node-1", "node-1:1"},
		{"server remote", s.RemoteAddr(), "node-2", "node-2:49152"},
	} {
		a, ok := tc.got.(faultnet.Addr)
		if !ok || a.Node != tc.node || a.String() != tc.addr || a.Network() != "faultnet" {
			t.Errorf("%s = %#v, want node %s at %s on faultnet", tc.name, tc.got, tc.node, tc.addr)
		}
	}
	lis, err := n.Listen("node-1")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	if got := lis.Addr().String(); got != "node-1:2" {
		t.Errorf("second listener on node-1 at %s, want node-1:2", got)
	}
	for _, bad := range []string{"", "a b", "node:1", "10.0.0.1", "ünï"} {
		if _, err := n.Listen(bad); err == nil {
			t.Errorf("Listen(%q) succeeded, want an invalid name error", bad)
		}
	}
}

func TestListenAt(t *testing.T) {
	n := newNet(t)
	lis, err := n.ListenAt("node-1:9091")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.ListenAt("node-1:9091"); err == nil {
		t.Fatal("second ListenAt on the same address succeeded")
	}
	lis.Close()
	lis, err = n.ListenAt("node-1:9091") // a restart at the same address
	if err != nil {
		t.Fatalf("ListenAt after Close: %v", err)
	}
	defer lis.Close()
	for _, bad := range []string{"node-1", "node-1:0", "node-1:x", "node-1:70000", "127.77.0.1:5", "a b:1"} {
		if _, err := n.ListenAt(bad); err == nil {
			t.Errorf("ListenAt(%q) succeeded, want an error", bad)
		}
	}
}

func TestCutHoldsBytesUntilHeal(t *testing.T) {
	n := newNet(t)
	c, s := connect(t, n, "node-1", "node-2")
	write(t, c, "hi")
	readExactly(t, s, "hi")

	n.Cut("node-1", "node-2")
	write(t, c, "from node-1") // held: no error
	write(t, s, "from node-2")
	readNothing(t, s, hold)
	readNothing(t, c, hold)
	if got := n.Stats("node-1", "node-2").Bytes; got != 2 {
		t.Fatalf("node-1 → node-2 delivered %d bytes while cut, want the 2 from before", got)
	}

	n.Heal("node-1", "node-2")
	readExactly(t, s, "from node-1")
	readExactly(t, c, "from node-2")
	readNothing(t, s, 20*time.Millisecond) // exactly once
	if got, want := n.Stats("node-1", "node-2"), (faultnet.LinkStats{Bytes: 13}); got != want {
		t.Errorf("Stats(node-1, node-2) = %+v, want %+v", got, want)
	}
	if got, want := n.Stats("node-2", "node-1"), (faultnet.LinkStats{Bytes: 11}); got != want {
		t.Errorf("Stats(node-2, node-1) = %+v, want %+v", got, want)
	}
}

func TestCloseIsHeldAcrossCut(t *testing.T) {
	n := newNet(t)
	c, s := connect(t, n, "node-1", "node-2")
	n.Cut("node-2", "node-1")
	write(t, c, "last words")
	c.Close()
	readNothing(t, s, hold)
	n.Heal("node-1", "node-2")
	readExactly(t, s, "last words")
	s.SetReadDeadline(time.Now().Add(patience))
	if k, err := s.Read(make([]byte, 1)); k != 0 || err != io.EOF {
		t.Fatalf("Read after the peer's close = %d, %v; want 0, EOF", k, err)
	}
	if _, err := s.Write([]byte("x")); !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("Write to a closed peer: %v, want EPIPE", err)
	}
	if err := c.Close(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("second Close: %v, want net.ErrClosed", err)
	}
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Read after Close: %v, want net.ErrClosed", err)
	}
}

func TestCutOneWay(t *testing.T) {
	n := newNet(t)
	c, s := connect(t, n, "node-1", "node-2")
	n.CutOneWay("node-1", "node-2")
	write(t, c, "ping")
	write(t, s, "pong")
	readExactly(t, c, "pong") // node-2 → node-1 still works
	readNothing(t, s, hold)
	n.Heal("node-2", "node-1") // Heal works whichever way round
	readExactly(t, s, "ping")
}

func TestIsolateAndRestore(t *testing.T) {
	n := newNet(t)
	c, s := connect(t, n, "node-1", "node-2")
	c3, s3 := connect(t, n, "node-1", "node-3")
	lis, err := n.Listen("node-2")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()

	n.Isolate("node-2")
	write(t, c, "a")
	write(t, c3, "b")
	readExactly(t, s3, "b") // node-1 ↔ node-3 unaffected
	readNothing(t, s, hold)
	// A node named only now cannot reach the isolated node either.
	ctx, cancel := context.WithTimeout(context.Background(), hold)
	defer cancel()
	if _, err := n.Dial(ctx, "node-9", lis.Addr().String()); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("dial from a new node to an isolated one: %v, want a deadline error", err)
	}
	n.Heal("node-1", "node-2") // does not undo Isolate
	readNothing(t, s, hold)

	n.Restore("node-2")
	readExactly(t, s, "a")
	write(t, s3, "c")
	readExactly(t, c3, "c")
}

func TestHealAll(t *testing.T) {
	n := newNet(t)
	c, s := connect(t, n, "node-1", "node-2")
	n.Cut("node-1", "node-2")
	n.Isolate("node-1")
	n.CutOneWay("node-1", "node-3")
	write(t, c, "x")
	readNothing(t, s, hold)
	n.HealAll()
	readExactly(t, s, "x")
}

func TestDelay(t *testing.T) {
	const d = 80 * time.Millisecond
	n := newNet(t)
	c, s := connect(t, n, "node-1", "node-2")

	n.Delay("node-1", "node-2", d)
	start := time.Now()
	write(t, c, "slow")
	readExactly(t, s, "slow")
	if took := time.Since(start); took < d {
		t.Fatalf("delayed bytes arrived after %v, want at least %v", took, d)
	}

	// Order is kept when the delay shrinks: "late" waits for "early".
	start = time.Now()
	write(t, c, "early,")
	n.Delay("node-1", "node-2", 0)
	write(t, c, "late")
	readExactly(t, s, "early,late")
	if took := time.Since(start); took < d {
		t.Fatalf("bytes written after the delay was removed overtook earlier ones: %v < %v", took, d)
	}

	// A dial waits the round trip.
	n.Delay("node-2", "node-1", d)
	lis, err := n.Listen("node-2")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	start = time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	c2, err := n.Dial(ctx, "node-1", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if took := time.Since(start); took < d {
		t.Fatalf("dial over a %v one-way delay took %v", d, took)
	}
}

func TestWriterBlocksWhenBufferFull(t *testing.T) {
	n := newNet(t)
	c, s := connect(t, n, "node-1", "node-2")
	n.Cut("node-1", "node-2")
	data := bytes.Repeat([]byte("0123456789abcdef"), faultnet.StreamBuffer/16+100)
	c.SetWriteDeadline(time.Now().Add(hold))
	k, err := c.Write(data)
	if k != faultnet.StreamBuffer || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Write of %d bytes into a cut link = %d, %v; want %d and a deadline error", len(data), k, err, faultnet.StreamBuffer)
	}
	n.Heal("node-1", "node-2")
	readExactly(t, s, string(data[:k]))
	readNothing(t, s, 20*time.Millisecond)
}

func TestReset(t *testing.T) {
	n := newNet(t)
	c, s := connect(t, n, "node-1", "node-2")
	c3, s3 := connect(t, n, "node-1", "node-3")
	n.Cut("node-1", "node-2") // Reset works across a cut
	write(t, c, "lost")

	readErr := make(chan error, 1)
	go func() {
		s.SetReadDeadline(time.Now().Add(patience))
		_, err := s.Read(make([]byte, 8))
		readErr <- err
	}()
	n.Reset("node-2", "node-1")
	select {
	case err := <-readErr:
		if !errors.Is(err, faultnet.ErrReset) {
			t.Fatalf("blocked Read after Reset: %v, want ErrReset", err)
		}
	case <-time.After(patience):
		t.Fatal("Reset did not wake a blocked Read")
	}
	if _, err := c.Write([]byte("x")); !errors.Is(err, faultnet.ErrReset) {
		t.Fatalf("Write after Reset: %v, want ErrReset", err)
	}
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, faultnet.ErrReset) {
		t.Fatalf("Read after Reset: %v, want ErrReset", err)
	}
	if got := n.Stats("node-1", "node-2").BytesDropped; got != 4 {
		t.Errorf("BytesDropped = %d, want the 4 held bytes", got)
	}
	// Other links, and new connections, are not affected.
	write(t, c3, "ok")
	readExactly(t, s3, "ok")
	n.Heal("node-1", "node-2")
	c2, s2 := connect(t, n, "node-1", "node-2")
	write(t, c2, "new")
	readExactly(t, s2, "new")
}

func TestDialAcrossCutBlocksUntilHeal(t *testing.T) {
	n := newNet(t)
	lis, err := n.Listen("node-2")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	n.CutOneWay("node-2", "node-1") // the handshake needs both directions

	ctx, cancel := context.WithTimeout(context.Background(), hold)
	_, err = n.Dial(ctx, "node-1", lis.Addr().String())
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("dial across a cut: %v, want a deadline error", err)
	}

	type result struct {
		c   net.Conn
		err error
	}
	dialed := make(chan result, 1)
	ctx, cancel = context.WithTimeout(context.Background(), patience)
	defer cancel()
	go func() {
		c, err := n.Dial(ctx, "node-1", lis.Addr().String())
		dialed <- result{c, err}
	}()
	select {
	case r := <-dialed:
		t.Fatalf("dial across a cut returned %v, %v before the heal", r.c, r.err)
	case <-time.After(hold):
	}
	n.HealAll()
	var r result
	select {
	case r = <-dialed:
	case <-time.After(patience):
		t.Fatal("dial still blocked after the heal")
	}
	if r.err != nil {
		t.Fatalf("dial after heal: %v", r.err)
	}
	defer r.c.Close()
	s, err := lis.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	write(t, r.c, "hello")
	readExactly(t, s, "hello")
}

func TestDialErrors(t *testing.T) {
	n := newNet(t)
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	if _, err := n.Dial(ctx, "node-1", "node-2:1"); !errors.Is(err, faultnet.ErrRefused) {
		t.Errorf("dial with no listener: %v, want ErrRefused", err)
	}
	for _, addr := range []string{"127.0.0.1:80", "10.0.0.1:7946", "node-2", "node-2:x", "bad host:1"} {
		if _, err := n.Dial(ctx, "node-1", addr); err == nil || errors.Is(err, faultnet.ErrRefused) {
			t.Errorf("Dial(%q) = %v, want an address error", addr, err)
		}
	}
	if _, err := n.Dial(ctx, "bad name", "node-2:1"); err == nil {
		t.Error("dial from an invalid node name succeeded")
	}
}

func TestCloseStopsEverything(t *testing.T) {
	defer goleak.VerifyNone(t)
	n := faultnet.New()
	lis, err := n.Listen("node-1")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	c, err := n.Dial(ctx, "node-2", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	tr, err := n.Transport("node-1")
	if err != nil {
		t.Fatal(err)
	}
	s, err := lis.Accept()
	if err != nil {
		t.Fatal(err)
	}
	n.Cut("node-1", "node-3")

	errs := make(chan error, 3)
	go func() { _, err := c.Read(make([]byte, 1)); errs <- err }()
	go func() { _, err := lis.Accept(); errs <- err }()
	go func() { _, err := n.Dial(ctx, "node-3", lis.Addr().String()); errs <- err }()
	n.Close() // whether the calls above block before or after it, they must return
	if _, err := s.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Write after Close: %v, want net.ErrClosed", err)
	}
	n.Close() // idempotent
	for i := range 3 {
		select {
		case <-errs:
		case <-time.After(patience):
			t.Fatalf("%d of 3 blocked calls did not return after Close", i)
		}
	}
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Read after Close: %v, want net.ErrClosed", err)
	}
	if _, err := n.Listen("node-1"); err == nil {
		t.Error("Listen after Close succeeded")
	}
	if _, err := n.Transport("node-2"); err == nil {
		t.Error("Transport after Close succeeded")
	}
	if err := tr.Shutdown(); err != nil {
		t.Errorf("Shutdown after Close: %v", err)
	}
}

// A Write whose bytes were all taken succeeds, even when the peer reads them
// and closes before Write returns (a regression: that used to be EPIPE).
func TestWriteSucceedsWhenPeerReadsAndCloses(t *testing.T) {
	const rounds = 300
	n := newNet(t)
	msg := []byte("request")
	for i := range rounds {
		c, s := connect(t, n, "node-1", "node-2")
		done := make(chan error, 1)
		go func() {
			_, err := io.ReadFull(s, make([]byte, len(msg)))
			s.Close()
			done <- err
		}()
		if _, err := c.Write(msg); err != nil {
			t.Fatalf("round %d: Write: %v", i, err)
		}
		if err := <-done; err != nil {
			t.Fatalf("round %d: ReadFull: %v", i, err)
		}
		c.Close()
	}
}
