package main

// Adversarial process tests of key namespaces, request-named limits, route
// spellings, RLS overrides and the global ceiling: each replays an attack
// of issue 29 against three real node processes and asserts exact
// admission counts, that the victim stays refused, and that the nodes
// stay healthy.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/api"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
	pb "github.com/ringlimit/ringlimit/proto/ringlimitv1"
)

// advPolicy: a free tier of 3 per hour, a /login limit of 2 per hour by IP
// and route, and a generous global layer; the policy "ceiling" has a
// global layer of 5 per hour and its default key.
const advPolicy = `
version: adv
policies:
  default:
    default_tier: free
    tiers:
      free: {limit: 3, per: 1h}
    routes:
      - match: /login
        limit: {limit: 2, per: 1h, key: ip+route}
    global: {limit: 100000, per: 1h}
  ceiling:
    default_tier: big
    tiers:
      big: {limit: 100, per: 1h}
    global: {limit: 5, per: 1h}
`

// advRLS: api_key 3 per hour, /login 2 per hour, and a domain for
// overrides.
const advRLS = `
domain: adv
descriptors:
  - key: api_key
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: path
    value: /login
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: big
    rate_limit: {unit: hour, requests_per_unit: 1}
`

// flood is the attacker's inline limit: a million per millisecond.
var flood = inlineLimit{count: 1_000_000, per: "1ms"}

