package client_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/client"
	pb "github.com/ringlimit/ringlimit/proto/ringlimitv1"
)

// testAdminToken is the admin token of every test cluster, named "ops".
const testAdminToken = "client-test-admin-token"

// Peek through the Limiter and through Client.Check answers what AllowN
// would and spends nothing; Reset puts the key back to full with the
// client's admin token, and is refused without it.
func TestLimiterPeekAndReset(t *testing.T) {
	c := newCluster(t, 3, "")
	cl := newClient(t, client.Config{Targets: c.addrs(), AdminToken: testAdminToken})
	lim := newLimiter(t, cl, client.PerMinute(5))
	ctx := context.Background()
	key := lkey("peek:1", bucket.TokenBucket, 5, time.Minute, 0)
	for i := range 3 {
		if !lim.Allow(ctx, "peek:1") {
			t.Fatalf("Allow %d refused", i)
		}
	}
	for range 10 {
		d, err := lim.PeekN(ctx, "peek:1", 2)
		if err != nil || !d.Allowed || d.Remaining != 0 {
			t.Fatalf("PeekN(2): %+v, %v; want allowed, remaining 0", d, err)
		}
		if d, err := lim.PeekN(ctx, "peek:1", 3); err != nil || d.Allowed || d.RetryAfter != 12*time.Second {
			t.Fatalf("PeekN(3): %+v, %v; want refused, retry 12s", d, err)
		}
	}
	cost := int64(1)
	ds, err := cl.Check(ctx, &pb.Check{Key: "peek:1", Cost: &cost, Limit: &pb.Limit{Limit: 5, PerMs: 60_000}, Peek: true})
	if err != nil || !ds[0].GetAllowed() || ds[0].GetRemaining() != 1 {
		t.Fatalf("Client.Check with Peek: %v, %v; want allowed, remaining 1", ds, err)
	}
	if got := c.used(t, key); got != 3 {
		t.Fatalf("used %d after the peeks, want 3", got)
	}
	if got := c.used(t, lkey("never", bucket.TokenBucket, 5, time.Minute, 0)); got != 0 {
		t.Fatal("a key never checked has state")
	}
	noToken := newClient(t, client.Config{Targets: c.addrs()})
	if _, err := newLimiter(t, noToken, client.PerMinute(5)).Reset(ctx, "peek:1"); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("Reset without a token: %v, want Unauthenticated", err)
	}
	res, err := lim.Reset(ctx, "peek:1")
	if err != nil || res.Previous != 2 || res.Owner != c.owner(key) || len(res.Unconfirmed) != 0 {
		t.Fatalf("Reset: %+v, %v; want previous 2, owner %s", res, err, c.owner(key))
	}
	if d, err := lim.AllowN(ctx, "peek:1", 1); err != nil || d.Remaining != 4 {
		t.Fatalf("after the reset: %+v, %v; want remaining 4", d, err)
	}
}
