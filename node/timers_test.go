package node

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/health"

	"github.com/ringlimit/ringlimit/forward"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
	"github.com/ringlimit/ringlimit/peer"
)

// waitTimer waits until a timer has been added to clk since added was
// taken (clk.TimerAdded()).
func waitTimer(t *testing.T, added <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-added:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no timer started on the node's clock", what)
	}
}

// ended reports whether done is closed, waiting up to wait for it.
func ended(done <-chan struct{}, wait time.Duration) bool {
	if wait == 0 {
		select {
		case <-done:
			return true
		default:
			return false
		}
	}
	select {
	case <-done:
		return true
	case <-time.After(wait):
		return false
	}
}

// TestDrainOnTheNodeClock: the drain delay is measured on the node's
// clock: the drain lasts until the clock has moved the whole delay, however
// long that takes in wall time.
func TestDrainOnTheNodeClock(t *testing.T) {
	const delay = time.Hour
	clk := testkit.NewClock(0)
	n := &Node{log: slog.New(slog.DiscardHandler), clock: clk, drainFor: delay, health: health.NewServer()}
	n.readiness.clock = clk
	added := clk.TimerAdded()
	done := make(chan struct{})
	go func() {
		defer close(done)
		n.drain(context.Background())
	}()
	waitTimer(t, added, "drain")
	if err := n.ready(); err == nil {
		t.Fatal("ready while draining")
	}
	clk.Advance(delay - time.Nanosecond)
	if ended(done, 0) {
		t.Fatalf("drain ended %v before its delay on the clock", time.Nanosecond)
	}
	clk.Advance(time.Nanosecond)
	if !ended(done, 10*time.Second) {
		t.Fatalf("drain still running once the clock moved its delay (%v)", delay)
	}
}

// TestPeerRecheckOnTheNodeClock: after a change of the peer certificates,
// the connections served are verified again peerRecheckDelay later on the
// node's clock, not on the runtime's.
func TestPeerRecheckOnTheNodeClock(t *testing.T) {
	clk := testkit.NewClock(0)
	log := slog.New(slog.DiscardHandler)
	pool, err := peer.NewPool(peer.Config{Self: "a", Clock: clk, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	// No call reaches the server: it needs a Handler, not a working one.
	srv, err := peer.NewServer(peer.ServerConfig{Self: "a", Handler: (*forward.Router)(nil), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close(context.Background()) })
	// The pool's first Renew starts its sweep of retired connections on
	// the clock; later ones move it. Only the recheck's timer is new.
	pool.Renew()
	base := clk.Timers()
	n := &Node{clock: clk, peers: pool, peerServer: srv}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var bg sync.WaitGroup
	n.peerCertsChanged(ctx, log, &bg)()
	testkit.WaitFor(t, 10*time.Second, "the recheck's timer on the node's clock", func() error {
		if got := clk.Timers(); got != base+1 {
			return fmt.Errorf("%d timers, want %d", got, base+1)
		}
		return nil
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		bg.Wait()
	}()
	clk.Advance(peerRecheckDelay - time.Nanosecond)
	if ended(done, 0) {
		t.Fatalf("peer connections rechecked before %v on the clock", peerRecheckDelay)
	}
	clk.Advance(time.Nanosecond)
	if !ended(done, 10*time.Second) {
		t.Fatalf("peer connections not rechecked once the clock moved %v", peerRecheckDelay)
	}
}
