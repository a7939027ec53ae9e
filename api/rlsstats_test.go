package api

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
	"github.com/ringlimit/ringlimit/rls"
)

// TestTallyRLS: the counts of one descriptor, step by step, as
// envoyproxy/ratelimit's base limiter counts them.
func TestTallyRLS(t *testing.T) {
	for i, c := range []struct {
		limit, before, hits uint64
		over, shadow        bool
		ratio               float32
		want                rlsCounts
	}{
		// Limit 3, near threshold floor(3 × 0.8) = 2: hits one at a time.
		{3, 0, 1, false, false, 0.8, rlsCounts{total: 1, within: 1}},
		{3, 1, 1, false, false, 0.8, rlsCounts{total: 1, within: 1}},
		{3, 2, 1, false, false, 0.8, rlsCounts{total: 1, within: 1, near: 1}},
		{3, 3, 1, true, false, 0.8, rlsCounts{total: 1, over: 1}},
		{3, 3, 1, true, true, 0.8, rlsCounts{total: 1, over: 1, shadow: 1}},
		// Several hits at once: only those past a threshold count.
		{10, 5, 4, false, false, 0.8, rlsCounts{total: 4, within: 4, near: 1}},        // 6..9, near past 8
		{10, 8, 2, false, false, 0.8, rlsCounts{total: 2, within: 2, near: 2}},        // 9, 10
		{10, 5, 8, true, false, 0.8, rlsCounts{total: 8, over: 3, near: 2}},           // 6..13: 9, 10 near, 11..13 over
		{10, 9, 3, true, true, 0.8, rlsCounts{total: 3, over: 2, near: 1, shadow: 2}}, // 10 near, 11, 12 over
		{10, 10, 5, true, true, 0.8, rlsCounts{total: 5, over: 5, shadow: 5}},
		// Another ratio; 0 hits count nothing.
		{10, 4, 2, false, false, 0.5, rlsCounts{total: 2, within: 2, near: 1}},
		{10, 4, 0, false, false, 0.8, rlsCounts{}},
		// requests_per_unit 0, and a refusal whose hits would have fit.
		{0, 0, 3, true, false, 0.8, rlsCounts{total: 3, over: 3}},
		{10, 2, 3, true, false, 0.8, rlsCounts{total: 3, over: 3}},
	} {
		if got := tallyRLS(c.limit, c.before, c.hits, c.over, c.shadow, c.ratio); got != c.want {
			t.Errorf("step %d: tallyRLS(limit %d, before %d, hits %d, over %v, shadow %v, ratio %v) = %+v want %+v",
				i, c.limit, c.before, c.hits, c.over, c.shadow, c.ratio, got, c.want)
		}
	}
}

const rlsStatsConfig = `domain: d
descriptors:
  - key: user_id
    rate_limit: {unit: minute, requests_per_unit: 3, name: per_user}
  - key: user_id
    value: vip
    rate_limit: {unlimited: true}
  - key: plan
    value: gold
    rate_limit: {unit: minute, requests_per_unit: 100, replaces: [{name: per_user}]}
  - key: tenant
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: file
    value: img*
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: trial
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: blocked
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: api_key
    descriptors:
      - key: path
        value: /upload
        rate_limit: {unit: minute, requests_per_unit: 10}
`

// newRLSStatsEnv is a one-node API serving the rate limit service with
// conf, its counters in the registry returned.
func newRLSStatsEnv(t *testing.T, conf string, maxKeys int, shadowAll bool, log *slog.Logger) (*rlsServer, *prometheus.Registry) {
	t.Helper()
	c, err := rls.Parse([]rls.File{{Name: "d.yaml", Data: []byte(conf)}})
	if err != nil {
		t.Fatal(err)
	}
	e := newTestEnv(t, nil)
	reg := prometheus.NewRegistry()
	m, err := newRLSMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	st, err := newRLSStats(reg, maxKeys, DefaultRLSNearLimitRatio, log)
	if err != nil {
		t.Fatal(err)
	}
	return &rlsServer{api: e.api, config: func() RLSMatcher { return c }, m: m, stats: st, shadowAll: shadowAll}, reg
}

