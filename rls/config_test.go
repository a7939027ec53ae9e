package rls

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

func parseOne(src string) (*Config, error) {
	return Parse([]File{{Name: "f.yaml", Data: []byte(strings.TrimPrefix(src, "\n"))}})
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, src, want string
	}{
		{"empty file", ``, `rls: f.yaml:1: config file cannot have empty domain`},
		{"no domain", `
descriptors: []
`, `rls: f.yaml:1: config file cannot have empty domain`},
		{"empty domain", `
domain: ""
`, `rls: f.yaml:1: config file cannot have empty domain`},
		{"unknown key", `
domain: d
descriptors:
  - key: a
    rate_limti: {unit: second}
`, `rls: f.yaml:4: unknown field "rate_limti" in descriptor (did you mean "rate_limit"?)`},
		{"misspelt descriptors", `
domain: d
descriptor:
  - key: a
`, `rls: f.yaml:2: unknown field "descriptor" in the file (did you mean "descriptors"?)`},
		{"misspelt rate_limit field", `
domain: d
descriptors:
  - key: a
    rate_limit: {unit: second, request_per_unit: 5}
`, `rls: f.yaml:4: unknown field "request_per_unit" in rate_limit (did you mean "requests_per_unit"?)`},
		{"unknown key at the top", `
domain: d
version: 2
`, `rls: f.yaml:2: unknown field "version" in the file (fields: domain, descriptors)`},
		{"Envoy's own configuration", `
static_resources:
  listeners: []
`, `rls: f.yaml:1: unknown field "static_resources" in the file (this is Envoy's own configuration, not a rate limit configuration: keep it out of the rate limit configuration's directory)`},
		{"empty key", `
domain: d
descriptors:
  - key: a
  - value: b
`, `rls: f.yaml:4: descriptor has empty key`},
		{"duplicate composite key", `
domain: d
descriptors:
  - key: a
    value: b
  - key: a
    value: b
`, `rls: f.yaml:5: duplicate descriptor composite key "d.a_b"`},
		{"duplicate nested key", `
domain: d
descriptors:
  - key: a
    descriptors:
      - key: b
      - key: b
`, `rls: f.yaml:6: duplicate descriptor composite key "d.a.b"`},
		{"invalid unit", `
domain: d
descriptors:
  - key: a
    rate_limit:
      unit: fortnight
      requests_per_unit: 1
`, `rls: f.yaml:5: invalid rate limit unit "fortnight"`},
		{"no unit", `
domain: d
descriptors:
  - key: a
    rate_limit:
      requests_per_unit: 1
`, `rls: f.yaml:5: invalid rate limit unit ""`},
		{"unit UNKNOWN", `
domain: d
descriptors:
  - key: a
    rate_limit: {unit: unknown}
`, `rls: f.yaml:4: invalid rate limit unit "unknown"`},
		{"unit with unlimited", `
domain: d
descriptors:
  - key: a
    rate_limit:
      unlimited: true
      unit: second
`, `rls: f.yaml:6: should not specify rate limit unit when unlimited`},
		{"empty replaces name", `
domain: d
descriptors:
  - key: a
    rate_limit:
      unit: second
      name: mine
      replaces:
        - name: other
        - name: ""
`, `rls: f.yaml:9: should not have an empty replaces entry`},
		{"replaces its own name", `
domain: d
descriptors:
  - key: a
    rate_limit:
      unit: second
      name: mine
      replaces: [{name: mine}]
`, `rls: f.yaml:7: replaces should not contain name of same descriptor`},
		{"negative count", `
domain: d
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: -1}
`, `rls: f.yaml:4: requests_per_unit must be between 0 and 4294967295, got -1`},
		{"count beyond uint32", `
domain: d
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 4294967296}
`, `rls: f.yaml:4: requests_per_unit must be between 0 and 4294967295, got 4294967296`},
		{"count beyond bucket.MaxCount", `
domain: d
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 3000000000, algorithm: token_bucket}
`, `rls: f.yaml:4: requests_per_unit: must be at most 2147483647 with token_bucket, got 3000000000`},
		{"count as a string", `
domain: d
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: ten}
`, `rls: f.yaml:4: requests_per_unit must be a whole number, got !!str "ten"`},
		{"count as a decimal", `
domain: d
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 1.5}
`, `rls: f.yaml:4: requests_per_unit must be a whole number, got !!float "1.5"`},
		{"unknown algorithm", `
domain: d
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 1, algorithm: gcra}
`, `rls: f.yaml:4: algorithm: unknown algorithm "gcra" (want one of token_bucket, leaky_bucket, fixed_window, sliding_window_log, sliding_window_counter, concurrency)`},
		{"sliding window log too large", `
domain: d
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 200000, algorithm: sliding_window_log}
`, `rls: f.yaml:4: requests_per_unit: must be at most 100000 with sliding_window_log, got 200000`},
		{"log too large, at the count's line", `
domain: d
descriptors:
  - key: a
    rate_limit:
      algorithm: sliding_window_log
      unit: minute
      requests_per_unit: 200000
`, `rls: f.yaml:7: requests_per_unit: must be at most 100000 with sliding_window_log, got 200000`},
		{"unknown algorithm, at its line", `
domain: d
descriptors:
  - key: a
    rate_limit:
      unit: minute
      requests_per_unit: 0
      algorithm: gcra
`, `rls: f.yaml:7: algorithm: unknown algorithm "gcra" (want one of token_bucket, leaky_bucket, fixed_window, sliding_window_log, sliding_window_counter, concurrency)`},
		{"boolean of another type", `
domain: d
descriptors:
  - key: a
    shadow_mode: maybe
`, `rls: f.yaml:4: shadow_mode must be true or false, got !!str "maybe"`},
		{"key of another type", `
domain: d
descriptors:
  - key: [a]
`, `rls: f.yaml:3: key must be a string, got a list`},
		{"domain as a decimal", `
domain: 1.5
`, `rls: f.yaml:1: domain must be a string, got !!float "1.5"`},
		{"descriptors not a list", `
domain: d
descriptors: a
`, `rls: f.yaml:2: descriptors must be a list, got !!str "a"`},
		{"descriptor not a mapping", `
domain: d
descriptors: [a]
`, `rls: f.yaml:2: a descriptor must be a mapping, got !!str "a"`},
		{"rate_limit not a mapping", `
domain: d
descriptors:
  - key: a
    rate_limit: 5
`, `rls: f.yaml:4: rate_limit must be a mapping, got !!int "5"`},
		{"file not a mapping", `
- domain: d
`, `rls: f.yaml:1: the file must be a mapping, got a list`},
		{"share_threshold without a wildcard", `
domain: d
descriptors:
  - key: a
    value: b
    share_threshold: true
`, `rls: f.yaml:3: share_threshold can only be used with wildcard values (ending with '*'), but found key "a_b"`},
		{"quota_mode of another type", `
domain: d
descriptors:
  - key: a
    quota_mode: 1
`, `rls: f.yaml:4: quota_mode must be true or false, got !!int "1"`},
		{"misplaced key holding a float", `
domain: d
descriptors:
  - key: a
    unit: 1.5
`, `rls: f.yaml:4: unexpected !!float "1.5"`},
		{"misplaced list of scalars", `
domain: d
descriptors:
  - key: a
    rate_limit:
      unit: second
      descriptors: [x]
`, `rls: f.yaml:6: a list may hold only mappings, got !!str "x"`},
		{"repeated key", `
domain: d
descriptors:
  - key: a
    key: b
`, `rls: f.yaml:4: key "key" repeated (first at line 3)`},
		{"key not a string", `
domain: d
1: x
`, `rls: f.yaml:2: key is not a string: !!int "1"`},
		{"merge key", `
domain: d
defaults: &defaults {unit: second}
`, `rls: f.yaml:2: unknown field "defaults" in the file (fields: domain, descriptors)`},
		{"merge", `
domain: d
descriptors:
  - key: a
    rate_limit:
      <<: {unit: second}
`, `rls: f.yaml:5: YAML merge keys (<<) are not supported`},
		{"descriptors nested in themselves", `
domain: d
descriptors: &all
  - key: k
    descriptors: *all
`, `rls: f.yaml:3: nested more than 64 levels deep`},
		{"a value holding itself", `
domain: d
unit: &x {unit: *x}
`, `rls: f.yaml:2: nested more than 64 levels deep`},
		{"aliases expanding too far", laughs(), `rls: f.yaml:4: more than 1048576 YAML nodes (aliases expand too far)`},
		{"second document", `
domain: d
---
domain: e
`, `rls: f.yaml:3: a second YAML document; a file holds one domain`},
		{"YAML syntax", `
domain: [d
`, `rls: f.yaml: yaml: line 1: did not find expected ',' or ']'`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseOne(tt.src)
			if err == nil || err.Error() != tt.want || c != nil {
				t.Errorf("Parse:\n%s\n= %v, %v\nwant error %s", tt.src, c, err, tt.want)
			}
		})
	}
}

