package policy

import (
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
)

// TestConcurrencyLayers: a concurrency layer's lease_ttl and
// max_lease_ttl, their defaults (30s and 5m; a max below 30s lowers the
// default), and what Resolve and LeaseTTLFor make of them: a request's
// TTL capped at max_lease_ttl, 0 meaning lease_ttl.
func TestConcurrencyLayers(t *testing.T) {
	const file = `
policies:
  api:
    default_tier: free
    tiers:
      free: { limit: 10, per: 1h }
    routes:
      - match: /export
        limit: { algorithm: concurrency, limit: 2, key: identity+route, lease_ttl: 1m, max_lease_ttl: 10m }
      - match: /report
        limit: { algorithm: concurrency, limit: 3 }
      - match: /quick
        limit: { algorithm: concurrency, limit: 4, max_lease_ttl: 10s }
`
	set, err := Parse([]byte(file), "c.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p := set.Policies["api"]
	for _, c := range []struct {
		route           string
		limit           int64
		leaseTTL, maxTT time.Duration
		asks, gets      time.Duration
	}{
		{"/export", 2, time.Minute, 10 * time.Minute, 0, time.Minute},
		{"/export", 2, time.Minute, 10 * time.Minute, time.Hour, 10 * time.Minute},
		{"/report", 3, 30 * time.Second, 5 * time.Minute, 2 * time.Minute, 2 * time.Minute},
		{"/quick", 4, 10 * time.Second, 10 * time.Second, 0, 10 * time.Second},
	} {
		checks, err := p.Resolve(Request{User: "u1", Route: c.route}, nil)
		if err != nil || len(checks) != 2 {
			t.Fatalf("%s: %v, %v", c.route, checks, err)
		}
		l := &checks[0]
		if !l.IsConcurrency() || checks[1].IsConcurrency() || l.Limit.Count() != c.limit || l.LeaseTTL != c.leaseTTL || l.MaxLeaseTTL != c.maxTT {
			t.Errorf("%s: layer %+v", c.route, l)
		}
		if got := l.LeaseTTLFor(c.asks); got != c.gets {
			t.Errorf("%s: a request asking %v gets %v, want %v", c.route, c.asks, got, c.gets)
		}
	}
}

// TestConcurrencyLayerErrors: each bad concurrency field is refused naming
// its place in the file.
func TestConcurrencyLayerErrors(t *testing.T) {
	for _, c := range []struct{ tier, want string }{
		{"{ algorithm: concurrency, limit: 2, per: 1s }", "policies.api.tiers.free.per: "},
		{"{ algorithm: concurrency, limit: 2, burst: 3 }", "policies.api.tiers.free.burst: "},
		{"{ algorithm: concurrency, limit: 0 }", "policies.api.tiers.free.limit: "},
		{"{ algorithm: concurrency, limit: 2, lease_ttl: 2h }", "policies.api.tiers.free.lease_ttl: must be between 1s and 1h0m0s"},
		{"{ algorithm: concurrency, limit: 2, lease_ttl: soon }", "policies.api.tiers.free.lease_ttl: \"soon\" is not a duration"},
		{"{ algorithm: concurrency, limit: 2, max_lease_ttl: 500ms }", "policies.api.tiers.free.max_lease_ttl: must be between"},
		{"{ algorithm: concurrency, limit: 2, lease_ttl: 2m, max_lease_ttl: 1m }", "policies.api.tiers.free.lease_ttl: 2m0s is above max_lease_ttl 1m0s"},
		{"{ algorithm: concurrency, limit: 2, failure_mode: local }", "policies.api.tiers.free.failure_mode: "},
		{"{ limit: 2, per: 1s, lease_ttl: 1m }", "policies.api.tiers.free.lease_ttl: only a concurrency layer holds leases"},
		{"{ limit: 2, per: 1s, max_lease_ttl: 1m }", "policies.api.tiers.free.max_lease_ttl: only a concurrency layer holds leases"},
	} {
		_, err := Parse([]byte("policies:\n  api:\n    default_tier: free\n    tiers:\n      free: "+c.tier+"\n"), "c.yaml")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error containing %q", c.tier, err, c.want)
		}
	}
}

// TestConcurrencyOverride: an override's inline concurrency limit is a
// concurrency layer with the file's defaults: fail_closed, lease_ttl 30s,
// max_lease_ttl 5m.
func TestConcurrencyOverride(t *testing.T) {
	f := newFixture(t)
	if _, err := f.m.AddOverride(Override{Actor: "alice", Reason: "r", APIKey: "k",
		Limit: &LimitArg{Algorithm: "concurrency", Limit: 2}, Expires: t0.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	got, err := f.m.Resolve(Request{APIKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	var over *Check
	for i := range got {
		if got[i].Scope == "override" {
			over = &got[i]
		}
	}
	if over == nil || !over.IsConcurrency() || over.FailureMode != bucket.FailClosed || over.LeaseTTL != 30*time.Second || over.MaxLeaseTTL != 5*time.Minute {
		t.Fatalf("override layer: %+v in %+v", over, got)
	}
}
