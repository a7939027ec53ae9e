package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
)

const examplePath = "../examples/policy.yaml"

// readExample returns the shipped example policy file.
func readExample(t testing.TB) []byte {
	t.Helper()
	data, err := os.ReadFile(examplePath)
	if err != nil {
		t.Fatalf("read %s: %v", examplePath, err)
	}
	return data
}

// parseOK parses data and fails the test (naming the case) on error.
func parseOK(t testing.TB, name string, data []byte) *Set {
	t.Helper()
	set, err := Parse(data, name+".yaml")
	if err != nil {
		t.Fatalf("%s: Parse: got error %v, want none", name, err)
	}
	return set
}

// exampleSet parses the shipped example file.
func exampleSet(t testing.TB) *Set {
	t.Helper()
	return parseOK(t, "example", readExample(t))
}

// lim is bucket.MustLimit with the algorithm by name.
func lim(t testing.TB, alg string, limit int64, per time.Duration, burst int64) bucket.Limit {
	t.Helper()
	a, err := bucket.ParseAlgorithm(alg)
	if err != nil {
		t.Fatalf("ParseAlgorithm(%q): %v", alg, err)
	}
	l, err := bucket.NewLimit(a, limit, per, burst)
	if err != nil {
		t.Fatalf("NewLimit(%s, %d, %v, %d): %v", alg, limit, per, burst, err)
	}
	return l
}

// wantErrContains fails unless err is non-nil and its message contains
// every one of wants.
func wantErrContains(t testing.TB, name string, err error, wants ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: got no error, want one containing %q", name, wants)
		return
	}
	for _, w := range wants {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: got error %q, want it to contain %q", name, err, w)
		}
	}
}

// equal fails unless got and want are deeply equal.
func equal[T any](t testing.TB, name, what string, got, want T) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s: %s:\n got  %+v\n want %+v", name, what, got, want)
	}
}

func TestParseExample(t *testing.T) {
	data := readExample(t)
	set := parseOK(t, "example", data)

	sum := sha256.Sum256(data)
	wantVersion := "2026-11-29-" + hex.EncodeToString(sum[:])[:12]
	equal(t, "example", "Version", set.Version, wantVersion)
	if !regexp.MustCompile(`^2026-11-29-[0-9a-f]{12}$`).MatchString(set.Version) {
		t.Errorf("example: Version %q does not match 2026-11-29-<12 hex>", set.Version)
	}
	equal(t, "example", "Source", set.Source, "example.yaml")
	equal(t, "example", "Default", set.Default, "api")
	if len(set.Policies) != 1 || set.Policies["api"] == nil {
		t.Fatalf("example: Policies = %v, want exactly [api]", set.Policies)
	}
	p := set.Policies["api"]
	equal(t, "example", "Name", p.Name, "api")
	equal(t, "example", "DefaultTier", p.DefaultTier, "free")
	equal(t, "example", "AnonymousTier", p.AnonymousTier, "anonymous")

	wantTiers := map[string]*Layer{
		"anonymous":  {Scope: "tier:anonymous", Limit: lim(t, "token_bucket", 60, time.Minute, 120), KeyBy: ByIP, Prelimit: 2},
		"free":       {Scope: "tier:free", Limit: lim(t, "token_bucket", 10, time.Second, 20), KeyBy: ByIdentity, Prelimit: 2},
		"pro":        {Scope: "tier:pro", Limit: lim(t, "token_bucket", 100, time.Second, 500), KeyBy: ByIdentity, Prelimit: 2},
		"enterprise": {Scope: "tier:enterprise", Limit: lim(t, "token_bucket", 1000, time.Second, 5000), FailureMode: bucket.FailOpen, KeyBy: ByIdentity, Prelimit: 2},
	}
	equal(t, "example", "Tiers", p.Tiers, wantTiers)

	// Sorted most specific first: exact (longer first), then prefix.
	wantRoutes := []Route{
		{Match: "/reports", Cost: 10},
		{Match: "/login", Layer: &Layer{Scope: "route:/login", Limit: lim(t, "token_bucket", 5, time.Minute, 0),
			FailureMode: bucket.FailClosed, KeyBy: ByIPRoute, Prelimit: 2, route: "/login"}},
		{Match: "/export/*", prefix: true, Layer: &Layer{Scope: "route:/export/*",
			Limit: lim(t, "sliding_window_counter", 100, time.Hour, 0), KeyBy: ByIdentity, DryRun: true, Prelimit: 2, route: "/export/*"}},
	}
	equal(t, "example", "Routes", p.Routes, wantRoutes)

	wantGlobal := &Layer{Scope: "global", Limit: lim(t, "token_bucket", 2000, time.Second, 6000), KeyBy: ByAll, Prelimit: 2}
	equal(t, "example", "Global", p.Global, wantGlobal)
}

