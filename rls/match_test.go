package rls

import (
	"os"
	"slices"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/ringlimit/ringlimit/bucket"
)

const day = 24 * time.Hour

// messaging parses testdata/messaging.yaml.
func messaging(t testing.TB) *Config {
	t.Helper()
	data, err := os.ReadFile("testdata/messaging.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c, err := Parse([]File{{Name: "messaging.yaml", Data: data}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// desc builds a descriptor from key, value pairs.
func desc(kv ...string) *rlcommon.RateLimitDescriptor {
	d := &rlcommon.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func withOverride(d *rlcommon.RateLimitDescriptor, n uint32, u typev3.RateLimitUnit) *rlcommon.RateLimitDescriptor {
	d.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: n, Unit: u}
	return d
}

func key(domain string, kv ...string) string {
	var entries [][2]string
	for i := 0; i+1 < len(kv); i += 2 {
		entries = append(entries, [2]string{kv[i], kv[i+1]})
	}
	return BucketKey(domain, entries)
}

const (
	second = rlsv3.RateLimitResponse_RateLimit_SECOND
	minute = rlsv3.RateLimitResponse_RateLimit_MINUTE
	hour   = rlsv3.RateLimitResponse_RateLimit_HOUR
	perDay = rlsv3.RateLimitResponse_RateLimit_DAY
	week   = rlsv3.RateLimitResponse_RateLimit_WEEK
)

func fixed(n int64, per time.Duration) bucket.Limit {
	return bucket.MustLimit(bucket.FixedWindow, n, per, 0)
}

func TestMatch(t *testing.T) {
	c := messaging(t)
	tests := []struct {
		name   string
		domain string
		d      *rlcommon.RateLimitDescriptor
		want   Rule
		ok     bool
	}{
		{name: "nested by prefix", domain: "messaging", d: desc("message_type", "marketing", "to_number", "123"), ok: true, want: Rule{
			FullKey: "messaging.message_type_marketing.to_number", Key: key("messaging", "message_type", "marketing", "to_number", "123"),
			Limit: fixed(5, day), RequestsPerUnit: 5, Unit: perDay}},
		{name: "no limit short of the last level", domain: "messaging", d: desc("message_type", "marketing")},
		{name: "limit at an inner level", domain: "messaging", d: desc("message_type", "alerts"), ok: true, want: Rule{
			FullKey: "messaging.message_type_alerts", Key: key("messaging", "message_type", "alerts"),
			Limit: fixed(50, time.Hour), RequestsPerUnit: 50, Unit: hour}},
		{name: "the last entry's limit, not the first's", domain: "messaging", d: desc("message_type", "alerts", "to_number", "1"), ok: true, want: Rule{
			FullKey: "messaging.message_type_alerts.to_number", Key: key("messaging", "message_type", "alerts", "to_number", "1"),
			Limit: fixed(2, time.Minute), RequestsPerUnit: 2, Unit: minute}},
		{name: "request deeper than the configuration", domain: "messaging", d: desc("message_type", "alerts", "to_number", "1", "extra", "x")},
		{name: "request deeper than a leaf", domain: "messaging", d: desc("to_number", "1", "extra", "x")},
		{name: "configuration deeper than the request", domain: "messaging", d: desc("tenant", "t1")},
		{name: "nested value", domain: "messaging", d: desc("tenant", "t1", "plan", "free"), ok: true, want: Rule{
			FullKey: "messaging.tenant.plan_free", Key: key("messaging", "tenant", "t1", "plan", "free"),
			Limit: fixed(7, 7*day), RequestsPerUnit: 7, Unit: week}},
		{name: "nested value not configured", domain: "messaging", d: desc("tenant", "t1", "plan", "pro")},
		{name: "value before key alone", domain: "messaging", d: desc("to_number", "2061111111"), ok: true, want: Rule{
			FullKey: "messaging.to_number_2061111111", Key: key("messaging", "to_number", "2061111111"),
			Limit: fixed(1000, day), RequestsPerUnit: 1000, Unit: perDay, Name: "vip", Replaces: []string{"standard"}}},
		{name: "key alone", domain: "messaging", d: desc("to_number", "999"), ok: true, want: Rule{
			FullKey: "messaging.to_number", Key: key("messaging", "to_number", "999"),
			Limit: fixed(100, day), RequestsPerUnit: 100, Unit: perDay}},
		{name: "no rule for the value nor the key", domain: "messaging", d: desc("message_type", "other")},
		{name: "unknown key", domain: "messaging", d: desc("nope", "x")},
		{name: "algorithm extension", domain: "messaging", d: desc("database", "users"), ok: true, want: Rule{
			FullKey: "messaging.database_users", Key: key("messaging", "database", "users"),
			Limit: bucket.MustLimit(bucket.TokenBucket, 500, time.Second, 0), RequestsPerUnit: 500, Unit: second}},
		{name: "unlimited", domain: "messaging", d: desc("database", "reports"), ok: true, want: Rule{
			FullKey: "messaging.database_reports", Key: key("messaging", "database", "reports"), Unlimited: true}},
		{name: "first wildcard in file order", domain: "messaging", d: desc("path", "/api/v2/users"), ok: true, want: Rule{
			FullKey: "messaging.path_/api/*", Key: key("messaging", "path", "/api/v2/users"),
			Limit: fixed(30, time.Minute), RequestsPerUnit: 30, Unit: minute}},
		{name: "wildcard matches its bare prefix", domain: "messaging", d: desc("path", "/api/"), ok: true, want: Rule{
			FullKey: "messaging.path_/api/*", Key: key("messaging", "path", "/api/"),
			Limit: fixed(30, time.Minute), RequestsPerUnit: 30, Unit: minute}},
		{name: "no wildcard fits: key alone", domain: "messaging", d: desc("path", "/health"), ok: true, want: Rule{
			FullKey: "messaging.path", Key: key("messaging", "path", "/health"),
			Limit: fixed(1000, time.Minute), RequestsPerUnit: 1000, Unit: minute}},
		{name: "shadow and detailed metric", domain: "messaging", d: desc("client", "abc"), ok: true, want: Rule{
			FullKey: "messaging.client_abc", Key: key("messaging", "client", "abc"),
			Limit: bucket.MustLimit(bucket.SlidingWindowCounter, 10, time.Second, 0), RequestsPerUnit: 10, Unit: second,
			Shadow: true, DetailedMetric: true}},
		{name: "zero requests per unit", domain: "messaging", d: desc("blocked", "x"), ok: true, want: Rule{
			FullKey: "messaging.blocked", Key: key("messaging", "blocked", "x"), Unit: second}},
		{name: "unknown domain", domain: "email", d: desc("to_number", "999")},
		{name: "no entries", domain: "messaging", d: desc()},
		{name: "nil descriptor", domain: "messaging", d: nil},
		{name: "override", domain: "messaging", d: withOverride(desc("to_number", "999", "x", ""), 42, typev3.RateLimitUnit_MINUTE), ok: true, want: Rule{
			FullKey: "messaging.to_number_999.x", Key: "o|fw:42:1m0s:42|messaging|to_number=999|x=",
			Limit: fixed(42, time.Minute), RequestsPerUnit: 42, Unit: minute, Override: true}},
		{name: "override is never shadow", domain: "messaging", d: withOverride(desc("client", "abc"), 1, typev3.RateLimitUnit_SECOND), ok: true, want: Rule{
			FullKey: "messaging.client_abc", Key: "o|fw:1:1s:1|messaging|client=abc",
			Limit: fixed(1, time.Second), RequestsPerUnit: 1, Unit: second, Override: true}},
		{name: "override of zero", domain: "messaging", d: withOverride(desc("a", "b"), 0, typev3.RateLimitUnit_HOUR), ok: true, want: Rule{
			FullKey: "messaging.a_b", Unit: hour, Override: true}}, // never counted: no key
		{name: "override beyond bucket.MaxCount: enforced as answered", domain: "messaging", d: withOverride(desc("a", "b"), 1<<32-1, typev3.RateLimitUnit_HOUR), ok: true, want: Rule{
			FullKey: "messaging.a_b", Key: "o|fw:4294967295:1h0m0s:4294967295|messaging|a=b",
			Limit: fixed(bucket.MaxWindowCount, time.Hour), RequestsPerUnit: 1<<32 - 1, Unit: hour, Override: true}},
		{name: "route values normalised", domain: "messaging", d: desc("path", "//api/v2/./x;y=1"), ok: true, want: Rule{
			FullKey: "messaging.path_/api/*", Key: "r|messaging|path=/api/v2/x",
			Limit: fixed(30, time.Minute), RequestsPerUnit: 30, Unit: minute}},
		{name: "a route without its trailing slash is the wildcard's own path", domain: "messaging", d: desc("path", "//api//"), ok: true, want: Rule{
			FullKey: "messaging.path_/api/*", Key: "r|messaging|path=/api",
			Limit: fixed(30, time.Minute), RequestsPerUnit: 30, Unit: minute}},
		{name: "a route outside the wildcards: key alone", domain: "messaging", d: desc("path", "/a/../health/"), ok: true, want: Rule{
			FullKey: "messaging.path", Key: "r|messaging|path=/health",
			Limit: fixed(1000, time.Minute), RequestsPerUnit: 1000, Unit: minute}},
		{name: "escaped letters are the letters", domain: "messaging", d: desc("path", "/%61pi/x"), ok: true, want: Rule{
			FullKey: "messaging.path_/api/*", Key: "r|messaging|path=/api/x",
			Limit: fixed(30, time.Minute), RequestsPerUnit: 30, Unit: minute}},
		{name: "override with unit UNKNOWN", domain: "messaging", d: withOverride(desc("a", "b"), 5, typev3.RateLimitUnit_UNKNOWN)},
		{name: "override in an unknown domain", domain: "email", d: withOverride(desc("a", "b"), 5, typev3.RateLimitUnit_HOUR)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := c.Match(tt.domain, tt.d)
			if ok != tt.ok || !equalRule(got, tt.want) {
				t.Errorf("Match(%q, %v) =\n\t%+v, %v\nwant\n\t%+v, %v", tt.domain, tt.d, got, ok, tt.want, tt.ok)
			}
		})
	}
}

func equalRule(a, b Rule) bool {
	return a.FullKey == b.FullKey && a.Key == b.Key && a.Limit == b.Limit &&
		a.RequestsPerUnit == b.RequestsPerUnit && a.Unit == b.Unit && a.Unlimited == b.Unlimited &&
		a.Shadow == b.Shadow && a.Name == b.Name && slices.Equal(a.Replaces, b.Replaces) &&
		a.DetailedMetric == b.DetailedMetric && a.Override == b.Override
}

// TestMatchEdges covers the composite keys' quirks, which follow
// envoyproxy/ratelimit: key + "_" + value is looked up as one string.
func TestMatchEdges(t *testing.T) {
	c, err := Parse([]File{{Name: "edges.yaml", Data: []byte(`
domain: edges
descriptors:
  - key: a_b
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: any*
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: k
    value: "*"
    rate_limit: {unit: second, requests_per_unit: 3}
`)}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		d    *rlcommon.RateLimitDescriptor
		want string // FullKey; "" for no match
	}{
		{desc("a", "b"), "edges.a_b"},        // "a" + "_" + "b" is the key a_b
		{desc("a_b", "x"), "edges.a_b"},      // a_b alone
		{desc("anything", ""), "edges.any*"}, // a key wildcard
		{desc("k", ""), "edges.k_*"},         // "*" matches the empty value
		{desc("k", "v"), "edges.k_*"},
		{desc("a", "c"), ""},
	} {
		got, ok := c.Match("edges", tt.d)
		if got.FullKey != tt.want || ok != (tt.want != "") {
			t.Errorf("Match(%v) = %q, %v; want %q", tt.d, got.FullKey, ok, tt.want)
		}
	}
}

func TestBucketKeyOfEntries(t *testing.T) {
	for _, kv := range [][]string{
		{},
		{"a", "b"},
		{"a|b", "c=d", "e\\", ""},
		{"", "", "x", "y|"},
	} {
		d := desc(kv...)
		for _, domain := range []string{"", "dom", "d|o=m"} {
			if got, want := bucketKey(domain, d.Entries), key(domain, kv...); got != want {
				t.Errorf("bucketKey(%q, %q) = %q, want BucketKey's %q", domain, kv, got, want)
			}
		}
	}
}

func TestMatchAllocations(t *testing.T) {
	c := messaging(t)
	for _, d := range []*rlcommon.RateLimitDescriptor{
		desc("message_type", "marketing", "to_number", "123"),
		desc("path", "/api/v2/users"),
		desc("to_number", "999"),
	} {
		if n := testing.AllocsPerRun(100, func() { c.Match("messaging", d) }); n != 1 {
			t.Errorf("Match(%v): %v allocations, want 1 (the bucket key)", d, n)
		}
	}
}

func BenchmarkMatch(b *testing.B) {
	c := messaging(b)
	for _, bc := range []struct {
		name string
		d    *rlcommon.RateLimitDescriptor
	}{
		{"nested", desc("message_type", "marketing", "to_number", "123")},
		{"wildcard", desc("path", "/api/v2/users")},
		{"key_alone", desc("to_number", "999")},
		{"no_match", desc("message_type", "other")},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					c.Match("messaging", bc.d)
				}
			})
		})
	}
	// The baseline: the bucket key alone, which every match builds.
	b.Run("baseline_bucket_key", func(b *testing.B) {
		d := desc("message_type", "marketing", "to_number", "123")
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				bucketKey("messaging", d.Entries)
			}
		})
	})
}
