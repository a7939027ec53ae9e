package peer_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"

	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
	"github.com/ringlimit/ringlimit/peer"
)

// The wait for gossip to tell of a caller runs on the server's clock
// (ServerConfig.Clock): a call from a certificate holder no one knows is
// held until that clock has passed AuthWait, however long the real wait,
// and refused then.
func TestTLSAuthWaitOnServerClock(t *testing.T) {
	p := testkit.NewPKI(t, "", "cluster CA")
	set := certs(t, p, "B")
	srvClock := testkit.NewClock(0)
	b, lis := newNode(t, "B", testkit.NewClock(0), func(c *peer.Config) { c.TLS = set },
		grpc.Creds(credentials.NewTLS(set.ServerConfig(true))))
	b.scfg.Known, b.scfg.Clock = newMembers("B").known, srvClock
	b.serve(t, lis)
	mallory := tlsPool(t, "mallory", certs(t, p, "mallory"), map[string]string{"B": b.addr})
	l := hourlyLimit(5)
	done := make(chan error, 1)
	go func() {
		done <- mallory.Handoff(context.Background(), "B", []peer.State{{Key: "fresh", Limit: l, Used: 1}})
	}()
	testkit.WaitFor(t, 5*time.Second, "the server waiting on its clock", func() error {
		if srvClock.Timers() == 0 {
			return errors.New("no timer on the server's clock")
		}
		return nil
	})
	select {
	case err := <-done:
		t.Fatalf("Handoff answered before the server's clock moved: %v", err)
	default:
	}
	srvClock.Advance(peer.AuthWait + 20*time.Millisecond)
	select {
	case err := <-done:
		wantCode(t, "Handoff", err, codes.PermissionDenied, `peer: "mallory" is not a member of this cluster`)
	case <-time.After(5 * time.Second):
		t.Fatal("Handoff not answered 5s after the server's clock passed AuthWait")
	}
	if _, used, _ := b.store.Used("fresh", b.h.clk.Now()); used != 0 {
		t.Errorf("the refused handoff reached the store: fresh has used %d", used)
	}
}
