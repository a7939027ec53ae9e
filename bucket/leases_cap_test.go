package bucket

import (
	"errors"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/clock"
)

// TestLeasesRenewCapped: a lease acquired with a cap of 1 min is renewed
// for at most 1 min whatever a renew asks (30 min → expires 1 min after
// the renew), and for less when asked less; a lease acquired with no cap
// renews up to MaxLeaseTTL. An acquire asking more than its cap gets the
// cap; a cap out of range is refused. The cap travels with the lease
// through Held and Replace.
func TestLeasesRenewCapped(t *testing.T) {
	tb := NewLeases(0)
	l := MustLimit(Concurrency, 3, 0, 0)
	const k = "c|k"
	g, err := tb.AcquireCapped(k, l, 30*time.Second, time.Minute, "", 0)
	if err != nil || !g.Granted || g.Lease.MaxTTL != time.Minute || g.Lease.Expires != 30*sec {
		t.Fatalf("capped acquire: %+v, %v", g, err)
	}
	type step struct {
		at, ask, want time.Duration // want: the expiry after the renew, from 0
	}
	for i, st := range []step{
		{10 * time.Second, 30 * time.Minute, 70 * time.Second},
		{20 * time.Second, 10 * time.Second, 30 * time.Second},
		{25 * time.Second, time.Hour, 85 * time.Second},
	} {
		_, cur, err := tb.Renew(g.Lease.ID, st.ask, clock.Instant(st.at))
		if err != nil || cur.Expires != clock.Instant(st.want) {
			t.Fatalf("step %d: Renew(%v at %v) = expires %v, %v; want %v", i, st.ask, st.at, time.Duration(cur.Expires), err, st.want)
		}
	}
	free, err := tb.Acquire(k, l, 30*time.Second, "", 0)
	if err != nil || free.Lease.MaxTTL != 0 {
		t.Fatalf("uncapped acquire: %+v, %v", free, err)
	}
	if _, cur, err := tb.Renew(free.Lease.ID, time.Hour, clock.Instant(10*time.Second)); err != nil || cur.Expires != clock.Instant(time.Hour+10*time.Second) {
		t.Fatalf("uncapped renew: expires %v, %v; want 1h10s", time.Duration(cur.Expires), err)
	}
	over, err := tb.AcquireCapped(k, l, 5*time.Minute, time.Minute, "", 0)
	if err != nil || over.Lease.Expires != clock.Instant(time.Minute) {
		t.Fatalf("acquire of 5m capped at 1m: %+v, %v; want expiry at 1m", over, err)
	}
	for _, bad := range []time.Duration{-time.Second, time.Millisecond, 2 * time.Hour} {
		if _, err := tb.AcquireCapped(k, l, 30*time.Second, bad, "", 0); !errors.Is(err, ErrLimit) {
			t.Fatalf("acquire with cap %v: %v, want ErrLimit", bad, err)
		}
	}

	// A replica keeps the cap.
	other := NewLeases(0)
	other.Replace(k, tb.Held(k, clock.Instant(30*time.Second)), clock.Instant(30*time.Second))
	if _, cur, err := other.Renew(g.Lease.ID, 30*time.Minute, clock.Instant(40*time.Second)); err != nil || cur.Expires != clock.Instant(100*time.Second) {
		t.Fatalf("replica's renew: expires %v, %v; want 1m40s", time.Duration(cur.Expires), err)
	}
}
