package api

import (
	"net/http"
	"strings"
	"testing"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// The scope label holds the first limit scopes seen (inline among them,
// from the start); later scopes are counted as "other", and a scope seen
// before the cap keeps its own series.
func TestScopeCountersCap(t *testing.T) {
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "decisions_total", Help: "h"}, []string{"scope", "result"})
	s := newScopeCounters(vec, 3)
	steps := []struct {
		scope  string
		result int
	}{
		{"inline", decisionAllowed},
		{"tier:free", decisionAllowed},
		{"tier:free", decisionRejected},
		{"route:/login", decisionDegraded}, // the third scope: still its own
		{"route:/export", decisionDryRun},  // the fourth: other
		{"global", decisionAllowed},        // other
		{"tier:free", decisionAllowed},     // seen before the cap
		{"global", decisionAllowed},        // other again
	}
	for _, st := range steps {
		s.count(st.scope, st.result)
	}
	want := map[[2]string]float64{
		{"inline", "allowed"}:        1,
		{"tier:free", "allowed"}:     2,
		{"tier:free", "rejected"}:    1,
		{"route:/login", "degraded"}: 1,
		{"other", "dry_run"}:         1,
		{"other", "allowed"}:         2,
	}
	// 4 scopes (inline, tier:free, route:/login, other) × 4 results.
	reg := prometheus.NewRegistry()
	reg.MustRegister(vec)
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 1 {
		t.Fatalf("Gather: %v, %d families", err, len(mfs))
	}
	if n := len(mfs[0].GetMetric()); n != 16 {
		t.Errorf("%d series, want 16 (inline, tier:free, route:/login and other, 4 results each)", n)
	}
	for _, scope := range []string{"inline", "tier:free", "route:/login", "other", "route:/export", "global"} {
		for _, res := range decisionResultNames {
			if scope == "route:/export" || scope == "global" {
				continue
			}
			var m dto.Metric
			if err := vec.WithLabelValues(scope, res).Write(&m); err != nil {
				t.Fatal(err)
			}
			got := m.GetCounter().GetValue()
			if got != want[[2]string{scope, res}] {
				t.Errorf("decisions{scope=%q,result=%q} = %v, want %v", scope, res, got, want[[2]string{scope, res}])
			}
		}
	}
}

// Policy answers are counted under the scope that decided them, a
// dry-run layer that would have rejected under its own scope.
func TestHTTPDecisionsByScope(t *testing.T) {
	_, s, _ := newPolicyEnv(t)
	const tb1 = `{"limit":1,"per":"1s"}`
	for i, st := range []struct {
		req    string
		status int
	}{
		{`{"user":"42","ip":"192.0.2.1","route":"/login"}`, 200}, // route:/login is the tightest
		{`{"user":"42","ip":"192.0.2.1","route":"/login"}`, 200},
		{`{"user":"42","ip":"192.0.2.1","route":"/login"}`, 429}, // route:/login rejects
		{`{"user":"7","route":"/export"}`, 200},                  // tier:free is the tightest
		{`{"user":"7","route":"/export"}`, 200},                  // and route:/export (dry run) would reject
		{chk("inline-1", "", tb1), 200},
		{chk("inline-1", "", tb1), 429},
	} {
		if got := s.check(t, st.req); got.status != st.status {
			t.Fatalf("step %d: POST /v1/check %s: %d, want %d (%s)", i, st.req, got.status, st.status, got.body)
		}
	}
	m := s.do(t, http.MethodGet, "/metrics", "", nil)
	for _, line := range []string{
		`ringlimit_decisions_total{result="allowed",scope="route:/login"} 2`,
		`ringlimit_decisions_total{result="rejected",scope="route:/login"} 1`,
		`ringlimit_decisions_total{result="allowed",scope="tier:free"} 2`,
		`ringlimit_decisions_total{result="dry_run",scope="route:/export"} 1`,
		`ringlimit_decisions_total{result="allowed",scope="inline"} 1`,
		`ringlimit_decisions_total{result="rejected",scope="inline"} 1`,
		`ringlimit_decisions_total{result="degraded",scope="inline"} 0`,
		`ringlimit_decisions_total{result="allowed",scope="other"} 0`,
	} {
		if !hasLine(string(m.body), line) {
			t.Errorf("GET /metrics: no line %q in\n%s", line, grepLines(string(m.body), "ringlimit_decisions"))
		}
	}
	if n := strings.Count(string(m.body), "\nringlimit_decisions_total{"); n != 5*4 {
		t.Errorf("%d ringlimit_decisions_total series, want %d (inline, other, route:/login, tier:free, route:/export)", n, 5*4)
	}
}

// Each descriptor a rule matched is an answer of scope rls:DOMAIN: 3
// admitted, then refused; a descriptor no rule matches is not counted.
func TestRLSDecisionsByScope(t *testing.T) {
	e, s := newRLSEnv(t, rlsUnitConfig, false)
	req := &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*rlcommon.RateLimitDescriptor{rlsDesc("user_id", "a"), rlsDesc("nothing", "x")}}
	for range 4 {
		should(t, s, req)
	}
	for res, want := range map[int]float64{decisionAllowed: 3, decisionRejected: 1, decisionDryRun: 0, decisionDegraded: 0} {
		var m dto.Metric
		if err := e.api.m.decisions.vec.WithLabelValues("rls:d", decisionResultNames[res]).Write(&m); err != nil {
			t.Fatal(err)
		}
		if got := m.GetCounter().GetValue(); got != want {
			t.Errorf("decisions{scope=rls:d,result=%s} = %v, want %v", decisionResultNames[res], got, want)
		}
	}
}
