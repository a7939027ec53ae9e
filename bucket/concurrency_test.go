package bucket

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/clock"
)

func TestConcurrencySpec(t *testing.T) {
	set, err := (&LimitSpec{Algorithm: "concurrency", Limit: 5}).Parse("limit")
	if err != nil {
		t.Fatal(err)
	}
	if set.Limit.Algorithm() != Concurrency || set.Limit.Count() != 5 || set.FailureMode != FailClosed || !set.Sync || set.Lease {
		t.Fatalf("settings %+v", set)
	}
	if got := set.Limit.Spec(); got != "cc:5:0s:5" {
		t.Fatalf("spec %q", got)
	}
	if got := set.Limit.String(); got != "concurrency 5" {
		t.Fatalf("string %q", got)
	}
	open, err := (&LimitSpec{Algorithm: "concurrency", Limit: 1, FailureMode: "fail_open", Replication: "sync"}).Parse("")
	if err != nil || open.FailureMode != FailOpen {
		t.Fatalf("fail_open: %+v %v", open, err)
	}
	for i, tc := range []struct {
		spec     LimitSpec
		path     string
		msg      string
		sentinel error
	}{
		{LimitSpec{Algorithm: "concurrency"}, "limit.limit", "must be at least 1, got 0", ErrLimit},
		{LimitSpec{Algorithm: "concurrency", Limit: MaxCount + 1}, "limit.limit", "must be at most 2147483647 with concurrency, got 2147483648", ErrLimit},
		{LimitSpec{Algorithm: "concurrency", Limit: 5, Per: "1s"}, "limit.per", "a concurrency limit has no per", ErrLimit},
		{LimitSpec{Algorithm: "concurrency", Limit: 5, PerDuration: time.Second}, "limit.per", "a concurrency limit has no per", ErrLimit},
		{LimitSpec{Algorithm: "concurrency", Limit: 5, Burst: 3}, "limit.burst", "a concurrency limit has no burst", ErrLimit},
		{LimitSpec{Algorithm: "concurrency", Limit: 5, Lease: true}, "limit.lease", "only the token bucket can lease, not concurrency", ErrLimit},
		{LimitSpec{Algorithm: "concurrency", Limit: 5, Replication: "async"}, "limit.replication", "", ErrLimit},
		{LimitSpec{Algorithm: "concurrency", Limit: 5, FailureMode: "local"}, "limit.failure_mode", "", ErrFailureMode},
		{LimitSpec{Algorithm: "concurrency", Limit: 5, FailureMode: "nope"}, "limit.failure_mode", "", ErrFailureMode},
	} {
		_, err := tc.spec.Parse("limit")
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Path != tc.path || !errors.Is(err, tc.sentinel) || (tc.msg != "" && fe.Msg != tc.msg) {
			t.Errorf("step %d: Parse(%+v) = %v, want %s: %s", i, tc.spec, err, tc.path, tc.msg)
		}
	}
}

// TestConcurrencyNotChecked: every Store operation refuses a Concurrency
// limit with an error wrapping ErrLimit, and the store holds nothing after.
func TestConcurrencyNotChecked(t *testing.T) {
	s := newStore(t, 16, 1)
	l := MustLimit(Concurrency, 5, 0, 0)
	const want = "a concurrency limit is acquired (POST /v1/acquire), not checked"
	check := func(op string, err error) {
		t.Helper()
		if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v", op, err)
		}
	}
	_, err := s.Take("k", &l, 0, 1)
	check("Take", err)
	_, _, err = s.TakeUnsent("k", &l, 0, 1)
	check("TakeUnsent", err)
	_, err = s.Peek("k", &l, 0, 1)
	check("Peek", err)
	_, err = s.Settle("k", &l, 0, 1)
	check("Settle", err)
	_, _, err = s.Reset("k", &l, 0)
	check("Reset", err)
	_, _, err = s.ResetAt("k", &l, 0, 1)
	check("ResetAt", err)
	check("Set", s.Set("k", &l, 0, 1))
	check("Charge", s.Charge("k", &l, 0, 1))
	check("Merge", s.Merge("k", &l, 0, 1))
	check("Refund", s.Refund("k", &l, 0, 1))
	_, err = New(l).TakeAt(0, 1)
	check("Bucket.TakeAt", err)
	if n := s.MergeEach(0, 1, func(int) (string, *Limit, int64) { return "k", &l, 1 }); n != 0 {
		t.Errorf("MergeEach merged %d", n)
	}
	if n := s.Grant("k", &l, 0, 1); n != 0 {
		t.Errorf("Grant granted %d", n)
	}
	if s.Len() != 0 || s.Has("k") {
		t.Fatalf("store holds %d keys", s.Len())
	}
}

func TestLeaseID(t *testing.T) {
	key := NamespaceConcurrency + "user:42"
	id := NewLeaseID(key)
	if !strings.HasPrefix(id, "l1.") || len(id) != len("l1.")+len("Y3x1c2VyOjQy")+1+16 {
		t.Fatalf("id %q", id)
	}
	if got, err := ParseLeaseID(id); err != nil || got != key {
		t.Fatalf("ParseLeaseID = %q, %v", got, err)
	}
	if NewLeaseID(key) == id {
		t.Fatal("two ids alike")
	}
	for _, bad := range []string{"", "l1.", "r1.Y3x1c2VyOjQy.AAAAAAAAAAAAAAAA", "l1.Y3x1c2VyOjQy.short", "l1.!!!.AAAAAAAAAAAAAAAA",
		"l1..AAAAAAAAAAAAAAAA", "l1." + strings.Repeat("A", MaxLeaseIDLen) + ".AAAAAAAAAAAAAAAA"} {
		if _, err := ParseLeaseID(bad); !errors.Is(err, ErrLeaseID) {
			t.Errorf("ParseLeaseID(%q) = %v", bad, err)
		}
	}
}

func TestCheckLeaseTTL(t *testing.T) {
	for ttl, ok := range map[time.Duration]bool{time.Second: true, time.Hour: true, 999 * time.Millisecond: false, time.Hour + 1: false, 0: false} {
		if err := CheckLeaseTTL("ttl", ttl); (err == nil) != ok {
			t.Errorf("CheckLeaseTTL(%v) = %v", ttl, err)
		}
	}
}

func FuzzParseLeaseID(f *testing.F) {
	f.Add(NewLeaseID("c|k"))
	f.Add("l1.x.y")
	f.Fuzz(func(t *testing.T, id string) {
		key, err := ParseLeaseID(id)
		if err == nil && CheckKey(key) != nil {
			t.Fatalf("%q parsed to a bad key %q", id, key)
		}
	})
}

var sec = clock.Instant(time.Second)

// rateAlgorithms bounds the algorithms a Store checks: every one but
// Concurrency.
const rateAlgorithms = Concurrency