func TestParseVersion(t *testing.T) {
	data := readExample(t)
	v1 := parseOK(t, "first", data).Version
	v2 := parseOK(t, "again", append([]byte(nil), data...)).Version
	equal(t, "same bytes", "Version", v2, v1)

	// One byte changed (inside a comment: same policy, different file).
	i := strings.Index(string(data), "limits as data")
	if i < 0 {
		t.Fatal("example file: comment \"limits as data\" not found")
	}
	changed := append([]byte(nil), data...)
	changed[i] = 'L'
	v3 := parseOK(t, "one byte changed", changed).Version
	if v3 == v1 {
		t.Errorf("one byte changed: Version %q, want it to differ from %q", v3, v1)
	}
	if !strings.HasPrefix(v3, "2026-11-29-") {
		t.Errorf("one byte changed: Version %q, want the label 2026-11-29- kept", v3)
	}

	// No version label: the hash alone.
	noLabel := []byte("policies:\n  api:\n    tiers:\n      free: {limit: 1, per: 1s}\n")
	sum := sha256.Sum256(noLabel)
	equal(t, "no label", "Version", parseOK(t, "no label", noLabel).Version, hex.EncodeToString(sum[:6]))
}

// A minimal valid file the bad cases are variations of.
const okTier = "      free: {limit: 10, per: 1s, burst: 20}\n"