func TestParseDuplicateDomain(t *testing.T) {
	_, err := Parse([]File{
		{Name: "a.yaml", Data: []byte("domain: d\n")},
		{Name: "b.yaml", Data: []byte("# the same domain again\ndomain: d\n")},
	})
	want := `rls: b.yaml:2: duplicate domain "d" in config file (first in a.yaml)`
	if err == nil || err.Error() != want {
		t.Errorf("Parse = %v, want %s", err, want)
	}
}

// TestParseAccepts covers what envoyproxy/ratelimit accepts and ringlimit
// accepts too, though it may ignore it.
func TestParseAccepts(t *testing.T) {
	c, err := parseOne(`
domain: d
descriptors:
  - key: code
    value: 200
    detailed_metric: yes
    rate_limit: &limit {unit: Minute, requests_per_unit: 3}
  - key: free
    rate_limit: {unlimited: true, unit: fortnight}
  - key: user
    value: "team-*"
    share_threshold: true
    value_to_metric: true
    quota_mode: false
    unit: second
    rate_limit: *limit
  - key: empty
    rate_limit:
  - key: nested
    descriptors:
`)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		d    []string
		want Rule
	}{
		{[]string{"code", "200"}, Rule{FullKey: "d.code_200", DetailedMetric: true, RequestsPerUnit: 3, Unit: minute}},
		{[]string{"free", "x"}, Rule{FullKey: "d.free", Unlimited: true}},
		{[]string{"user", "team-a"}, Rule{FullKey: "d.user_team-*", RequestsPerUnit: 3, Unit: minute}},
	} {
		got, ok := c.Match("d", desc(tt.d...))
		if !ok || got.FullKey != tt.want.FullKey || got.RequestsPerUnit != tt.want.RequestsPerUnit ||
			got.Unit != tt.want.Unit || got.Unlimited != tt.want.Unlimited || got.DetailedMetric != tt.want.DetailedMetric {
			t.Errorf("Match(%q) = %+v, %v; want %+v", tt.d, got, ok, tt.want)
		}
	}
	if _, ok := c.Match("d", desc("empty", "x")); ok {
		t.Errorf("a descriptor with a null rate_limit matched")
	}
	n := c.domains["d"].children["user_team-*"]
	if !n.shareThreshold || !n.valueToMetric || n.quotaMode {
		t.Errorf("recorded share_threshold, value_to_metric, quota_mode = %v, %v, %v; want true, true, false",
			n.shareThreshold, n.valueToMetric, n.quotaMode)
	}
	want := []string{
		"f.yaml:11: share_threshold is accepted and ignored by ringlimit",
		"f.yaml:12: value_to_metric is accepted and ignored by ringlimit",
		`f.yaml:14: key "unit" means nothing here; ignored`,
	}
	if got := c.Warnings(); !slices.Equal(got, want) {
		t.Errorf("Warnings() = %q, want %q", got, want)
	}
	if got := c.Domains(); !slices.Equal(got, []string{"d"}) {
		t.Errorf("Domains() = %q", got)
	}
	if r, _ := c.Match("d", desc("free", "x")); r.Unit != rlsv3.RateLimitResponse_RateLimit_UNKNOWN {
		t.Errorf("unlimited with an invalid unit: Unit = %v, want UNKNOWN", r.Unit)
	}
}