func TestAdversaryNamespaces(t *testing.T) {
	h := newHarness(t)
	bin := buildNode(t)
	dir := t.TempDir()
	pol, conf := filepath.Join(dir, "policy.yaml"), filepath.Join(dir, "adv.yaml")
	writePolicy(t, pol, advPolicy)
	if err := os.WriteFile(conf, []byte(advRLS), 0o644); err != nil {
		t.Fatal(err)
	}
	extra := []string{"--policy", pol, "--rls-config", conf}
	p1 := startFaultProc(t, bin, nil, procSpec{name: "node-1", extra: extra})
	p2 := startFaultProc(t, bin, nil, procSpec{name: "node-2", join: []string{p1.gossip}, extra: extra})
	p3 := startFaultProc(t, bin, nil, procSpec{name: "node-3", join: []string{p1.gossip}, extra: extra})
	procs := []*proc{p1, p2, p3}
	h.waitMembers(procs, names3, 15*time.Second)
	rlsc := rlsClients(t, []string{p1.grpc, p2.grpc, p3.grpc})

	// policy sends a policy request through node i (round robin).
	policy := func(i int, body string) checkAnswer {
		t.Helper()
		return h.mustCheck(procs[i%3].http, body)
	}
	// admitted counts the 200s of n policy requests (every other answer
	// a 429 of scope).
	admitted := func(body, scope string, n int) int {
		t.Helper()
		ok := 0
		for i := range n {
			switch a := policy(i, body); {
			case a.status == http.StatusOK:
				ok++
			case a.status != http.StatusTooManyRequests || a.body.Scope != scope:
				t.Fatalf("%s via %s: %d %+v, want 200 or 429 of %s", body, procs[i%3].name, a.status, a.body, scope)
			}
		}
		return ok
	}
	// inline sends the attacker's inline check of key through node i.
	inline := func(i int, key string, l inlineLimit) checkAnswer {
		t.Helper()
		a, err := doCheck(h.client, procs[i%3].http, key, l, 5*time.Second)
		if err != nil {
			t.Fatalf("inline %q via %s: %v", key, procs[i%3].name, err)
		}
		return a
	}
	rlsOne := func(i int, hits uint32, d *rlcommon.RateLimitDescriptor) *rlsv3.RateLimitResponse {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r, err := rlsc[i%3].ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "adv", Descriptors: []*rlcommon.RateLimitDescriptor{d}, HitsAddend: hits})
		if err != nil {
			t.Fatalf("RLS %v via %s: %v", d, procs[i%3].name, err)
		}
		return r
	}
	override := func(d *rlcommon.RateLimitDescriptor, n uint32, u typev3.RateLimitUnit) *rlcommon.RateLimitDescriptor {
		d.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: n, Unit: u}
		return d
	}

	// Attack 1: an inline check on a policy layer's key (the key as it
	// was, and as it is now, namespace tag included) with a million per
	// millisecond, on the tier and on the route; each lands in its own
	// inline bucket (200), and the victims stay exhausted.
	t.Run("InlineOnPolicyKeys", func(t *testing.T) {
		user := `{"user":"u1"}`
		if n := admitted(user, "tier:free", 4); n != 3 {
			t.Fatalf("tier free (3/h): %d of 4 admitted, want 3", n)
		}
		login := `{"user":"u2","ip":"203.0.113.7","route":"/login"}`
		if n := admitted(login, "route:/login", 3); n != 2 {
			t.Fatalf("/login (2/h): %d of 3 admitted, want 2", n)
		}
		keys := []string{
			"default|tier:free|user:u1", "p|default|tier:free|user:u1",
			"default|route:/login|ip:203.0.113.7|/login", "p|default|route:/login|ip:203.0.113.7|/login",
		}
		for round := range 5 {
			for j, k := range keys {
				if a := inline(round+j, k, flood); a.status != http.StatusOK || a.body.Scope != api.ScopeInline || a.body.Limit != flood.count {
					t.Fatalf("round %d: inline %q: %d %+v, want 200 of its own limit", round, k, a.status, a.body)
				}
			}
			if n := admitted(user, "tier:free", 3); n != 0 {
				t.Fatalf("round %d: tier free admitted %d more after the inline checks, want 0", round, n)
			}
			if n := admitted(login, "route:/login", 3); n != 0 {
				t.Fatalf("round %d: /login admitted %d more after the inline checks, want 0", round, n)
			}
		}
	})

	// Attack 1 on RLS: an inline check on a descriptor's key, then the
	// descriptor's own limit override of 1000 per SECOND, sent again past
	// a second boundary: the configured descriptor stays over its limit.
	t.Run("RLSKeysAndOverrides", func(t *testing.T) {
		victim := func() *rlcommon.RateLimitDescriptor { return desc("api_key", "k1") }
		ok := 0
		for i := range 4 {
			if rlsOne(i, 0, victim()).GetOverallCode() == rlsv3.RateLimitResponse_OK {
				ok++
			}
		}
		if ok != 3 {
			t.Fatalf("api_key k1 (3/h): %d of 4 OK, want 3", ok)
		}
		for j, k := range []string{"rls|adv|api_key=k1", "r|adv|api_key=k1"} {
			if a := inline(j, k, flood); a.status != http.StatusOK || a.body.Scope != api.ScopeInline {
				t.Fatalf("inline %q: %d %+v, want 200 in its own bucket", k, a.status, a.body)
			}
		}
		second := time.Now().Unix()
		for i := range 3 {
			r := rlsOne(i, 0, override(victim(), 1000, typev3.RateLimitUnit_SECOND))
			if st := r.GetStatuses()[0]; r.GetOverallCode() != rlsv3.RateLimitResponse_OK || st.GetCurrentLimit().GetRequestsPerUnit() != 1000 {
				t.Fatalf("override %d: %v, want OK of 1000/SECOND", i+1, r)
			}
		}
		// A window of the override's second ends: under a shared key, the
		// spend converted into it is gone now.
		testkit.WaitFor(t, 3*time.Second, "the next second", func() error {
			if time.Now().Unix() <= second {
				return fmt.Errorf("still in second %d", second)
			}
			return nil
		})
		for i := range 3 {
			rlsOne(i, 0, override(victim(), 1000, typev3.RateLimitUnit_SECOND))
			if r := rlsOne(i, 0, victim()); r.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT || r.GetStatuses()[0].GetLimitRemaining() != 0 {
				t.Fatalf("api_key k1 after the override, call %d: %v, want OVER_LIMIT with 0 remaining", i+1, r)
			}
		}
	})

	// Attack 6 (RLS): an override of 4,294,967,295 per unit is enforced
	// as answered: 2^31+5 hits fit, then exactly the rest, then nothing.
	t.Run("RLSOverrideExact", func(t *testing.T) {
		const n = 1<<32 - 1
		big := func() *rlcommon.RateLimitDescriptor { return override(desc("big", "x"), n, typev3.RateLimitUnit_HOUR) }
		steps := []struct {
			hits      uint32
			code      rlsv3.RateLimitResponse_Code
			remaining uint32
		}{
			{1<<31 + 5, rlsv3.RateLimitResponse_OK, n - (1<<31 + 5)},
			{n - (1<<31 + 5), rlsv3.RateLimitResponse_OK, 0},
			{1, rlsv3.RateLimitResponse_OVER_LIMIT, 0},
		}
		for i, s := range steps {
			r := rlsOne(i, s.hits, big())
			st := r.GetStatuses()[0]
			if r.GetOverallCode() != s.code || st.GetLimitRemaining() != s.remaining || st.GetCurrentLimit().GetRequestsPerUnit() != n {
				t.Fatalf("step %d: %d hits: %v, want %v with %d remaining of %d", i, s.hits, r, s.code, s.remaining, uint32(n))
			}
		}
	})

	// Attack 3: once /login is refused through /v1/authz, every other
	// spelling of it is refused by the same route limit; the same for an
	// RLS descriptor carrying the path.
	t.Run("RouteVariants", func(t *testing.T) {
		authz := func(i int, uri string) (int, string) {
			t.Helper()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+procs[i%3].http+"/v1/authz", nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("X-Original-URI", uri)
			req.Header.Set("X-API-Key", "k-login")
			resp, err := h.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			var body api.CheckResponse
			json.Unmarshal(b, &body)
			return resp.StatusCode, body.Scope
		}
		ok := 0
		for i := range 3 {
			switch code, scope := authz(i, "/login"); {
			case code == http.StatusOK:
				ok++
			case code != http.StatusTooManyRequests || scope != "route:/login":
				t.Fatalf("/login %d: %d %s", i+1, code, scope)
			}
		}
		if ok != 2 {
			t.Fatalf("/login (2/h): %d of 3 admitted, want 2", ok)
		}
		variants := []string{"/login/", "//login", "/login;jsessionid=1", "/%6Cogin", "/%6cogin/", "/./login", "/x/../login", "/login?next=/"}
		for i, v := range variants {
			if code, scope := authz(i, v); code != http.StatusTooManyRequests || scope != "route:/login" {
				t.Errorf("%s after /login was refused: %d scope %q, want 429 of route:/login", v, code, scope)
			}
		}
		over := 0
		for i := range 3 {
			if rlsOne(i, 0, desc("path", "/login")).GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
				over++
			}
		}
		if over != 1 {
			t.Fatalf("RLS path /login (2/h): %d of 3 over, want 1", over)
		}
		for i, v := range variants {
			if r := rlsOne(i, 0, desc("path", v)); r.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
				t.Errorf("RLS path %s after /login was over: %v, want OVER_LIMIT", v, r)
			}
		}
	})

	// Attack 6 (global): a client that rotates its API key meets the
	// global layer's one bucket: exactly 5 admitted, then 429 of global.
	t.Run("GlobalCeiling", func(t *testing.T) {
		ok := 0
		for i := range 12 {
			switch a := policy(i, fmt.Sprintf(`{"policy":"ceiling","api_key":"rotated-%d"}`, i)); {
			case a.status == http.StatusOK:
				ok++
			case a.status != http.StatusTooManyRequests || a.body.Scope != "global":
				t.Fatalf("rotated-%d: %d %+v, want 200 or 429 of global", i, a.status, a.body)
			}
		}
		if ok != 5 {
			t.Fatalf("12 rotating API keys under a global ceiling of 5/h: %d admitted, want 5", ok)
		}
	})

	// A request-named limit never lowers a key's spend: alternating an
	// inline key's limit with a million per millisecond refills nothing.
	t.Run("AlternatingInlineLimits", func(t *testing.T) {
		victim := inlineLimit{count: 3, per: "1h"}
		ok := 0
		for i := range 4 {
			if inline(i, "victim", victim).status == http.StatusOK {
				ok++
			}
		}
		if ok != 3 {
			t.Fatalf("victim 3/h: %d of 4 admitted, want 3", ok)
		}
		for round := range 5 {
			if a := inline(round, "victim", flood); a.status != http.StatusOK {
				t.Fatalf("round %d: the flood limit: %d %+v", round, a.status, a.body)
			}
			if a := inline(round+1, "victim", victim); a.status != http.StatusTooManyRequests || a.body.Remaining != 0 {
				t.Fatalf("round %d: victim after another limit: %d %+v, want 429 with 0 remaining", round, a.status, a.body)
			}
		}
	})

	for _, p := range procs {
		if status, _, err := send(h.client, http.MethodGet, "http://"+p.http+"/healthz", "", ""); err != nil || status != http.StatusOK {
			t.Errorf("%s /healthz after the attacks: %d %v", p.name, status, err)
		}
		select {
		case <-p.exited:
			t.Errorf("%s exited: %v", p.name, p.err)
		default:
		}
	}
}

