package faultnet_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/ringlimit/ringlimit/internal/testonly/faultnet"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
)

func newTransport(t *testing.T, n *faultnet.Network, node string) *faultnet.Transport {
	t.Helper()
	tr, err := n.Transport(node)
	if err != nil {
		t.Fatalf("Transport(%s): %v", node, err)
	}
	t.Cleanup(func() { tr.Shutdown() })
	return tr
}

func send(t *testing.T, from, to *faultnet.Transport, payload string) {
	t.Helper()
	if _, err := from.WriteTo([]byte(payload), to.Addr().String()); err != nil {
		t.Fatalf("WriteTo(%s): %v", to.Addr(), err)
	}
}

// receive returns the next packet at tr, or fails after within.
func receive(t *testing.T, tr *faultnet.Transport, within time.Duration) *memberlist.Packet {
	t.Helper()
	select {
	case p := <-tr.PacketCh():
		return p
	case <-time.After(within):
		t.Fatalf("no packet at %s within %v", tr.Addr().Node, within)
		return nil
	}
}

func receiveNothing(t *testing.T, tr *faultnet.Transport, d time.Duration) {
	t.Helper()
	select {
	case p := <-tr.PacketCh():
		t.Fatalf("packet %q from %v at %s, want none", p.Buf, p.From, tr.Addr().Node)
	case <-time.After(d):
	}
}

func TestTransportAddress(t *testing.T) {
	n := newNet(t)
	t1 := newTransport(t, n, "node-1")
	t2 := newTransport(t, n, "node-2")
	ip, port, err := t1.FinalAdvertiseAddr("0.0.0.0", 1234)
	if err != nil || ip.String() != "127.77.0.1" || port != 7946 {
		t.Fatalf("FinalAdvertiseAddr = %v, %d, %v; want 127.77.0.1, 7946", ip, port, err)
	}
	if got := t2.Addr(); got.Node != "node-2" || got.String() != "127.77.0.2:7946" {
		t.Fatalf("Addr() = %#v", got)
	}
	if _, err := n.Transport("node-1"); err == nil {
		t.Fatal("a second live Transport for node-1 was created")
	}
	// A restarted node gets the same address back.
	t1.Shutdown()
	again := newTransport(t, n, "node-1")
	if again.Addr() != t1.Addr() {
		t.Fatalf("restarted node-1 at %v, was at %v", again.Addr(), t1.Addr())
	}
	send(t, t2, again, "after restart")
	if p := receive(t, again, patience); string(p.Buf) != "after restart" || p.From.String() != t2.Addr().String() {
		t.Fatalf("got %q from %v", p.Buf, p.From)
	}
}

func TestPacketsCutAndOneWay(t *testing.T) {
	n := newNet(t)
	t1 := newTransport(t, n, "node-1")
	t2 := newTransport(t, n, "node-2")
	send(t, t1, t2, "one")
	if p := receive(t, t2, patience); string(p.Buf) != "one" {
		t.Fatalf("got %q", p.Buf)
	}
	n.CutOneWay("node-1", "node-2")
	send(t, t1, t2, "lost")
	send(t, t2, t1, "through")
	if p := receive(t, t1, patience); string(p.Buf) != "through" {
		t.Fatalf("got %q", p.Buf)
	}
	receiveNothing(t, t2, hold)
	n.Heal("node-1", "node-2")
	receiveNothing(t, t2, 20*time.Millisecond) // dropped, not held
	send(t, t1, t2, "two")
	if p := receive(t, t2, patience); string(p.Buf) != "two" {
		t.Fatalf("got %q", p.Buf)
	}
	if got, want := n.Stats("node-1", "node-2"), (faultnet.LinkStats{Packets: 2, PacketsDropped: 1}); got != want {
		t.Errorf("Stats(node-1, node-2) = %+v, want %+v", got, want)
	}
}

func TestPacketsCutInFlightAreDropped(t *testing.T) {
	n := newNet(t)
	t1 := newTransport(t, n, "node-1")
	t2 := newTransport(t, n, "node-2")
	n.Delay("node-1", "node-2", hold)
	send(t, t1, t2, "in flight")
	n.Isolate("node-2")
	receiveNothing(t, t2, 2*hold)
	testkit.Eventually(t, patience, "the packet in flight is dropped", func() bool {
		return n.Stats("node-1", "node-2").PacketsDropped == 1
	})
	n.Restore("node-2")
	receiveNothing(t, t2, 20*time.Millisecond)
	if got, want := n.Stats("node-1", "node-2"), (faultnet.LinkStats{PacketsDropped: 1}); got != want {
		t.Fatalf("Stats = %+v, want %+v", got, want)
	}
}

