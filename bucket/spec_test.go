package bucket

import (
	"errors"
	"math"
	"testing"
	"time"
)

// Every field's errors, in the one wording, under the caller's path.
func TestSpecParseErrors(t *testing.T) {
	const algs = "token_bucket, leaky_bucket, fixed_window, sliding_window_log, sliding_window_counter, concurrency"
	ok := LimitSpec{Limit: 10, Per: "1s"}
	with := func(f func(*LimitSpec)) LimitSpec {
		s := ok
		f(&s)
		return s
	}
	cases := []struct {
		spec     LimitSpec
		want     string
		field    string
		sentinel error
	}{
		{with(func(s *LimitSpec) { s.Algorithm = "gcra" }), `limit.algorithm: unknown algorithm "gcra" (want one of ` + algs + `)`, "algorithm", ErrAlgorithm},
		{with(func(s *LimitSpec) { s.Algorithm = "Token_Bucket" }), `limit.algorithm: unknown algorithm "Token_Bucket" (want one of ` + algs + `)`, "algorithm", ErrAlgorithm},
		{with(func(s *LimitSpec) { s.Limit = 0 }), "limit.limit: must be at least 1, got 0", "limit", ErrLimit},
		{with(func(s *LimitSpec) { s.Limit = -5 }), "limit.limit: must be at least 1, got -5", "limit", ErrLimit},
		{with(func(s *LimitSpec) { s.Limit = MaxCount + 1 }), "limit.limit: must be at most 2147483647 with token_bucket, got 2147483648", "limit", ErrLimit},
		{with(func(s *LimitSpec) { s.Algorithm, s.Limit = "leaky_bucket", MaxCount+1 }), "limit.limit: must be at most 2147483647 with leaky_bucket, got 2147483648", "limit", ErrLimit},
		{with(func(s *LimitSpec) { s.Algorithm, s.Limit = "fixed_window", MaxWindowCount+1 }), "limit.limit: must be at most 4294967295 with fixed_window, got 4294967296", "limit", ErrLimit},
		{with(func(s *LimitSpec) { s.Algorithm, s.Limit = "sliding_window_log", MaxLogLimit+1 }), "limit.limit: must be at most 100000 with sliding_window_log, got 100001", "limit", ErrLimit},
		{with(func(s *LimitSpec) { s.Per = "" }), "limit.per: required: a period between 1ms and 8784h0m0s", "per", ErrLimit},
		{with(func(s *LimitSpec) { s.Per = "10" }), `limit.per: "10" is not a duration (try 10s)`, "per", ErrLimit},
		{with(func(s *LimitSpec) { s.Per = "1.5" }), `limit.per: "1.5" is not a duration (try 1.5s)`, "per", ErrLimit},
		{with(func(s *LimitSpec) { s.Per = "soon" }), `limit.per: "soon" is not a duration (such as 1s, 1m30s or 250ms)`, "per", ErrLimit},
		{with(func(s *LimitSpec) { s.Per = "1x" }), `limit.per: "1x" is not a duration (such as 1s, 1m30s or 250ms)`, "per", ErrLimit},
		{with(func(s *LimitSpec) { s.Per = "0s" }), "limit.per: must be between 1ms and 8784h0m0s, got 0s", "per", ErrLimit},
		{with(func(s *LimitSpec) { s.Per = "-1s" }), "limit.per: must be between 1ms and 8784h0m0s, got -1s", "per", ErrLimit},
		{with(func(s *LimitSpec) { s.Per = "999us" }), "limit.per: must be between 1ms and 8784h0m0s, got 999µs", "per", ErrLimit},
		{with(func(s *LimitSpec) { s.Per = "8785h" }), "limit.per: must be between 1ms and 8784h0m0s, got 8785h0m0s", "per", ErrLimit},
		{with(func(s *LimitSpec) { s.Per = "9999999999h" }), "limit.per: must be between 1ms and 8784h0m0s, got 9999999999h", "per", ErrLimit},
		{with(func(s *LimitSpec) { s.Per, s.PerDuration = "", -time.Second }), "limit.per: must be between 1ms and 8784h0m0s, got -1s", "per", ErrLimit},
		{with(func(s *LimitSpec) { s.Per, s.PerDuration = "", math.MaxInt64 }), "limit.per: must be between 1ms and 8784h0m0s, got 2562047h47m16.854775807s", "per", ErrLimit},
		{with(func(s *LimitSpec) { s.Burst = -1 }), "limit.burst: must be at least 1, got -1", "burst", ErrLimit},
		{with(func(s *LimitSpec) { s.Algorithm, s.Burst = "fixed_window", -1 }), "limit.burst: must be at least 1, got -1", "burst", ErrLimit},
		{with(func(s *LimitSpec) { s.Burst = MaxCount + 1 }), "limit.burst: must be at most 2147483647, got 2147483648", "burst", ErrLimit},
		{with(func(s *LimitSpec) { s.Limit, s.Per, s.Burst = 7, "8783h59m59.999999999s", MaxCount }),
			"limit.burst: 2147483647 with a rate of 7 per 8783h59m59.999999999s cannot be represented exactly; use a shorter per or a rounder rate", "burst", ErrLimit},
		{with(func(s *LimitSpec) { s.FailureMode = "fail_maybe" }), `limit.failure_mode: want local, fail_open or fail_closed, got "fail_maybe"`, "failure_mode", ErrFailureMode},
		{with(func(s *LimitSpec) { s.Algorithm, s.Lease = "sliding_window_log", true }), "limit.lease: only the token bucket can lease, not sliding_window_log", "lease", ErrLimit},
		{with(func(s *LimitSpec) { s.Algorithm, s.Lease = "leaky_bucket", true }), "limit.lease: only the token bucket can lease, not leaky_bucket", "lease", ErrLimit},
		{with(func(s *LimitSpec) { s.Lease, s.Replication = true, "sync" }),
			"limit.replication: sync cannot be leased (an entry node admits from a lease before the owner's replica has it)", "replication", ErrLimit},
		{with(func(s *LimitSpec) { s.Replication = "quorum" }), `limit.replication: want async or sync, got "quorum"`, "replication", ErrLimit},
		// The first bad field in the order of the fields is reported.
		{LimitSpec{Algorithm: "gcra", Limit: 0, Per: "x", Burst: -1}, `limit.algorithm: unknown algorithm "gcra" (want one of ` + algs + `)`, "algorithm", ErrAlgorithm},
		{LimitSpec{Limit: 0, Per: "x", Burst: -1}, "limit.limit: must be at least 1, got 0", "limit", ErrLimit},
		{LimitSpec{Limit: 1, Per: "x", Burst: -1}, `limit.per: "x" is not a duration (such as 1s, 1m30s or 250ms)`, "per", ErrLimit},
	}
	for i, c := range cases {
		set, err := c.spec.Parse("limit")
		if err == nil || err.Error() != c.want {
			t.Errorf("step %d: %+v.Parse(limit) = %v, %v; want %q", i, c.spec, set, err, c.want)
			continue
		}
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != c.field || !errors.Is(err, c.sentinel) || fe.Path != "limit."+c.field {
			t.Errorf("step %d: %q: FieldError %+v, want field %s wrapping %v", i, err, fe, c.field, c.sentinel)
		}
		if set != (Settings{}) {
			t.Errorf("step %d: %q with settings %+v, want none", i, err, set)
		}
		// Without a path the field stands alone.
		if _, err := c.spec.Parse(""); err == nil || err.Error() != c.want[len("limit."):] {
			t.Errorf("step %d: Parse(\"\") = %v, want %q", i, err, c.want[len("limit."):])
		}
	}
}

