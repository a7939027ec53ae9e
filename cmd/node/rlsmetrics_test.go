package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
	"github.com/ringlimit/ringlimit/node"
)

// rlsMetricsConfig counts per day, so that no window ends during a test.
const rlsMetricsConfig = `domain: shop
descriptors:
  - key: user_id
    rate_limit: {unit: day, requests_per_unit: 3}
  - key: tenant
    detailed_metric: true
    rate_limit: {unit: day, requests_per_unit: 2}
  - key: trial
    shadow_mode: true
    rate_limit: {unit: day, requests_per_unit: 2}
`

// rlsCodes sends n requests of one descriptor to c and lists the overall
// codes.
func rlsCodes(t *testing.T, c rlsv3.RateLimitServiceClient, n int, d *rlcommon.RateLimitDescriptor) string {
	t.Helper()
	var out []string
	for i := range n {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		r, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "shop", Descriptors: []*rlcommon.RateLimitDescriptor{d}})
		cancel()
		if err != nil {
			t.Fatalf("request %d of %v: %v", i+1, d, err)
		}
		out = append(out, r.GetOverallCode().String())
	}
	return strings.Join(out, " ")
}

// rlsCounters reads the per-descriptor counters of key in domain shop on
// addr as total/within/near/over/shadow.
func (h *harness) rlsCounters(addr, key string) string {
	h.t.Helper()
	var out []string
	for _, stat := range []string{"total_hits", "within_limit", "near_limit", "over_limit", "shadow_mode"} {
		out = append(out, fmt.Sprint(h.metric(addr, "ringlimit_rls_"+stat+"_total", fmt.Sprintf(`{domain="shop",key=%q}`, key))))
	}
	return strings.Join(out, "/")
}

// TestRLSMetrics drives the rate limit service of two nodes over gRPC
// and reads the per-descriptor counters from their /metrics: exact counts
// as envoyproxy/ratelimit counts them, hits_addend, detailed_metric, the
// global shadow mode on one node (every answer OK, the shared bucket
// spent) and the cap on keys against 5,000 distinct values.
func TestRLSMetrics(t *testing.T) {
	h := newHarness(t)
	conf := filepath.Join(t.TempDir(), "shop.yaml")
	if err := os.WriteFile(conf, []byte(rlsMetricsConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	const maxKeys = 50
	n1, logs := h.startArgs("n1", "--rls-config", conf, "--rls-stats-keys", fmt.Sprint(maxKeys))
	n2, _ := h.startArgs("n2", "--rls-config", conf, "--rls-shadow-mode", "--join", n1.Cluster().LocalAddr())
	h.waitRing([]*node.Node{n1, n2}, []string{"n1", "n2"}, 10*time.Second)
	cs := rlsClients(t, []string{n1.GRPCAddr(), n2.GRPCAddr()})
	normal, shadow := cs[0], cs[1]
	a1, a2 := httpAddr(n1), httpAddr(n2)

	// Limit 3, near threshold floor(3 × 0.8) = 2: the 3rd hit is near,
	// the 4th and 5th over.
	if got := rlsCodes(t, normal, 5, desc("user_id", "alice")); got != "OK OK OK OVER_LIMIT OVER_LIMIT" {
		t.Fatalf("alice: %s", got)
	}
	if got := h.rlsCounters(a1, "user_id"); got != "5/3/1/2/0" {
		t.Fatalf("user_id after alice: total/within/near/over/shadow %s, want 5/3/1/2/0", got)
	}
	// hits_addend 2 counts 2: within (the count reaches 2, not past
	// it); then 2 more are refused: one near, one over.
	bob := desc("user_id", "bob")
	bob.HitsAddend = wrapperspb.UInt64(2)
	if got := rlsCodes(t, normal, 2, bob); got != "OK OVER_LIMIT" {
		t.Fatalf("bob, hits 2: %s", got)
	}
	if got := h.rlsCounters(a1, "user_id"); got != "9/5/2/3/0" {
		t.Fatalf("user_id after bob: %s, want 9/5/2/3/0", got)
	}
	// detailed_metric: the value is in the key.
	if got := rlsCodes(t, normal, 3, desc("tenant", "t1")); got != "OK OK OVER_LIMIT" {
		t.Fatalf("tenant t1: %s", got)
	}
	if got := h.rlsCounters(a1, "tenant_t1"); got != "3/2/1/1/0" {
		t.Fatalf("tenant_t1: %s, want 3/2/1/1/0", got)
	}
	if got := h.rlsCounters(a1, "tenant"); got != "0/0/0/0/0" {
		t.Fatalf("tenant without its value: %s, want nothing", got)
	}
	// A rule's shadow_mode: OK, counted over and shadow.
	if got := rlsCodes(t, normal, 3, desc("trial", "x")); got != "OK OK OK" {
		t.Fatalf("trial: %s", got)
	}
	if got := h.rlsCounters(a1, "trial"); got != "3/2/1/1/1" {
		t.Fatalf("trial: %s, want 3/2/1/1/1", got)
	}

	// The global shadow mode on n2: every answer OK, the over-limit hits
	// counted over and shadow, and once per answer it turned OK.
	if got := rlsCodes(t, shadow, 5, desc("user_id", "carol")); got != "OK OK OK OK OK" {
		t.Fatalf("carol through the shadow node: %s", got)
	}
	if got := h.rlsCounters(a2, "user_id"); got != "5/3/1/2/2" {
		t.Fatalf("user_id on the shadow node: %s, want 5/3/1/2/2", got)
	}
	if got := h.metric(a2, "ringlimit_rls_global_shadow_mode_total", ""); got != 2 {
		t.Fatalf("ringlimit_rls_global_shadow_mode_total %v, want 2", got)
	}
	if got := h.metric(a1, "ringlimit_rls_global_shadow_mode_total", ""); got != 0 {
		t.Fatalf("ringlimit_rls_global_shadow_mode_total %v on the node without the switch", got)
	}
	// The bucket was spent: the other node refuses carol.
	if got := rlsCodes(t, normal, 1, desc("user_id", "carol")); got != "OVER_LIMIT" {
		t.Fatalf("carol through the normal node after the shadow node: %s, want OVER_LIMIT", got)
	}

	// 5,000 distinct tenants: user_id, tenant_t1 and trial have their
	// series, 47 more tenants get one, the rest go to "_other".
	const values = 5000
	for i := range values {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := normal.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "shop", Descriptors: []*rlcommon.RateLimitDescriptor{desc("tenant", fmt.Sprintf("v%d", i))}})
		cancel()
		if err != nil {
			t.Fatalf("tenant %d: %v", i, err)
		}
	}
	folded := values - (maxKeys - 3)
	for _, stat := range []string{"total_hits", "within_limit", "near_limit", "over_limit", "shadow_mode"} {
		m, err := testkit.Scrape(h.client, a1, "ringlimit_rls_"+stat+"_total")
		if err != nil {
			t.Fatal(err)
		}
		if len(m) != maxKeys+1 {
			t.Errorf("ringlimit_rls_%s_total: %d series, want %d", stat, len(m), maxKeys+1)
		}
	}
	if got := h.rlsCounters(a1, "_other"); got != fmt.Sprintf("%d/%d/0/0/0", folded, folded) {
		t.Fatalf("_other: %s, want %d within", got, folded)
	}
	if got := h.metric(a1, "ringlimit_rls_stat_keys", ""); got != maxKeys {
		t.Fatalf("ringlimit_rls_stat_keys %v, want %d", got, maxKeys)
	}
	if got := h.metric(a1, "ringlimit_rls_stat_keys_folded_total", ""); got != float64(folded) {
		t.Fatalf("ringlimit_rls_stat_keys_folded_total %v, want %d", got, folded)
	}
	if n := len(logs.Records(`rls statistics: --rls-stats-keys keys have their own series; the others are counted under key="_other"`)); n != 1 {
		t.Fatalf("the cap logged %d times, want once", n)
	}
	// A key counted before the cap keeps its own series.
	if got := rlsCodes(t, normal, 1, desc("tenant", "t1")); got != "OVER_LIMIT" {
		t.Fatalf("tenant t1 again: %s", got)
	}
	if got := h.rlsCounters(a1, "tenant_t1"); got != "4/2/1/2/0" {
		t.Fatalf("tenant_t1 after the cap: %s, want 4/2/1/2/0", got)
	}
}

