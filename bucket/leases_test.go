package bucket

import (
	"errors"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/ringlimit/ringlimit/clock"
)

// TestLeasesSteps: a limit of 2 with 10 s leases. Two grants fill it; the
// third waits for the earliest expiry; a request id repeats its lease; a
// release frees exactly one slot, a second release nothing; a renew moves
// the expiry; expiry frees what was not released.
func TestLeasesSteps(t *testing.T) {
	tb := NewLeases(0)
	l := MustLimit(Concurrency, 2, 0, 0)
	const k = "c|k"
	ids := map[string]string{} // step name → lease id
	type step struct {
		name     string
		do       string // acquire, release, renew
		arg      string // request id, or the name of the step whose lease
		at       clock.Instant
		granted  bool
		inFlight int64
		retry    time.Duration
	}
	for i, st := range []step{
		{"a", "acquire", "", 0, true, 1, 0},
		{"b", "acquire", "req-b", 2 * sec, true, 2, 0},
		{"c", "acquire", "", 3 * sec, false, 2, 7 * time.Second},
		{"b2", "acquire", "req-b", 3 * sec, true, 2, 0},
		{"r1", "release", "a", 4 * sec, true, 1, 0},
		{"r2", "release", "a", 4 * sec, false, 1, 0},
		{"d", "acquire", "", 5 * sec, true, 2, 0},
		{"n", "renew", "b", 6 * sec, true, 2, 0},
		{"e", "acquire", "", 12 * sec, false, 2, 3 * time.Second},
		{"f", "acquire", "", 15 * sec, true, 2, 0},
		{"n2", "renew", "d", 15 * sec, false, 2, 0},
		{"g", "acquire", "", 16*sec + 1, true, 2, 0},
	} {
		var granted bool
		switch st.do {
		case "acquire":
			g, err := tb.Acquire(k, l, 10*time.Second, st.arg, st.at)
			if err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
			granted = g.Granted
			ids[st.name] = g.Lease.ID
			if g.RetryAfter != st.retry {
				t.Errorf("step %d: retry %v want %v", i, g.RetryAfter, st.retry)
			}
			if st.name == "b2" && (g.Lease.ID != ids["b"] || !g.Repeated) {
				t.Errorf("step %d: request id gave %q, want %q", i, g.Lease.ID, ids["b"])
			}
		case "release":
			_, granted = tb.Release(ids[st.arg], st.at)
		case "renew":
			_, cur, err := tb.Renew(ids[st.arg], 10*time.Second, st.at)
			granted = err == nil
			if err != nil && !errors.Is(err, ErrLeaseNotFound) {
				t.Fatalf("step %d: %v", i, err)
			}
			if granted && cur.Expires != st.at.Add(10*time.Second) {
				t.Errorf("step %d: expires %v", i, cur.Expires)
			}
		}
		if granted != st.granted {
			t.Errorf("step %d: %s(%s) = %v want %v", i, st.do, st.arg, granted, st.granted)
		}
		if got := tb.InFlight(k, st.at); got != st.inFlight {
			t.Errorf("step %d: in flight %d want %d", i, got, st.inFlight)
		}
	}
}

func TestLeasesBadInput(t *testing.T) {
	tb := NewLeases(0)
	tok := MustLimit(TokenBucket, 2, time.Second, 0)
	l := MustLimit(Concurrency, 2, 0, 0)
	if _, err := tb.Acquire("c|k", tok, time.Second, "", 0); !errors.Is(err, ErrLimit) {
		t.Errorf("token bucket: %v", err)
	}
	if _, err := tb.Acquire("c|k", l, time.Hour+1, "", 0); !errors.Is(err, ErrLimit) {
		t.Errorf("ttl: %v", err)
	}
	if _, err := tb.Acquire("c|k", l, time.Second, string(make([]byte, MaxRequestIDLen+1)), 0); !errors.Is(err, ErrLimit) {
		t.Errorf("request id: %v", err)
	}
	if _, _, err := tb.Renew("l1.nope", time.Second, 0); !errors.Is(err, ErrLeaseNotFound) {
		t.Errorf("renew: %v", err)
	}
	if tb.Len() != 0 {
		t.Fatalf("holds %d", tb.Len())
	}
}