func TestVersion(t *testing.T) {
	files := []File{{Name: "a.yaml", Data: []byte("domain: a\n")}, {Name: "b.yaml", Data: []byte("domain: b\n")}}
	c, err := Parse(files)
	if err != nil {
		t.Fatal(err)
	}
	// The version is part of the contract between runs and nodes: a fixed
	// value, not only a stable one within this process.
	if got, want := c.Version(), "50fae8f21db5"; got != want {
		t.Errorf("Version() = %q, want %q", got, want)
	}
	if got := c.Domains(); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("Domains() = %q", got)
	}
	// The path the files were read by does not count: a relative path, an
	// absolute one, another mount point.
	for _, dir := range []string{"rls", "./config/rls", "/etc/ringlimit/rls"} {
		moved := []File{{Name: dir + "/a.yaml", Data: files[0].Data}, {Name: dir + "/b.yaml", Data: files[1].Data}}
		if v := version(moved); v != c.Version() {
			t.Errorf("version of the files under %s = %q, want %q", dir, v, c.Version())
		}
	}
	for _, other := range [][]File{
		{files[1], files[0]},
		{{Name: "a.yaml", Data: []byte("domain: a\n\n")}, files[1]},
		{{Name: "c.yaml", Data: files[0].Data}, files[1]},
		// Lengths are part of the hash: moving bytes from a name to its
		// contents changes the version.
		{{Name: "a.yam", Data: []byte("ldomain: a\n")}, files[1]},
	} {
		if v := version(other); v == c.Version() {
			t.Errorf("version(%q) = %q, the same as %q's", other, v, files)
		}
	}
}

// laughs is a file whose aliases expand to 10^8 descriptors.
func laughs() string {
	var b strings.Builder
	b.WriteString("domain: d\nunit:\n  - descriptors: &l0 [{key: a}]\n")
	for i := 1; i <= 8; i++ {
		fmt.Fprintf(&b, "  - descriptors: &l%d [", i)
		for j := range 10 {
			if j > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "{descriptors: *l%d}", i-1)
		}
		b.WriteString("]\n")
	}
	b.WriteString("descriptors: *l8\n")
	return b.String()
}