func TestSpecParse(t *testing.T) {
	cases := []struct {
		spec LimitSpec
		want Settings
	}{
		{LimitSpec{Limit: 10, Per: "1s"}, Settings{Limit: MustLimit(TokenBucket, 10, time.Second, 0)}},
		{LimitSpec{Limit: 10, PerDuration: time.Minute, Burst: 50}, Settings{Limit: MustLimit(TokenBucket, 10, time.Minute, 50)}},
		// Per, when given, wins over PerDuration.
		{LimitSpec{Limit: 10, Per: "2s", PerDuration: time.Minute}, Settings{Limit: MustLimit(TokenBucket, 10, 2*time.Second, 0)}},
		{LimitSpec{Algorithm: "leaky_bucket", Limit: 5, Per: "1m30s", Burst: 7, FailureMode: "fail_closed"},
			Settings{Limit: MustLimit(LeakyBucket, 5, 90*time.Second, 7), FailureMode: FailClosed}},
		{LimitSpec{Algorithm: "fixed_window", Limit: MaxWindowCount, Per: "8784h", Burst: 3},
			Settings{Limit: MustLimit(FixedWindow, MaxWindowCount, MaxPer, 0)}},
		{LimitSpec{Algorithm: "sliding_window_log", Limit: MaxLogLimit, Per: "1ms"}, Settings{Limit: MustLimit(SlidingWindowLog, MaxLogLimit, time.Millisecond, 0)}},
		{LimitSpec{Algorithm: "sliding_window_counter", Limit: 1, Per: "1h", FailureMode: "fail_open", Replication: "sync"},
			Settings{Limit: MustLimit(SlidingWindowCounter, 1, time.Hour, 0), FailureMode: FailOpen, Sync: true}},
		{LimitSpec{Algorithm: "token_bucket", Limit: 3, Per: "1s", Lease: true, Replication: "async", FailureMode: "local"},
			Settings{Limit: MustLimit(TokenBucket, 3, time.Second, 0), Lease: true}},
	}
	for i, c := range cases {
		got, err := c.spec.Parse("limit")
		if err != nil || got != c.want {
			t.Errorf("step %d: %+v.Parse = %+v, %v; want %+v", i, c.spec, got, err, c.want)
		}
	}
}

