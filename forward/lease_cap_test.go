package forward

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/internal/peermsg"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
)

// TestRenewCappedByMaxTTL: a lease acquired with MaxTTL 1m renews for at
// most 1m (asking 30m answers ExpiresIn 1m, asking 10s answers 10s); one
// acquired with none renews for up to bucket.MaxLeaseTTL; a MaxTTL out of
// range is ErrInvalid. Its lease set's state carries the cap, and a
// replica imported from it caps a renew too.
func TestRenewCappedByMaxTTL(t *testing.T) {
	clk := testkit.NewClock(0)
	a := startNode(t, "A", clk, nil)
	setMembers(membersOf(a), a)
	ctx := context.Background()
	acq := Acquire{Key: "c|k", Limit: concurrency(3), Mode: bucket.FailClosed, TTL: 30 * time.Second, MaxTTL: time.Minute}
	one, err := a.r.Acquire(ctx, acq)
	if err != nil || !one.Allowed || one.ExpiresIn != 30*time.Second {
		t.Fatalf("acquire: %+v %v", one, err)
	}
	for i, st := range []struct{ ask, want time.Duration }{{30 * time.Minute, time.Minute}, {10 * time.Second, 10 * time.Second}} {
		if ren, err := a.r.Renew(ctx, one.Lease, st.ask); err != nil || ren.ExpiresIn != st.want {
			t.Fatalf("step %d: renew asking %v: %+v %v, want ExpiresIn %v", i, st.ask, ren, err, st.want)
		}
	}
	acq.MaxTTL = 0
	free, err := a.r.Acquire(ctx, acq)
	if err != nil || !free.Allowed {
		t.Fatalf("acquire with no cap: %+v %v", free, err)
	}
	if ren, err := a.r.Renew(ctx, free.Lease, 30*time.Minute); err != nil || ren.ExpiresIn != 30*time.Minute {
		t.Fatalf("renew with no cap: %+v %v, want ExpiresIn 30m", ren, err)
	}
	for _, bad := range []time.Duration{-time.Second, time.Millisecond, 2 * time.Hour} {
		acq.MaxTTL = bad
		if _, err := a.r.Acquire(ctx, acq); !errors.Is(err, ErrInvalid) {
			t.Fatalf("acquire with MaxTTL %v: %v, want ErrInvalid", bad, err)
		}
	}

	st := leaseState(a.r.slots, "c|k", concurrency(3), clk.Now())
	if len(st.Leases) != 2 || st.Leases[0].MaxTTL != time.Minute || st.Leases[1].MaxTTL != 0 {
		t.Fatalf("lease state %+v, want caps 1m and none", st.Leases)
	}
	b := startNode(t, "B", clk, nil)
	setMembers(membersOf(b), b)
	st.Leases[1].MaxTTL = 3 * time.Hour // out of range from a peer: no cap of its own
	b.r.importLeases("A", []peermsg.State{st}, clk.Now(), true)
	if ren, err := b.r.Renew(ctx, one.Lease, 30*time.Minute); err != nil || ren.ExpiresIn != time.Minute {
		t.Fatalf("replica's renew: %+v %v, want ExpiresIn 1m", ren, err)
	}
	if ren, err := b.r.Renew(ctx, free.Lease, 50*time.Minute); err != nil || ren.ExpiresIn != 50*time.Minute {
		t.Fatalf("replica's renew with no cap: %+v %v, want ExpiresIn 50m", ren, err)
	}
}

// TestLookupPolicyLeases: a key with no concurrency namespace (a policy
// layer's), owned by A in the ring {A, B} and by C in {A, B, C}, fetched
// by C under a concurrency limit. While A's ring still gives A the key,
// A answers no lease set (it may still grant, so it gives nothing away);
// once A's ring holds C, A answers the key's live leases, and an empty
// set once they expired. Naming no limit, it is not found.
//
// C stops once the key is chosen: Lookup is called on A directly, and a
// live C would take A's handoff of the lease set and replicate it back to
// A as its successor, with the lease's remaining TTL read before the clock
// jumps 2s and counted from after it (on a busy machine, A answered the
// lease with 1.07s left after it should have expired).
func TestLookupPolicyLeases(t *testing.T) {
	clk := testkit.NewClock(0)
	a, b, c := startNode(t, "A", clk, nil), startNode(t, "B", clk, nil), startNode(t, "C", clk, nil)
	setMembers(membersOf(a, b, c), c)
	formCluster(clk, a, b)
	key := ""
	for i := 0; key == ""; i++ {
		k := fmt.Sprintf("p|api|route:/export|user:u%d|/export", i)
		if o, _ := a.r.Owner(k); o == "A" && ownerIn(c.r.view.Load().ring, "C", k) == "C" {
			key = k
		}
	}
	c.stop()
	res, err := a.r.Acquire(context.Background(), Acquire{Key: key, Limit: concurrency(2), Mode: bucket.FailClosed, TTL: 2 * time.Second})
	if err != nil || !res.Allowed {
		t.Fatalf("acquire: %+v %v", res, err)
	}
	named := concurrency(1) // a fetch names a concurrency limit
	if st, ok := a.r.Lookup("C", key, &named); !ok || st.LeaseSet || len(st.Leases) != 0 {
		t.Fatalf("lookup while A still owns the key: %+v %v, want no lease set", st, ok)
	}
	setMembers(membersOf(a, b, c), a)
	st, ok := a.r.Lookup("C", key, &named)
	if !ok || !st.LeaseSet || len(st.Leases) != 1 || st.Leases[0].ID != res.Lease || st.Limit != concurrency(2) {
		t.Fatalf("lookup with a lease held: %+v %v", st, ok)
	}
	clk.Advance(2 * time.Second)
	if st, ok := a.r.Lookup("C", key, &named); !ok || !st.LeaseSet || len(st.Leases) != 0 {
		t.Fatalf("lookup once the lease expired: %+v %v, want an empty lease set", st, ok)
	}
	if st, ok := a.r.Lookup("C", key, nil); ok {
		t.Fatalf("lookup naming no limit: %+v, want not found (no bucket of the key)", st)
	}
}

// TestLeaseMaxTTLFromPeer: a renewal cap a peer sent is kept when
// CheckLeaseTTL takes it, and is bucket.MaxLeaseTTL's (0) otherwise.
func TestLeaseMaxTTLFromPeer(t *testing.T) {
	for _, c := range []struct{ in, want time.Duration }{
		{0, 0}, {-time.Second, 0}, {bucket.MinLeaseTTL - 1, 0}, {bucket.MinLeaseTTL, bucket.MinLeaseTTL},
		{time.Minute, time.Minute}, {bucket.MaxLeaseTTL, bucket.MaxLeaseTTL}, {bucket.MaxLeaseTTL + 1, 0},
	} {
		if got := leaseMaxTTL(c.in); got != c.want {
			t.Errorf("leaseMaxTTL(%v) = %v, want %v", c.in, got, c.want)
		}
		if ok := bucket.CheckLeaseTTL("max_ttl", c.in) == nil; ok != (c.want != 0) {
			t.Errorf("CheckLeaseTTL(%v) ok %v, leaseMaxTTL kept %v", c.in, ok, c.want)
		}
	}
}