func TestPacketDrop(t *testing.T) {
	const count = 1000
	n := newNet(t)
	t1 := newTransport(t, n, "node-1")
	t2 := newTransport(t, n, "node-2")

	n.Drop("node-1", "node-2", 1)
	for i := range count {
		send(t, t1, t2, fmt.Sprint(i))
	}
	receiveNothing(t, t2, 20*time.Millisecond)

	n.Drop("node-1", "node-2", 0.5)
	for i := range count {
		send(t, t1, t2, fmt.Sprint(i))
	}
	// Count what arrives until the counters add up (a packet is counted
	// as delivered just after PacketCh hands it over).
	got := 0
	deadline := time.After(patience)
	for i := 0; ; i++ {
		st := n.Stats("node-1", "node-2")
		if st.Packets+st.PacketsDropped == 2*count && st.Packets == uint64(got) {
			break
		}
		if i > count+int(patience/pollEvery) {
			t.Fatalf("%d packets received, stats %+v", got, st)
		}
		select {
		case <-t2.PacketCh():
			got++
		case <-time.After(pollEvery):
		case <-deadline:
			t.Fatalf("after %v: %d packets received, stats %+v", patience, got, st)
		}
	}
	// P(outside [350, 650] | p = 0.5, 1000 draws) < 1e-20.
	if got < 350 || got > 650 {
		t.Fatalf("%d of %d packets arrived at drop probability 0.5", got, count)
	}
	if st := n.Stats("node-1", "node-2"); st.Packets != uint64(got) || st.PacketsDropped != 2*count-uint64(got) {
		t.Fatalf("Stats = %+v after %d received", st, got)
	}

	// Streams are not affected by Drop.
	c, s := connect(t, n, "node-1", "node-2")
	n.Drop("node-1", "node-2", 1)
	write(t, c, "reliable")
	readExactly(t, s, "reliable")

	for _, p := range []float64{-0.1, 1.1} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Drop(%v) did not panic", p)
				}
			}()
			n.Drop("node-1", "node-2", p)
		}()
	}
}

func TestPacketDelayKeepsOrder(t *testing.T) {
	const d = 80 * time.Millisecond
	n := newNet(t)
	t1 := newTransport(t, n, "node-1")
	t2 := newTransport(t, n, "node-2")
	n.Delay("node-1", "node-2", d)
	start := time.Now()
	send(t, t1, t2, "first")
	n.Delay("node-1", "node-2", 0)
	send(t, t1, t2, "second")
	p := receive(t, t2, patience)
	if took := time.Since(start); string(p.Buf) != "first" || took < d {
		t.Fatalf("got %q after %v, want %q after at least %v", p.Buf, took, "first", d)
	}
	if p := receive(t, t2, patience); string(p.Buf) != "second" {
		t.Fatalf("got %q, want %q", p.Buf, "second")
	}
}

func TestPacketToNobody(t *testing.T) {
	n := newNet(t)
	t1 := newTransport(t, n, "node-1")
	if _, err := t1.WriteTo([]byte("x"), "127.77.0.9:7946"); err != nil {
		t.Errorf("WriteTo an unused address: %v, want a silent loss", err)
	}
	t2 := newTransport(t, n, "node-2")
	t2.Shutdown()
	send(t, t1, t2, "after shutdown")
	if got := n.Stats("node-1", "node-2").PacketsDropped; got != 1 {
		t.Errorf("PacketsDropped = %d, want 1", got)
	}
	if _, err := t2.WriteTo([]byte("x"), t1.Addr().String()); err == nil {
		t.Error("WriteTo from a shut-down Transport succeeded")
	}
}

func TestTransportStreams(t *testing.T) {
	n := newNet(t)
	t1 := newTransport(t, n, "node-1")
	t2 := newTransport(t, n, "node-2")

	n.Cut("node-1", "node-2")
	if _, err := t1.DialTimeout(t2.Addr().String(), hold); err == nil {
		t.Fatal("DialTimeout across a cut succeeded")
	}
	n.HealAll()

	type result struct {
		c   net.Conn
		err error
	}
	dialed := make(chan result, 1)
	go func() {
		c, err := t1.DialAddressTimeout(memberlist.Address{Addr: t2.Addr().String(), Name: "node-2"}, patience)
		dialed <- result{c, err}
	}()
	var s net.Conn
	select {
	case s = <-t2.StreamCh():
	case <-time.After(patience):
		t.Fatal("no stream at node-2")
	}
	r := <-dialed
	if r.err != nil {
		t.Fatal(r.err)
	}
	if got := s.RemoteAddr().(faultnet.Addr); got.Node != "node-1" {
		t.Fatalf("stream from %#v, want node-1", got)
	}
	write(t, r.c, "push")
	readExactly(t, s, "push")

	// Shutdown closes the node's connections: the peer reads EOF.
	t2.Shutdown()
	r.c.SetReadDeadline(time.Now().Add(patience))
	if _, err := r.c.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("Read after the peer's Transport shut down: %v, want EOF", err)
	}
	r.c.Close()
	if _, err := t1.DialTimeout(t2.Addr().String(), patience); !errors.Is(err, faultnet.ErrRefused) {
		t.Fatalf("dial to a shut-down Transport: %v, want ErrRefused", err)
	}
}