// TestLeasesFull: a table of 3 records refuses a fourth lease until one
// expires.
func TestLeasesFull(t *testing.T) {
	tb := NewLeases(3)
	l := MustLimit(Concurrency, 10, 0, 0)
	for i := range 3 {
		if _, err := tb.Acquire("c|k", l, time.Second, "", clock.Instant(i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tb.Acquire("c|j", l, time.Second, "", 3); !errors.Is(err, ErrLeasesFull) {
		t.Fatalf("fourth: %v", err)
	}
	if g, err := tb.Acquire("c|j", l, time.Second, "", sec); err != nil || !g.Granted || tb.Len() != 3 {
		t.Fatalf("after expiry: %+v %v, %d held", g, err, tb.Len())
	}
}

// TestLeasesReplaceMerge: a replica's set is replaced whole; a handoff's
// is merged by id, keeping the later expiry.
func TestLeasesReplaceMerge(t *testing.T) {
	owner, replica := NewLeases(0), NewLeases(0)
	l := MustLimit(Concurrency, 5, 0, 0)
	const k = "c|k"
	for range 3 {
		owner.Acquire(k, l, 10*time.Second, "", 0)
	}
	set := owner.Held(k, sec)
	if n := replica.Replace(k, set, sec); n != 3 || replica.InFlight(k, sec) != 3 {
		t.Fatalf("replace took %d", n)
	}
	owner.Release(set[0].ID, 2*sec)
	if n := replica.Replace(k, owner.Held(k, 2*sec), 2*sec); n != 2 || replica.InFlight(k, 2*sec) != 2 {
		t.Fatalf("second replace took %d, in flight %d", n, replica.InFlight(k, 2*sec))
	}
	other := NewLeases(0)
	other.Acquire(k, l, 10*time.Second, "", 0)
	other.Replace(k, append(other.Held(k, 0), set[1]), 0)
	if n := replica.Merge(k, other.Held(k, 3*sec), 3*sec); n != 2 || replica.InFlight(k, 3*sec) != 3 {
		t.Fatalf("merge took %d, in flight %d", n, replica.InFlight(k, 3*sec))
	}
	if keys := replica.Keys(); len(keys) != 1 || keys[0] != k {
		t.Fatalf("keys %q", keys)
	}
	bad := []Lease{{ID: "x", Key: "c|other", Limit: l, Expires: 20 * sec}, {ID: "y", Key: k, Limit: l, Expires: sec}}
	if n := replica.Merge(k, bad, 3*sec); n != 0 {
		t.Fatalf("merged %d hostile leases", n)
	}
}

// TestLeasesProperty: whatever the acquires, renews, releases and clock
// steps, a key never holds more live leases than its limit, InFlight is
// the number of grants not released and not expired, and every lease
// expires exactly at its TTL.
func TestLeasesProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		limit := rapid.Int64Range(1, 6).Draw(rt, "limit")
		l := MustLimit(Concurrency, limit, 0, 0)
		tb := NewLeases(rapid.IntRange(1, 20).Draw(rt, "max"))
		model := map[string]clock.Instant{} // id → expiry: the leases the model holds
		var now clock.Instant
		var ids []string
		for i := range rapid.IntRange(1, 80).Draw(rt, "steps") {
			switch rapid.IntRange(0, 3).Draw(rt, "op") {
			case 0:
				ttl := time.Duration(rapid.IntRange(1, 5).Draw(rt, "ttl")) * time.Second
				g, err := tb.Acquire("c|k", l, ttl, "", now)
				live := 0
				for _, e := range model {
					if e > now {
						live++
					}
				}
				if errors.Is(err, ErrLeasesFull) {
					continue
				}
				if g.Granted != (int64(live) < limit) {
					rt.Fatalf("step %d: granted %v with %d live of %d", i, g.Granted, live, limit)
				}
				if g.Granted {
					model[g.Lease.ID] = now.Add(ttl)
					ids = append(ids, g.Lease.ID)
				}
			case 1:
				if len(ids) > 0 {
					id := ids[rapid.IntRange(0, len(ids)-1).Draw(rt, "id")]
					_, ok := tb.Release(id, now)
					e, held := model[id]
					if ok != (held && e > now) {
						rt.Fatalf("step %d: release %v, model %v", i, ok, held && e > now)
					}
					delete(model, id)
				}
			case 2:
				if len(ids) > 0 {
					id := ids[rapid.IntRange(0, len(ids)-1).Draw(rt, "id")]
					_, _, err := tb.Renew(id, 3*time.Second, now)
					if e, held := model[id]; held && e > now {
						if err != nil {
							rt.Fatalf("step %d: renew %v", i, err)
						}
						model[id] = now.Add(3 * time.Second)
					} else if !errors.Is(err, ErrLeaseNotFound) {
						rt.Fatalf("step %d: renew of a dead lease: %v", i, err)
					}
				}
			case 3:
				now = now.Add(time.Duration(rapid.IntRange(0, 3000).Draw(rt, "ms")) * time.Millisecond)
			}
			live := int64(0)
			for _, e := range model {
				if e > now {
					live++
				}
			}
			if got := tb.InFlight("c|k", now); got != live || got > limit {
				rt.Fatalf("step %d: in flight %d, model %d, limit %d", i, got, live, limit)
			}
		}
	})
}

// TestLeasesFullSweepsOnce: a full table of live leases is not swept
// again before its earliest lease expires, and is swept then.
func TestLeasesFullSweepsOnce(t *testing.T) {
	tb := NewLeases(2)
	l := MustLimit(Concurrency, 10, 0, 0)
	tb.Acquire("c|k", l, 2*time.Second, "", 0)
	tb.Acquire("c|k", l, 3*time.Second, "", 0)
	for _, at := range []clock.Instant{0, sec, 2*sec - 1} {
		if _, err := tb.Acquire("c|j", l, time.Second, "", at); !errors.Is(err, ErrLeasesFull) {
			t.Fatalf("at %v: %v, want ErrLeasesFull", at, err)
		}
	}
	if tb.sweepAt != 2*sec {
		t.Fatalf("next sweep at %v, want 2s", tb.sweepAt)
	}
	if g, err := tb.Acquire("c|j", l, time.Second, "", 2*sec); err != nil || !g.Granted || tb.Len() != 2 {
		t.Fatalf("at 2s: %+v %v, %d held", g, err, tb.Len())
	}
}
