package policy

import (
	"os"
	"strings"
	"testing"

	"github.com/ringlimit/ringlimit/bucket"
)

// FuzzParse feeds arbitrary bytes to Parse: it must never panic, and every
// policy it accepts must resolve a few fixed requests into checks that the
// rest of the system accepts (key of 1 to bucket.MaxKeyLen bytes, 1 ≤ cost
// ≤ capacity, a usable limit, a failure mode and prelimit that forward
// accepts).
func FuzzParse(f *testing.F) {
	if data, err := os.ReadFile(examplePath); err == nil {
		f.Add(data)
	}
	for _, s := range []string{
		"",
		"policies:\n  api:\n    tiers:\n" + okTier,
		"policies:\n  api:\n    tiers: [\n",
		"policies:\n  api:\n    tiers:\n" + okTier + okTier,
		"policies:\n  api:\n    routes:\n      - {match: /a/*, cost: 3, limit: {limit: 5, per: 1m, key: ip+route}}\n    global: {limit: 10, per: 1s}\n",
		"policies:\n  api:\n    prelimit: 2\n    dry_run: true\n    default_tier: t\n    anonymous_tier: t\n    tiers:\n      t: {algorithm: leaky_bucket, limit: 3, per: 1ms, burst: 9, key: identity+route, failure_mode: fail_open}\n",
		"version: x\npolicies:\n  a: &x {tiers: {t: {limit: 1, per: 1s}}}\n  b: *x\n",
		"policies: {}\n",
		"\xff\xfe",
	} {
		f.Add([]byte(s))
	}
	long := strings.Repeat("z", maxField)
	f.Fuzz(func(t *testing.T, data []byte) {
		set, err := Parse(data, "fuzz.yaml")
		if err != nil {
			if set != nil {
				t.Fatalf("Parse returned a set with error %v", err)
			}
			return
		}
		if set.Version == "" || len(set.Policies) == 0 {
			t.Fatalf("accepted set with version %q and %d policies", set.Version, len(set.Policies))
		}
		if set.Default != "" && set.Policies[set.Default] == nil {
			t.Fatalf("Default %q names no policy", set.Default)
		}
		for name, p := range set.Policies {
			var tiers []string
			overrides := []*Layer{nil}
			for tier, l := range p.Tiers {
				tiers = append(tiers, tier)
				checkLayer(t, name, l)
				ov := *l
				ov.Scope = "override:tier:" + tier
				overrides = append(overrides, &ov)
			}
			if p.Global != nil {
				checkLayer(t, name, p.Global)
			}
			routes := []string{"", "/", "/login", "/reports", "/export/x", "/" + long[1:]}
			for _, r := range p.Routes {
				if r.Layer != nil {
					checkLayer(t, name, r.Layer)
				}
				routes = append(routes, r.Match, strings.TrimSuffix(r.Match, "*")+"x")
			}
			reqTiers := append([]string{"", "nope"}, tiers...)
			for _, route := range routes {
				for _, tier := range reqTiers {
					for _, ov := range overrides {
						for _, req := range []Request{
							{User: "42", Route: route, Tier: tier},
							{APIKey: long, IP: long, Route: route, Tier: tier, Cost: 2},
							{IP: "203.0.113.9", Route: route, Tier: tier, Cost: 1 << 40},
						} {
							req.Policy = name
							checks, err := p.Resolve(req, ov)
							if err != nil {
								continue
							}
							for _, c := range checks {
								if err := bucket.CheckKey(c.Key); err != nil {
									t.Fatalf("policy %s, %+v: check %s: %v", name, req, c.Scope, err)
								}
								if !c.Limit.Valid() || c.Cost < 1 || c.Cost > c.Limit.Capacity() {
									t.Fatalf("policy %s, %+v: check %s: cost %d, limit %v (capacity %d)", name, req, c.Scope, c.Cost, c.Limit, c.Limit.Capacity())
								}
							}
							ds := make([]bucket.Decision, len(checks))
							Combine(checks, ds)
						}
					}
				}
			}
		}
	})
}

// checkLayer fails unless l is a layer the rest of the system accepts.
func checkLayer(t *testing.T, policy string, l *Layer) {
	t.Helper()
	if !l.Limit.Valid() || l.Scope == "" {
		t.Fatalf("policy %s: layer %+v has no limit or scope", policy, l)
	}
	if !l.FailureMode.Valid() {
		t.Fatalf("policy %s: layer %s: failure mode %v", policy, l.Scope, l.FailureMode)
	}
	switch l.KeyBy {
	case ByIdentity, ByIP, ByIPRoute, ByIdentityRoute, ByAll:
	default:
		t.Fatalf("policy %s: layer %s: key by %q", policy, l.Scope, l.KeyBy)
	}
	// forward.ValidateChecks: prelimit is 0 or in [1, 1000].
	if l.Prelimit != 0 && !(l.Prelimit >= 1 && l.Prelimit <= 1000) {
		t.Fatalf("policy %s: layer %s: prelimit %v", policy, l.Scope, l.Prelimit)
	}
}