// A LimitSpec that parses allocates nothing: the HTTP and gRPC APIs parse one
// per inline check.
func TestSpecParseAllocations(t *testing.T) {
	s := LimitSpec{Algorithm: "leaky_bucket", Limit: 10, Per: "1m30s", Burst: 20, FailureMode: "fail_open", Replication: "async"}
	if n := testing.AllocsPerRun(100, func() {
		if _, err := s.Parse("limit"); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("Parse allocates %v times, want 0", n)
	}
}

// NewLimit, ParseAlgorithm and ParseFailureMode speak the words of the
// spec, behind the package's name.
func TestStandaloneErrors(t *testing.T) {
	_, err := NewLimit(TokenBucket, 0, time.Second, 0)
	if want := "bucket: limit: must be at least 1, got 0"; err == nil || err.Error() != want || !errors.Is(err, ErrLimit) {
		t.Errorf("NewLimit: %v, want %q", err, want)
	}
	_, err = NewLimit(Algorithm(9), 1, time.Second, 0)
	if want := `bucket: algorithm: unknown algorithm "algorithm(9)" (want one of token_bucket, leaky_bucket, fixed_window, sliding_window_log, sliding_window_counter, concurrency)`; err == nil || err.Error() != want || !errors.Is(err, ErrAlgorithm) {
		t.Errorf("NewLimit: %v, want %q", err, want)
	}
	_, err = ParseFailureMode("x")
	if want := `bucket: failure_mode: want local, fail_open or fail_closed, got "x"`; err == nil || err.Error() != want || !errors.Is(err, ErrFailureMode) {
		t.Errorf("ParseFailureMode: %v, want %q", err, want)
	}
	if err := CheckLease(TokenBucket); err != nil {
		t.Errorf("CheckLease(token_bucket) = %v", err)
	}
	if err := CheckLease(FixedWindow); err == nil || err.Error() != "lease: only the token bucket can lease, not fixed_window" {
		t.Errorf("CheckLease(fixed_window) = %v", err)
	}
}

// FuzzSpecParse: Parse never panics; it accepts exactly what NewLimit
// accepts for the same parameters (and the other fields' rules), and its
// errors are FieldErrors under the path given.
func FuzzSpecParse(f *testing.F) {
	f.Add("", int64(10), "1s", int64(0), "", false, "")
	f.Add("leaky_bucket", int64(5), "1m30s", int64(7), "fail_open", false, "sync")
	f.Add("fixed_window", int64(4294967295), "8784h", int64(-1), "local", false, "")
	f.Add("sliding_window_log", int64(100001), "10", int64(0), "", true, "")
	f.Add("token_bucket", int64(7), "8783h59m59.999999999s", int64(2147483647), "fail_closed", true, "sync")
	f.Add("gcra", int64(0), "9999999999h", int64(-5), "fail_maybe", true, "quorum")
	f.Fuzz(func(t *testing.T, alg string, limit int64, per string, burst int64, mode string, lease bool, repl string) {
		s := LimitSpec{Algorithm: alg, Limit: limit, Per: per, Burst: burst, FailureMode: mode, Lease: lease, Replication: repl}
		set, err := s.Parse("p")
		if err != nil {
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Path != "p."+fe.Field || err.Error() != fe.Path+": "+fe.Msg {
				t.Fatalf("%+v: error %v is not a FieldError under p", s, err)
			}
			return
		}
		a, err := ParseAlgorithm(alg)
		if err != nil {
			t.Fatalf("%+v: parsed, but ParseAlgorithm: %v", s, err)
		}
		d, err := time.ParseDuration(per)
		if err != nil {
			t.Fatalf("%+v: parsed, but ParseDuration: %v", s, err)
		}
		l, err := NewLimit(a, limit, d, burst)
		if err != nil || l != set.Limit || burst < 0 {
			t.Fatalf("%+v: parsed to %v; NewLimit = %v, %v", s, set.Limit, l, err)
		}
		if set.Lease != lease || lease && a != TokenBucket || set.Sync != (repl == "sync") || set.Sync && lease {
			t.Fatalf("%+v: parsed to %+v", s, set)
		}
		if m, err := ParseFailureMode(mode); err != nil || m != set.FailureMode {
			t.Fatalf("%+v: failure mode %v, ParseFailureMode = %v, %v", s, set.FailureMode, m, err)
		}
	})
}