// TestRLSMetricsFlags: the three flags, their defaults, their environment
// variables, and their errors.
func TestRLSMetricsFlags(t *testing.T) {
	var out strings.Builder
	none := func(string) string { return "" }
	c, err := parseConfig(nil, none, &out)
	if err != nil || c.RLSShadowMode || c.RLSStatKeys != 1000 || c.RLSNearLimitRatio != 0.8 {
		t.Fatalf("defaults: %v, shadow %v, keys %d, ratio %v; want false, 1000, 0.8", err, c.RLSShadowMode, c.RLSStatKeys, c.RLSNearLimitRatio)
	}
	env := map[string]string{"RINGLIMIT_RLS_SHADOW_MODE": "true", "RINGLIMIT_RLS_STATS_KEYS": "0", "RINGLIMIT_RLS_NEAR_LIMIT_RATIO": "0.5"}
	c, err = parseConfig(nil, func(k string) string { return env[k] }, &out)
	if err != nil || !c.RLSShadowMode || c.RLSStatKeys != 0 || c.RLSNearLimitRatio != 0.5 {
		t.Fatalf("from the environment: %v, shadow %v, keys %d, ratio %v; want true, 0, 0.5", err, c.RLSShadowMode, c.RLSStatKeys, c.RLSNearLimitRatio)
	}
	for _, st := range []struct {
		args []string
		want string
	}{
		{[]string{"--rls-stats-keys", "-1"}, "--rls-stats-keys: must not be negative, got -1"},
		{[]string{"--rls-near-limit-ratio", "0"}, "--rls-near-limit-ratio: must be above 0 and at most 1, got 0"},
		{[]string{"--rls-near-limit-ratio", "1.5"}, "--rls-near-limit-ratio: must be above 0 and at most 1, got 1.5"},
		{[]string{"--rls-near-limit-ratio", "NaN"}, "--rls-near-limit-ratio: must be above 0 and at most 1, got NaN"},
	} {
		if _, err := parseConfig(st.args, none, &out); err == nil || err.Error() != st.want {
			t.Errorf("parseConfig(%q) = %v, want %q", st.args, err, st.want)
		}
	}
}