// rlsStatsOf reads the five counters of (domain d, key) as
// total/within/near/over/shadow.
func rlsStatsOf(t *testing.T, reg prometheus.Gatherer, key string) string {
	t.Helper()
	var out []string
	for _, name := range []string{"total_hits", "within_limit", "near_limit", "over_limit", "shadow_mode"} {
		out = append(out, fmt.Sprint(testkit.Metric(t, reg, "ringlimit_rls_"+name+"_total", "domain", "d", "key", key)))
	}
	return strings.Join(out, "/")
}

// TestRLSStatsPerDescriptor: each matched descriptor is counted under its
// rule's statistics name with envoyproxy/ratelimit's counts; unlimited,
// replaced and unmatched descriptors are not counted.
func TestRLSStatsPerDescriptor(t *testing.T) {
	s, reg := newRLSStatsEnv(t, rlsStatsConfig, DefaultRLSStatKeys, false, slog.New(slog.DiscardHandler))
	req := func(hits uint32, d ...*rlcommon.RateLimitDescriptor) *rlsv3.RateLimitRequest {
		return &rlsv3.RateLimitRequest{Domain: "d", Descriptors: d, HitsAddend: hits}
	}
	codes := func(r *rlsv3.RateLimitRequest, n int) string {
		var out []string
		for range n {
			out = append(out, should(t, s, r).GetOverallCode().String())
		}
		return strings.Join(out, " ")
	}
	// Limit 3, near threshold 2: OK OK OK(near) OVER OVER.
	if got := codes(req(0, rlsDesc("user_id", "alice")), 5); got != "OK OK OK OVER_LIMIT OVER_LIMIT" {
		t.Fatalf("alice: %s", got)
	}
	// Another user, the same rule: hits of 2 (within), then 2 (refused:
	// the 3rd near, the 4th over), then 1: a refusal spends nothing, so
	// it fits (within, near).
	if got := codes(req(2, rlsDesc("user_id", "bob")), 2) + " " + codes(req(1, rlsDesc("user_id", "bob")), 1); got != "OK OVER_LIMIT OK" {
		t.Fatalf("bob: %s", got)
	}
	// total 5+5, within 3+3, near 1+2, over 2+1.
	if got := rlsStatsOf(t, reg, "user_id"); got != "10/6/3/3/0" {
		t.Fatalf("user_id: total/within/near/over/shadow = %s, want 10/6/3/3/0", got)
	}
	// A descriptor's own hits_addend 0 counts nothing; unlimited,
	// replaced and unmatched descriptors are not counted.
	zero := rlsDesc("user_id", "carol")
	zero.HitsAddend = wrapperspb.UInt64(0)
	codes(req(0, zero), 1)
	codes(req(0, rlsDesc("user_id", "vip")), 3)
	codes(req(0, rlsDesc("user_id", "dave"), rlsDesc("plan", "gold")), 4)
	codes(req(0, rlsDesc("nothing", "here")), 2)
	if got := rlsStatsOf(t, reg, "user_id"); got != "10/6/3/3/0" {
		t.Fatalf("user_id after carol, vip and dave: %s, want 10/6/3/3/0", got)
	}
	if got := rlsStatsOf(t, reg, "user_id_vip"); got != "0/0/0/0/0" {
		t.Fatalf("user_id_vip: %s, want nothing", got)
	}
	if got := rlsStatsOf(t, reg, "plan_gold"); got != "4/4/0/0/0" {
		t.Fatalf("plan_gold: %s, want 4 within", got)
	}
	// detailed_metric: every value its own key; a wildcard rule and a
	// nested one are named by their configuration.
	codes(req(0, rlsDesc("tenant", "t1")), 3)
	codes(req(0, rlsDesc("tenant", "t2")), 1)
	codes(req(0, rlsDesc("file", "img1")), 1)
	codes(req(0, rlsDesc("file", "img2")), 2)
	codes(req(0, rlsDesc("api_key", "k1", "path", "/upload")), 9)
	for key, want := range map[string]string{
		"tenant_t1":            "3/2/1/1/0",
		"tenant_t2":            "1/1/0/0/0",
		"tenant":               "0/0/0/0/0",
		"file_img*":            "3/2/2/1/0",
		"api_key.path_/upload": "9/9/1/0/0",
	} {
		if got := rlsStatsOf(t, reg, key); got != want {
			t.Errorf("%s: total/within/near/over/shadow = %s, want %s", key, got, want)
		}
	}
	// shadow_mode: answered OK, counted over and shadow.
	if got := codes(req(0, rlsDesc("trial", "x")), 4); got != "OK OK OK OK" {
		t.Fatalf("trial: %s", got)
	}
	if got := rlsStatsOf(t, reg, "trial"); got != "4/2/1/2/2" {
		t.Fatalf("trial: total/within/near/over/shadow = %s, want 4/2/1/2/2", got)
	}
	if got := testkit.Metric(t, reg, "ringlimit_rls_global_shadow_mode_total"); got != 0 {
		t.Fatalf("global shadow mode counted %v without it", got)
	}
	if got := testkit.Metric(t, reg, "ringlimit_rls_stat_keys"); got != 7 {
		t.Fatalf("ringlimit_rls_stat_keys %v, want 7", got)
	}
}

