package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/client"
	"github.com/ringlimit/ringlimit/clock"
	pb "github.com/ringlimit/ringlimit/proto/ringlimitv1"
)

// TestCalendarMonthAcrossNodes: 10,000 a month in Berlin. One second
// before December begins there (2023-11-30T23:00:00Z), 10,000 spends
// through the three nodes (a third each, 100 a call) are all admitted and
// the 10,001st is refused through every node, with retry_after 1s; at
// the boundary a spend is admitted with 9,999 left and reset_after the
// whole of December, 744 h.
func TestCalendarMonthAcrossNodes(t *testing.T) {
	boundary := clock.Instant(time.Date(2023, 11, 30, 23, 0, 0, 0, time.UTC).UnixNano())
	// A minute before the boundary: the clock fires every ticker on its way.
	c, err := startClusterAt(3, defaultPolicy, boundary-clock.Instant(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	if now := c.clock.Now(); now >= boundary-clock.Instant(time.Second) {
		t.Fatalf("the cluster's clock is at %v, past the test's instant", now)
	}
	c.clock.Advance(time.Duration(boundary - clock.Instant(time.Second) - c.clock.Now()))
	limit := client.LimitProto(client.PerCalendar(10_000, bucket.Month, "Europe/Berlin"))
	check := func() *pb.Check { return &pb.Check{Key: "acme", Limit: limit} }
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var clients []*client.Client
	for _, n := range c.nodes {
		// Each client stays on its node (no ring): the spends go through
		// every node, forwarded to the owner by the two that are not.
		clients = append(clients, newClient(t, client.Config{Targets: []string{n.addr}, Timeout: 10 * time.Second, RingRefresh: -1}))
	}
	admitted := 0
	for call := 0; admitted < 10_000; call++ {
		batch := make([]*pb.Check, 100)
		for i := range batch {
			batch[i] = check()
		}
		ds, err := clients[call%3].Check(ctx, batch...)
		if err != nil {
			t.Fatal(err)
		}
		for i, d := range ds {
			if !d.GetAllowed() || d.GetDegraded() {
				t.Fatalf("spend %d: %v", admitted+i+1, d)
			}
		}
		admitted += len(ds)
	}
	for i, cl := range clients {
		ds, err := cl.Check(ctx, check())
		if d := ds[0]; err != nil || d.GetAllowed() || d.GetRemaining() != 0 || d.GetRetryAfterMs() != 1000 || d.GetResetAfterMs() != 1000 {
			t.Fatalf("spend 10,001 through %s: %v, %v; want refused, retry and reset after 1s", c.nodes[i].name, d, err)
		}
	}
	c.clock.Advance(time.Second)
	ds, err := clients[1].Check(ctx, check())
	if d := ds[0]; err != nil || !d.GetAllowed() || d.GetRemaining() != 9_999 || d.GetResetAfterMs() != (744*time.Hour).Milliseconds() {
		t.Fatalf("spend at December's first instant: %v, %v; want admitted, 9999 left, reset after 744h", d, err)
	}
}