// TestAdversaryInlineLimitsOff: a node started with --inline-limits=false
// refuses inline limits on HTTP and gRPC with INLINE_LIMITS_DISABLED,
// spends nothing for them, and serves policy requests.
func TestAdversaryInlineLimitsOff(t *testing.T) {
	h := newHarness(t)
	bin := buildNode(t)
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	writePolicy(t, pol, advPolicy)
	p := startFaultProc(t, bin, nil, procSpec{name: "node-1", extra: []string{"--policy", pol, "--inline-limits=false"}})
	h.waitMembers([]*proc{p}, []string{"node-1"}, 15*time.Second)

	for range 3 {
		status, b, err := send(h.client, http.MethodPost, "http://"+p.http+"/v1/check", checkBody("default|tier:free|user:u1", flood), "")
		var e api.ErrorResponse
		if err != nil || status != http.StatusBadRequest || json.Unmarshal(b, &e) != nil || e.Code != api.CodeInlineLimitsDisabled {
			t.Fatalf("inline check: %d %s %v, want 400 %s", status, b, err, api.CodeInlineLimitsDisabled)
		}
	}
	conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c := pb.NewRateLimiterClient(conn)
	_, err = c.Check(ctx, &pb.CheckRequest{Checks: []*pb.Check{{Key: "k", Limit: &pb.Limit{Limit: 5, PerMs: 1000}}}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), api.CodeInlineLimitsDisabled) {
		t.Fatalf("gRPC inline check: %v, want InvalidArgument %s", err, api.CodeInlineLimitsDisabled)
	}
	resp, err := c.Check(ctx, &pb.CheckRequest{Checks: []*pb.Check{{Request: &pb.PolicyRequest{User: "u1"}}}})
	if err != nil || !resp.GetDecisions()[0].GetAllowed() || resp.GetDecisions()[0].GetRemaining() != 2 {
		t.Fatalf("gRPC policy request: %v, %v; want allowed with 2 remaining (nothing spent before)", resp, err)
	}
	if a := h.mustCheck(p.http, `{"user":"u1"}`); a.status != http.StatusOK || a.body.Remaining != 1 {
		t.Fatalf("HTTP policy request: %d %+v, want 200 with 1 remaining", a.status, a.body)
	}
	if got := h.metric(p.http, "ringlimit_invalid_requests_total", `{surface="http"}`); got != 3 {
		t.Errorf("ringlimit_invalid_requests_total{surface=http} = %v, want 3", got)
	}
	if status, _, err := send(h.client, http.MethodGet, "http://"+p.http+"/healthz", "", ""); err != nil || status != http.StatusOK {
		t.Errorf("/healthz: %d %v", status, err)
	}
}

// TestInlineLimitsFlag: --inline-limits defaults to true; the flag and
// RINGLIMIT_INLINE_LIMITS turn it off, the flag winning over the
// environment.
func TestInlineLimitsFlag(t *testing.T) {
	for i, st := range []struct {
		args []string
		env  string
		want bool
	}{
		{nil, "", true},
		{[]string{"--inline-limits=false"}, "", false},
		{nil, "false", false},
		{nil, "true", true},
		{[]string{"--inline-limits=true"}, "false", true},
	} {
		c, err := parseConfig(append([]string{"--name", "n1"}, st.args...), func(k string) string {
			return map[string]string{"RINGLIMIT_INLINE_LIMITS": st.env}[k]
		}, io.Discard)
		if err != nil || c.DisableInlineLimits == st.want {
			t.Errorf("step %d: args %q, RINGLIMIT_INLINE_LIMITS=%q: inline limits %v, %v; want %v", i, st.args, st.env, !c.DisableInlineLimits, err, st.want)
		}
	}
}
