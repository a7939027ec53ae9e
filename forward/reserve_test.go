package forward

import (
	"context"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
)

// TestReservationsFull: an owner that holds MaxReservations records
// answers the next reserve as a new key with no room: in the check's
// failure mode, with no reservation and nothing spent; once a record
// expires there is room again.
func TestReservationsFull(t *testing.T) {
	clk := testkit.NewClock(0)
	a := startNode(t, "A", clk, func(c *nodeConfig) { c.MaxReservations = 2 })
	setMembers(membersOf(a), a)
	lim := hourly(100)
	reserve := func(key string, mode bucket.FailureMode, ttl time.Duration) Result {
		t.Helper()
		out := make([]Result, 1)
		if err := a.r.Check(context.Background(), []Check{{Key: key, Limit: lim, Cost: 10, Mode: mode, Reserve: ttl}}, out); err != nil {
			t.Fatal(err)
		}
		return out[0]
	}
	for i, k := range []string{"a", "b"} {
		if r := reserve(k, bucket.FailClosed, time.Duration(i+1)*time.Second); r.Reservation == "" || r.Degraded {
			t.Fatalf("reserve %s: %+v", k, r)
		}
	}
	if r := reserve("c", bucket.FailOpen, time.Minute); !r.Allowed || !r.Degraded || r.Reservation != "" {
		t.Fatalf("reserve into a full table (fail_open): %+v", r)
	}
	if r := reserve("c", bucket.FailClosed, time.Minute); r.Allowed || !r.Degraded {
		t.Fatalf("reserve into a full table (fail_closed): %+v", r)
	}
	if a.store.Has("c") {
		t.Fatal("a reserve the table had no room for spent on the store")
	}
	clk.Advance(time.Second) // a's record expires
	if r := reserve("c", bucket.FailClosed, time.Minute); r.Reservation == "" || r.Remaining != 90 {
		t.Fatalf("reserve after an expiry: %+v", r)
	}
}