// TestRLSStatsGlobalShadow: under the global shadow mode every answer is
// OK, the bucket is spent as without it, and what would have been
// refused is counted over_limit and shadow_mode, and once per request in
// ringlimit_rls_global_shadow_mode_total.
func TestRLSStatsGlobalShadow(t *testing.T) {
	s, reg := newRLSStatsEnv(t, rlsStatsConfig, DefaultRLSStatKeys, true, slog.New(slog.DiscardHandler))
	req := &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*rlcommon.RateLimitDescriptor{rlsDesc("user_id", "a"), rlsDesc("trial", "a")}}
	var remaining []uint32
	for i := range 5 {
		r := should(t, s, req)
		if r.GetOverallCode() != rlsv3.RateLimitResponse_OK || r.GetStatuses()[0].GetCode() != rlsv3.RateLimitResponse_OK || r.GetStatuses()[1].GetCode() != rlsv3.RateLimitResponse_OK {
			t.Fatalf("request %d: %v, want every code OK", i+1, r)
		}
		remaining = append(remaining, r.GetStatuses()[0].GetLimitRemaining())
	}
	if fmt.Sprint(remaining) != "[2 1 0 0 0]" {
		t.Fatalf("user_id remaining %v, want [2 1 0 0 0]: the bucket spent", remaining)
	}
	if got := rlsStatsOf(t, reg, "user_id"); got != "5/3/1/2/2" {
		t.Fatalf("user_id: total/within/near/over/shadow = %s, want 5/3/1/2/2", got)
	}
	if got := rlsStatsOf(t, reg, "trial"); got != "5/2/1/3/3" {
		t.Fatalf("trial: total/within/near/over/shadow = %s, want 5/2/1/3/3", got)
	}
	// Requests 4 and 5: user_id over, answered OK by the switch (trial's
	// own shadow_mode does not count here).
	if got := testkit.Metric(t, reg, "ringlimit_rls_global_shadow_mode_total"); got != 2 {
		t.Fatalf("ringlimit_rls_global_shadow_mode_total %v, want 2", got)
	}
	if got := testkit.Metric(t, reg, "ringlimit_rls_requests_total", "code", "over_limit"); got != 0 {
		t.Fatalf("%v answers OVER_LIMIT under the global shadow mode", got)
	}
}