func TestParseErrors(t *testing.T) {
	big := "policies:\n  api:\n    tiers:\n" + okTier + "#" + strings.Repeat("x", MaxFileBytes) + "\n"
	cases := []struct {
		name  string
		yaml  string
		wants []string // substrings of the error: the place at fault
		note  string   // why the case exists, when the name does not say
	}{
		{"yaml syntax", "policies:\n  api:\n    tiers: [\n", []string{"bad.yaml", "yaml: line 3"}, ""},
		{"yaml tab indentation", "policies:\n\tapi: {}\n", []string{"bad.yaml", "line 2"}, ""},
		{"unknown field top level", "colour: red\npolicies:\n  api:\n    tiers:\n" + okTier,
			[]string{`line 1: unknown field "colour" in the file (fields: version, policies)`}, ""},
		{"unknown field in policy", "policies:\n  api:\n    teirs: {}\n    tiers:\n" + okTier,
			[]string{`line 3: unknown field "teirs" in policy (did you mean "tiers"?)`}, ""},
		{"unknown field in tier", "policies:\n  api:\n    tiers:\n      free: {limit: 10, per: 1s, brust: 20}\n",
			[]string{`line 4: unknown field "brust" in limit (did you mean "burst"?)`}, ""},
		{"unknown field in route", "policies:\n  api:\n    tiers:\n" + okTier + "    routes:\n      - match: /a\n        costs: 3\n",
			[]string{`line 7: unknown field "costs" in route (did you mean "cost"?)`}, ""},
		{"unknown field in route limit", "policies:\n  api:\n    routes:\n      - match: /a\n        limit: {limit: 1, per: 1s, rate: 3}\n",
			[]string{`line 5: unknown field "rate" in limit (fields: algorithm, limit, per, burst, failure_mode, key, dry_run, prelimit, lease, replication, lease_ttl, max_lease_ttl, adaptive, calendar, timezone, week_start)`}, ""},
		{"misspelt field in tier", "policies:\n  api:\n    tiers:\n      free: {algoritm: gcra, limit: 10, per: 1s}\n",
			[]string{`line 4: unknown field "algoritm" in limit (did you mean "algorithm"?)`}, ""},
		{"field in another case", "policies:\n  api:\n    DefaultTier: free\n    tiers:\n" + okTier,
			[]string{`line 3: unknown field "DefaultTier" in policy (did you mean "default_tier"?)`}, ""},
		{"unknown algorithm", "policies:\n  api:\n    tiers:\n      free: {algorithm: gcra, limit: 10, per: 1s}\n",
			[]string{"policies.api.tiers.free.algorithm:", "gcra"}, ""},
		{"zero limit", "policies:\n  api:\n    tiers:\n      free: {limit: 0, per: 1s}\n",
			[]string{"policies.api.tiers.free.limit: must be at least 1, got 0"}, ""},
		{"missing limit", "policies:\n  api:\n    tiers:\n      free: {per: 1s}\n",
			[]string{"policies.api.tiers.free.limit: must be at least 1, got 0"}, ""},
		{"negative limit", "policies:\n  api:\n    tiers:\n      free: {limit: -5, per: 1s}\n",
			[]string{"policies.api.tiers.free.limit: must be at least 1, got -5"}, ""},
		{"limit too large", "policies:\n  api:\n    tiers:\n      free: {limit: 3000000000, per: 1s}\n",
			[]string{"policies.api.tiers.free.limit:"}, ""},
		{"fractional limit", "policies:\n  api:\n    tiers:\n      free: {limit: 2.5, per: 1s}\n",
			[]string{"line 4"}, ""},
		{"fractional route cost", "policies:\n  api:\n    tiers:\n" + okTier + "    routes:\n      - {match: /a, cost: 1.9}\n",
			[]string{"line 6"}, ""},
		{"negative burst", "policies:\n  api:\n    tiers:\n      free: {limit: 10, per: 1s, burst: -1}\n",
			[]string{"policies.api.tiers.free.burst: must be at least 1, got -1"}, ""},
		{"negative burst on a window", "policies:\n  api:\n    tiers:\n      free: {algorithm: fixed_window, limit: 10, per: 1s, burst: -1}\n",
			[]string{"policies.api.tiers.free.burst:"}, ""},
		{"per empty", "policies:\n  api:\n    tiers:\n      free: {limit: 10, per: \"\"}\n",
			[]string{"policies.api.tiers.free.per: required: a period between 1ms and 8784h0m0s"}, ""},
		{"per missing", "policies:\n  api:\n    tiers:\n      free: {limit: 10}\n",
			[]string{"policies.api.tiers.free.per:"}, ""},
		{"per abc", "policies:\n  api:\n    tiers:\n      free: {limit: 10, per: abc}\n",
			[]string{`policies.api.tiers.free.per: "abc" is not a duration (such as 1s, 1m30s or 250ms)`}, ""},
		{"per 0s", "policies:\n  api:\n    tiers:\n      free: {limit: 10, per: 0s}\n",
			[]string{"policies.api.tiers.free.per: must be between 1ms and 8784h0m0s, got 0s"}, ""},
		{"per -1s", "policies:\n  api:\n    tiers:\n      free: {limit: 10, per: -1s}\n",
			[]string{"policies.api.tiers.free.per: must be between 1ms and 8784h0m0s, got -1s"}, ""},
		{"per below 1ms", "policies:\n  api:\n    tiers:\n      free: {limit: 10, per: 1ns}\n",
			[]string{"policies.api.tiers.free.per: must be between 1ms and 8784h0m0s, got 1ns"}, ""},
		{"duplicate tier", "policies:\n  api:\n    tiers:\n" + okTier + "      free: {limit: 5, per: 1s}\n",
			[]string{"line 5", `mapping key "free" already defined at line 4`}, ""},
		{"duplicate policy", "policies:\n  api:\n    tiers:\n" + okTier + "  api:\n    tiers:\n" + okTier,
			[]string{`mapping key "api" already defined`}, ""},
		{"duplicate route match", "policies:\n  api:\n    tiers:\n" + okTier + "    routes:\n      - {match: /a, cost: 1}\n      - {match: /a, cost: 2}\n",
			[]string{`policies.api.routes[1].match: "/a" appears twice`}, ""},
		{"route with neither cost nor limit", "policies:\n  api:\n    tiers:\n" + okTier + "    routes:\n      - {match: /a}\n",
			[]string{"policies.api.routes[0]: needs a cost, a limit or both"}, ""},
		{"route negative cost", "policies:\n  api:\n    tiers:\n" + okTier + "    routes:\n      - {match: /a, cost: -2}\n",
			[]string{"policies.api.routes[0].cost: must be at least 1 (or absent), got -2"}, ""},
		{"route cost above tier capacity", "policies:\n  api:\n    tiers:\n" + okTier + "    routes:\n      - {match: /reports, cost: 21}\n",
			[]string{"policies.api.routes[/reports].cost: 21 exceeds the capacity 20 of tier:free"}, ""},
		{"route cost above global capacity", "policies:\n  api:\n    routes:\n      - {match: /reports, cost: 11}\n    global: {limit: 10, per: 1s}\n",
			[]string{"policies.api.routes[/reports].cost: 11 exceeds the capacity 10 of global"}, ""},
		{"route cost above its own limit", "policies:\n  api:\n    routes:\n      - {match: /reports, cost: 6, limit: {limit: 5, per: 1m}}\n",
			[]string{"policies.api.routes[/reports].cost: 6 exceeds the capacity 5 of route:/reports"}, ""},
		{"route match without slash", "policies:\n  api:\n    routes:\n      - {match: reports, cost: 1}\n    global: {limit: 10, per: 1s}\n",
			[]string{"policies.api.routes[0].match:", `got "reports"`}, ""},
		{"route match star inside", "policies:\n  api:\n    routes:\n      - {match: /a*/b, cost: 1}\n    global: {limit: 10, per: 1s}\n",
			[]string{"policies.api.routes[0].match:", `got "/a*/b"`}, ""},
		{"route match empty", "policies:\n  api:\n    routes:\n      - {cost: 1}\n    global: {limit: 10, per: 1s}\n",
			[]string{"policies.api.routes[0].match:", `got ""`}, ""},
		{"route limit bad per", "policies:\n  api:\n    routes:\n      - {match: /a, limit: {limit: 5, per: soon}}\n",
			[]string{`policies.api.routes[0].limit.per: "soon" is not a duration (such as 1s, 1m30s or 250ms)`}, ""},
		{"global bad", "policies:\n  api:\n    global: {limit: 0, per: 1s}\n",
			[]string{"policies.api.global.limit: must be at least 1"}, ""},
		{"default_tier naming no tier", "policies:\n  api:\n    default_tier: gold\n    tiers:\n" + okTier,
			[]string{`policies.api.default_tier: no tier named "gold"`}, ""},
		{"anonymous_tier naming no tier", "policies:\n  api:\n    anonymous_tier: anon\n    tiers:\n" + okTier,
			[]string{`policies.api.anonymous_tier: no tier named "anon"`}, ""},
		{"bad failure_mode", "policies:\n  api:\n    tiers:\n      free: {limit: 10, per: 1s, failure_mode: fail_maybe}\n",
			[]string{"policies.api.tiers.free.failure_mode:", `got "fail_maybe"`}, ""},
		{"bad replication", "policies:\n  api:\n    tiers:\n      free: {limit: 10, per: 1s, replication: quorum}\n",
			[]string{"policies.api.tiers.free.replication:", `want async or sync, got "quorum"`}, ""},
		{"sync replication of a leased layer", "policies:\n  api:\n    tiers:\n      free: {limit: 10, per: 1s, lease: true, replication: sync}\n",
			[]string{"policies.api.tiers.free.replication: sync cannot be leased"}, ""},
		{"bad key", "policies:\n  api:\n    tiers:\n      free: {limit: 10, per: 1s, key: cookie}\n",
			[]string{"policies.api.tiers.free.key:", `got "cookie"`}, ""},
		{"prelimit 0.5 on the policy", "policies:\n  api:\n    prelimit: 0.5\n    tiers:\n" + okTier,
			[]string{"policies.api.prelimit: must be 0 (off) or between 1 and 1000, got 0.5"}, ""},
		{"prelimit 0.5 on a tier", "policies:\n  api:\n    tiers:\n      free: {limit: 10, per: 1s, prelimit: 0.5}\n",
			[]string{"policies.api.tiers.free.prelimit:", "got 0.5"}, ""},
		{"prelimit negative", "policies:\n  api:\n    prelimit: -2\n    tiers:\n" + okTier,
			[]string{"policies.api.prelimit:"}, ""},
		// forward.ValidateChecks refuses a prelimit that is not 0 or in
		// [1, 1000]: a policy that carries one would turn every request
		// into a 400.
		{"prelimit NaN", "policies:\n  api:\n    prelimit: .nan\n    tiers:\n" + okTier,
			[]string{"policies.api.prelimit:"}, ""},
		{"prelimit +Inf", "policies:\n  api:\n    prelimit: .inf\n    tiers:\n" + okTier,
			[]string{"policies.api.prelimit:"}, ""},
		{"prelimit above 1000", "policies:\n  api:\n    prelimit: 1001\n    tiers:\n" + okTier,
			[]string{"policies.api.prelimit:"}, ""},
		{"prelimit NaN on a tier", "policies:\n  api:\n    tiers:\n      free: {limit: 10, per: 1s, prelimit: .nan}\n",
			[]string{"policies.api.tiers.free.prelimit:"}, ""},
		{"empty file", "", []string{"bad.yaml: empty file"}, ""},
		{"comments only", "# nothing here\n", []string{"bad.yaml: empty file"}, ""},
		{"no policies (absent)", "version: x\n", []string{"bad.yaml: policies: at least one policy is required"}, ""},
		{"no policies (empty map)", "policies: {}\n", []string{"policies: at least one policy is required"}, ""},
		{"no policies (null document)", "---\n", []string{"policies: at least one policy is required"}, ""},
		{"policy with nothing", "policies:\n  api: {}\n", []string{"policies.api.tiers: a policy needs at least one tier"}, ""},
		{"over 1 MiB", big, []string{"bad.yaml: larger than 1048576 bytes"}, ""},
		{"bad policy name", "policies:\n  \"a b\":\n    tiers:\n" + okTier, []string{"policies.a b.name:"}, ""},
		{"bad policy name with separator", "policies:\n  \"a|b\":\n    tiers:\n" + okTier, []string{"policies.a|b.name:"}, ""},
		{"empty policy name", "policies:\n  \"\":\n    tiers:\n" + okTier, []string{"policies..name:", "1 to 64 characters"}, ""},
		{"policy name too long", "policies:\n  " + strings.Repeat("p", 65) + ":\n    tiers:\n" + okTier,
			[]string{"policies." + strings.Repeat("p", 65) + ".name:", "1 to 64 characters"}, ""},
		{"bad tier name", "policies:\n  api:\n    tiers:\n      \"fr|ee\": {limit: 10, per: 1s}\n", []string{"policies.api.tiers.fr|ee:"}, ""},
		{"bad tier name unicode", "policies:\n  api:\n    tiers:\n      \"frée\": {limit: 10, per: 1s}\n", []string{"policies.api.tiers.frée:"}, ""},
		{"empty tier name", "policies:\n  api:\n    tiers:\n      \"\": {limit: 10, per: 1s}\n", []string{"policies.api.tiers.:", "1 to 64"}, ""},
		{"second YAML document", "policies:\n  api:\n    tiers:\n" + okTier + "---\nthis: [is not even valid\n",
			[]string{"one YAML document"}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			set, err := Parse([]byte(c.yaml), "bad.yaml")
			if err == nil {
				t.Fatalf("%s: got a set (version %s), want an error containing %q", c.name, set.Version, c.wants)
			}
			if set != nil {
				t.Errorf("%s: got set %v with the error, want nil", c.name, set)
			}
			wantErrContains(t, c.name, err, append([]string{"policy: "}, c.wants...)...)
		})
	}
}

