package faultnet_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/ringlimit/ringlimit/internal/testonly/faultnet"
)

// Inside a synctest bubble the Network runs on the bubble's fake clock, so a
// delay can be asserted exactly.
func TestDelayIsExactUnderSynctest(t *testing.T) {
	defer goleak.VerifyNone(t)
	const d = 3 * time.Second
	synctest.Test(t, func(t *testing.T) {
		n := faultnet.New()
		defer n.Close()

		lis, err := n.Listen("node-1")
		if err != nil {
			t.Fatal(err)
		}
		defer lis.Close()
		n.Delay("node-2", "node-1", d)
		start := time.Now()
		c, err := n.Dial(context.Background(), "node-2", lis.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if got := time.Since(start); got != d {
			t.Errorf("dial took %v, want the round trip %v", got, d)
		}
		s, err := lis.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()

		start = time.Now()
		if _, err := c.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Read(make([]byte, 1)); err != nil {
			t.Fatal(err)
		}
		if got := time.Since(start); got != d {
			t.Errorf("byte delivered after %v, want %v", got, d)
		}

		t1, err := n.Transport("node-2")
		if err != nil {
			t.Fatal(err)
		}
		defer t1.Shutdown()
		t2, err := n.Transport("node-1")
		if err != nil {
			t.Fatal(err)
		}
		defer t2.Shutdown()
		start = time.Now()
		if _, err := t1.WriteTo([]byte("p"), t2.Addr().String()); err != nil {
			t.Fatal(err)
		}
		p := <-t2.PacketCh()
		if got := time.Since(start); got != d || string(p.Buf) != "p" {
			t.Errorf("packet %q delivered after %v, want %q after %v", p.Buf, got, "p", d)
		}
	})
}