// TestRLSStatsCap: 5,000 values of a detailed_metric rule make at most
// the cap of keys; the rest is counted under "_other", logged once; the
// memory held is the cap's.
func TestRLSStatsCap(t *testing.T) {
	var logs bytes.Buffer
	const maxKeys, values = 100, 5000
	s, reg := newRLSStatsEnv(t, rlsStatsConfig, maxKeys, false, slog.New(slog.NewTextHandler(&logs, nil)))
	sendRLS(t, s, "user_id", "u", 1) // one key before the flood
	for i := range values {
		sendRLS(t, s, "tenant", fmt.Sprintf("t%d", i), 1)
	}
	// A key that had its series before the cap keeps counting there.
	sendRLS(t, s, "user_id", "u", 1)
	sendRLS(t, s, "tenant", "t0", 1)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	series := map[string]int{}
	for _, mf := range mfs {
		series[mf.GetName()] = len(mf.GetMetric())
	}
	for _, name := range []string{"total_hits", "within_limit", "near_limit", "over_limit", "shadow_mode"} {
		if got := series["ringlimit_rls_"+name+"_total"]; got != maxKeys+1 {
			t.Errorf("ringlimit_rls_%s_total has %d series, want %d (the cap and %q)", name, got, maxKeys+1, RLSOtherKey)
		}
	}
	// user_id and t0..t98 have their own series; t99..t4999 are folded.
	folded := values - (maxKeys - 1)
	if got := rlsStatsOf(t, reg, RLSOtherKey); got != fmt.Sprintf("%d/%d/0/0/0", folded, folded) {
		t.Fatalf("%s: %s, want %d within", RLSOtherKey, got, folded)
	}
	if got := rlsStatsOf(t, reg, "user_id"); got != "2/2/0/0/0" {
		t.Fatalf("user_id: %s, want 2 within", got)
	}
	if got := rlsStatsOf(t, reg, "tenant_t0"); got != "2/2/1/0/0" {
		t.Fatalf("tenant_t0: %s, want 2 within, 1 near", got)
	}
	if got := testkit.Metric(t, reg, "ringlimit_rls_stat_keys_folded_total"); got != float64(folded) {
		t.Fatalf("folded %v, want %d", got, folded)
	}
	if got := testkit.Metric(t, reg, "ringlimit_rls_stat_keys"); got != maxKeys {
		t.Fatalf("ringlimit_rls_stat_keys %v, want %d", got, maxKeys)
	}
	if n := len(s.stats.series); n != maxKeys+1 {
		t.Fatalf("%d series held, want %d", n, maxKeys+1)
	}
	if n := strings.Count(logs.String(), "--rls-stats-keys"); n != 1 {
		t.Fatalf("the cap logged %d times, want once:\n%s", n, logs.String())
	}
	// A key longer than 1024 bytes never has a series of its own (a
	// descriptor refused without a check: longer than a bucket key).
	s2, reg2 := newRLSStatsEnv(t, rlsStatsConfig, maxKeys, false, slog.New(slog.DiscardHandler))
	sendRLS(t, s2, "blocked", strings.Repeat("v", 1017), 1)
	sendRLS(t, s2, "blocked", strings.Repeat("v", 1016), 1)
	if got := rlsStatsOf(t, reg2, RLSOtherKey); got != "1/0/0/1/0" {
		t.Fatalf("a 1025-byte key: %s under %s, want 1 over", got, RLSOtherKey)
	}
	if got := rlsStatsOf(t, reg2, "blocked_"+strings.Repeat("v", 1016)); got != "1/0/0/1/0" {
		t.Fatalf("a 1024-byte key: %s, want 1 over", got)
	}
	// Concurrent callers: still exactly the cap, and every hit counted.
	s4, reg4 := newRLSStatsEnv(t, rlsStatsConfig, 10, false, slog.New(slog.DiscardHandler))
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 500 {
				if _, err := s4.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "d",
					Descriptors: []*rlcommon.RateLimitDescriptor{rlsDesc("tenant", fmt.Sprintf("g%d-%d", g, i))}}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	total := 0.0
	m, err := reg4.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range m {
		if mf.GetName() != "ringlimit_rls_total_hits_total" {
			continue
		}
		if len(mf.GetMetric()) != 11 {
			t.Fatalf("concurrent: %d series, want 11", len(mf.GetMetric()))
		}
		for _, x := range mf.GetMetric() {
			total += x.GetCounter().GetValue()
		}
	}
	if total != 2000 {
		t.Fatalf("concurrent: %v hits counted, want 2000", total)
	}
	if got := testkit.Metric(t, reg4, "ringlimit_rls_stat_keys_folded_total"); got != 1990 {
		t.Fatalf("concurrent: %v folded, want 1990", got)
	}
	// Zero: per domain only.
	s3, reg3 := newRLSStatsEnv(t, rlsStatsConfig, 0, false, slog.New(slog.DiscardHandler))
	sendRLS(t, s3, "tenant", "a", 3)
	sendRLS(t, s3, "user_id", "a", 1)
	if got := rlsStatsOf(t, reg3, RLSOtherKey); got != "4/3/1/1/0" {
		t.Fatalf("per domain: %s, want 4/3/1/1/0", got)
	}
	if got := testkit.Metric(t, reg3, "ringlimit_rls_stat_keys"); got != 0 {
		t.Fatalf("ringlimit_rls_stat_keys %v with no key allowed", got)
	}
}

// sendRLS sends n requests of one descriptor (key, value) to domain d.
func sendRLS(t *testing.T, s *rlsServer, key, value string, n int) {
	t.Helper()
	for range n {
		should(t, s, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*rlcommon.RateLimitDescriptor{rlsDesc(key, value)}})
	}
}