func TestParseAccepts(t *testing.T) {
	cases := []struct {
		name    string
		yaml    string
		check   func(t *testing.T, s *Set)
		wantDef string
	}{
		{"file of exactly 1 MiB", "policies:\n  api:\n    tiers:\n" + okTier, nil, "api"},
		{"several policies, one default", "policies:\n  default:\n    tiers:\n" + okTier + "  other:\n    tiers:\n" + okTier, nil, "default"},
		{"several policies, no default", "policies:\n  a:\n    tiers:\n" + okTier + "  b:\n    tiers:\n" + okTier, nil, ""},
		{"window algorithm ignores burst", "policies:\n  api:\n    tiers:\n      free: {algorithm: sliding_window_log, limit: 7, per: 1m, burst: 99}\n",
			func(t *testing.T, s *Set) {
				equal(t, "window", "limit", s.Policies["api"].Tiers["free"].Limit, lim(t, "sliding_window_log", 7, time.Minute, 0))
			}, "api"},
		{"every algorithm, failure mode and key", `policies:
  api:
    tiers:
      a: {algorithm: token_bucket, limit: 1, per: 1s, failure_mode: local, key: identity}
      b: {algorithm: leaky_bucket, limit: 2, per: 1s, burst: 4, failure_mode: fail_open, key: ip}
      c: {algorithm: fixed_window, limit: 3, per: 1s, failure_mode: fail_closed}
      d: {algorithm: sliding_window_log, limit: 4, per: 1s}
      e: {algorithm: sliding_window_counter, limit: 5, per: 1s}
    routes:
      - {match: /a, limit: {limit: 1, per: 1s, key: ip+route}}
      - {match: /b/*, limit: {limit: 1, per: 1s, key: identity+route}}
`, func(t *testing.T, s *Set) {
			p := s.Policies["api"]
			if r := p.Routes[0].Layer; r.KeyBy != ByIPRoute || r.route != "/a" {
				t.Errorf("route /a: key %v pattern %q, want ip+route on /a", r.KeyBy, r.route)
			}
			if r := p.Routes[1].Layer; r.KeyBy != ByIdentityRoute || r.route != "/b/*" {
				t.Errorf("route /b/*: key %v pattern %q, want identity+route on /b/*", r.KeyBy, r.route)
			}
			want := map[string]*Layer{
				"a": {Scope: "tier:a", Limit: lim(t, "token_bucket", 1, time.Second, 0), FailureMode: bucket.Local, KeyBy: ByIdentity},
				"b": {Scope: "tier:b", Limit: lim(t, "leaky_bucket", 2, time.Second, 4), FailureMode: bucket.FailOpen, KeyBy: ByIP},
				"c": {Scope: "tier:c", Limit: lim(t, "fixed_window", 3, time.Second, 0), FailureMode: bucket.FailClosed, KeyBy: ByIdentity},
				"d": {Scope: "tier:d", Limit: lim(t, "sliding_window_log", 4, time.Second, 0), KeyBy: ByIdentity},
				"e": {Scope: "tier:e", Limit: lim(t, "sliding_window_counter", 5, time.Second, 0), KeyBy: ByIdentity},
			}
			equal(t, "every algorithm", "tiers", p.Tiers, want)
		}, "api"},
		{"replication: sync on a tier and a route, async and absent elsewhere", `policies:
  api:
    tiers:
      a: {limit: 1, per: 1s, replication: sync}
      b: {limit: 1, per: 1s, replication: async}
      c: {limit: 1, per: 1s}
    routes:
      - {match: /pay, limit: {limit: 1, per: 1s, replication: sync}}
`, func(t *testing.T, s *Set) {
			p := s.Policies["api"]
			got := map[string]bool{"a": p.Tiers["a"].Sync, "b": p.Tiers["b"].Sync, "c": p.Tiers["c"].Sync, "/pay": p.Routes[0].Layer.Sync}
			equal(t, "replication", "sync", got, map[string]bool{"a": true, "b": false, "c": false, "/pay": true})
			checks, err := p.Resolve(Request{User: "u", Route: "/pay", Tier: "a"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(checks) != 2 {
				t.Fatalf("Resolve: %d checks, want the route's and the tier's", len(checks))
			}
			for _, c := range checks {
				if !c.Sync {
					t.Errorf("Resolve: %s check without Sync", c.Scope)
				}
			}
		}, "api"},
		{"dry_run and prelimit: policy default, layer overrides", `policies:
  api:
    dry_run: true
    prelimit: 3
    tiers:
      a: {limit: 1, per: 1s}
      b: {limit: 1, per: 1s, dry_run: false, prelimit: 0}
      c: {limit: 1, per: 1s, prelimit: 1000}
`, func(t *testing.T, s *Set) {
			p := s.Policies["api"]
			for _, c := range []struct {
				tier     string
				dry      bool
				prelimit float64
			}{{"a", true, 3}, {"b", false, 0}, {"c", true, 1000}} {
				l := p.Tiers[c.tier]
				if l.DryRun != c.dry || l.Prelimit != c.prelimit {
					t.Errorf("tier %s: got dry_run %v prelimit %v, want %v %v", c.tier, l.DryRun, l.Prelimit, c.dry, c.prelimit)
				}
			}
		}, "api"},
		{"route dry_run, its limit can say otherwise", `policies:
  api:
    routes:
      - {match: /a, dry_run: true, limit: {limit: 1, per: 1s}}
      - {match: /b, dry_run: true, limit: {limit: 1, per: 1s, dry_run: false}}
`, func(t *testing.T, s *Set) {
			for _, r := range s.Policies["api"].Routes {
				if want := r.Match == "/a"; r.Layer.DryRun != want {
					t.Errorf("route %s: got dry_run %v, want %v", r.Match, r.Layer.DryRun, want)
				}
			}
		}, "api"},
		{"route order: exact, then longer prefix", `policies:
  api:
    routes:
      - {match: /a/*, cost: 1}
      - {match: /*, cost: 1}
      - {match: /a/b/*, cost: 1}
      - {match: /a/b/c, cost: 1}
      - {match: /z, cost: 1}
    global: {limit: 10, per: 1s}
`, func(t *testing.T, s *Set) {
			var got []string
			for _, r := range s.Policies["api"].Routes {
				got = append(got, r.Match)
			}
			equal(t, "route order", "matches", got, []string{"/a/b/c", "/z", "/a/b/*", "/a/*", "/*"})
		}, "api"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			data := []byte(c.yaml)
			if c.name == "file of exactly 1 MiB" {
				pad := MaxFileBytes - len(data) - 1
				data = append(data, '#')
				data = append(data, strings.Repeat("x", pad-1)...)
				data = append(data, '\n')
				if len(data) != MaxFileBytes {
					t.Fatalf("padding: %d bytes, want %d", len(data), MaxFileBytes)
				}
			}
			s := parseOK(t, c.name, data)
			equal(t, c.name, "Default", s.Default, c.wantDef)
			if c.check != nil {
				c.check(t, s)
			}
		})
	}
}

func TestParseErrorIsNotRequestError(t *testing.T) {
	_, err := Parse([]byte("policies: {}\n"), "x.yaml")
	if err == nil || errors.Is(err, ErrRequest) {
		t.Errorf("bad file: got %v, want an error that is not ErrRequest", err)
	}
}
