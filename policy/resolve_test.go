package policy

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/clock"
)

// checkOn is the check a layer yields for key and cost.
func checkOn(l *Layer, key string, cost int64) Check {
	return Check{Key: key, Limit: l.Limit, Cost: cost, Scope: l.Scope,
		FailureMode: l.FailureMode, DryRun: l.DryRun, Prelimit: l.Prelimit}
}

// wantChecks fails unless got equals want exactly, check by check.
func wantChecks(t testing.TB, name string, got, want []Check) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: got %d checks, want %d\n got  %s\n want %s", name, len(got), len(want), fmtChecks(got), fmtChecks(want))
		return
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("%s: check %d:\n got  %+v\n want %+v", name, i, got[i], want[i])
		}
	}
}

func fmtChecks(cs []Check) string {
	var b strings.Builder
	for _, c := range cs {
		b.WriteString("[" + c.Scope + " " + c.Key + "] ")
	}
	return b.String()
}

// wantRequestErr fails unless err wraps ErrRequest and contains every want.
func wantRequestErr(t testing.TB, name string, err error, wants ...string) {
	t.Helper()
	if !errors.Is(err, ErrRequest) {
		t.Errorf("%s: got error %v, want one wrapping ErrRequest", name, err)
		return
	}
	wantErrContains(t, name, err, wants...)
}

func TestResolveExample(t *testing.T) {
	p := exampleSet(t).Policies["api"]
	free, anon, ent, pro := p.Tiers["free"], p.Tiers["anonymous"], p.Tiers["enterprise"], p.Tiers["pro"]
	global := p.Global
	login := p.Routes[1].Layer
	export := p.Routes[2].Layer
	if login.Scope != "route:/login" || export.Scope != "route:/export/*" {
		t.Fatalf("example routes moved: %+v", p.Routes)
	}
	long := strings.Repeat("u", maxField)

	cases := []struct {
		name string
		req  Request
		want []Check
		err  []string // non-nil: want an ErrRequest containing these
	}{
		{name: "free user on an overridden route (/reports cost 10)",
			req: Request{User: "42", IP: "1.2.3.4", Route: "/reports"},
			want: []Check{
				checkOn(free, "p|api|tier:free|user:42", 10),
				checkOn(global, "p|api|global|all", 10),
			}},
		{name: "free user, /reports cost beats the request's cost",
			req: Request{User: "42", Route: "/reports", Cost: 3},
			want: []Check{
				checkOn(free, "p|api|tier:free|user:42", 10),
				checkOn(global, "p|api|global|all", 10),
			}},
		{name: "/login by IP: route keyed ip+route, anonymous tier by ip, global",
			req: Request{IP: "1.2.3.4", Route: "/login"},
			want: []Check{
				checkOn(login, "p|api|route:/login|ip:1.2.3.4|/login", 1),
				checkOn(anon, "p|api|tier:anonymous|ip:1.2.3.4", 1),
				checkOn(global, "p|api|global|all", 1),
			}},
		{name: "/login by a user with an IP: the route still keys by ip+route",
			req: Request{User: "42", IP: "1.2.3.4", Route: "/login"},
			want: []Check{
				checkOn(login, "p|api|route:/login|ip:1.2.3.4|/login", 1),
				checkOn(free, "p|api|tier:free|user:42", 1),
				checkOn(global, "p|api|global|all", 1),
			}},
		{name: "/login without an IP", req: Request{User: "42", Route: "/login"},
			err: []string{"ip: route:/login is keyed by client IP"}},
		{name: "enterprise user",
			req: Request{User: "7", Tier: "enterprise", Route: "/orders"},
			want: []Check{
				checkOn(ent, "p|api|tier:enterprise|user:7", 1),
				checkOn(global, "p|api|global|all", 1),
			}},
		{name: "pro API key, no route",
			req: Request{APIKey: "k-1", Tier: "pro"},
			want: []Check{
				checkOn(pro, "p|api|tier:pro|key:k-1", 1),
				checkOn(global, "p|api|global|all", 1),
			}},
		{name: "unknown tier", req: Request{User: "42", Tier: "gold"},
			err: []string{"tier:", `policy api has no tier "gold"`}},
		{name: "no identity", req: Request{Route: "/reports"},
			err: []string{"api_key, user or ip"}},
		{name: "api_key wins over user and ip",
			req: Request{APIKey: "k1", User: "42", IP: "1.2.3.4"},
			want: []Check{
				checkOn(free, "p|api|tier:free|key:k1", 1),
				checkOn(global, "p|api|global|all", 1),
			}},
		{name: "user wins over ip",
			req: Request{User: "42", IP: "1.2.3.4"},
			want: []Check{
				checkOn(free, "p|api|tier:free|user:42", 1),
				checkOn(global, "p|api|global|all", 1),
			}},
		{name: "ip alone: anonymous tier",
			req: Request{IP: "1.2.3.4"},
			want: []Check{
				checkOn(anon, "p|api|tier:anonymous|ip:1.2.3.4", 1),
				checkOn(global, "p|api|global|all", 1),
			}},
		{name: "ip alone naming its tier",
			req: Request{IP: "1.2.3.4", Tier: "pro"},
			want: []Check{
				checkOn(pro, "p|api|tier:pro|ip:1.2.3.4", 1),
				checkOn(global, "p|api|global|all", 1),
			}},
		{name: "prefix route /export/* matches /export/x (dry-run layer first)",
			req: Request{User: "42", Route: "/export/x"},
			want: []Check{
				checkOn(export, "p|api|route:/export/*|user:42", 1),
				checkOn(free, "p|api|tier:free|user:42", 1),
				checkOn(global, "p|api|global|all", 1),
			}},
		{name: "prefix route /export/* matches /export/",
			req: Request{User: "42", Route: "/export/"},
			want: []Check{
				checkOn(export, "p|api|route:/export/*|user:42", 1),
				checkOn(free, "p|api|tier:free|user:42", 1),
				checkOn(global, "p|api|global|all", 1),
			}},
		{name: "prefix route /export/* does not match /exportx",
			req: Request{User: "42", Route: "/exportx"},
			want: []Check{
				checkOn(free, "p|api|tier:free|user:42", 1),
				checkOn(global, "p|api|global|all", 1),
			}},
		{name: "prefix route /export/* matches /export, the normalised /export/",
			req: Request{User: "42", Route: "/export"},
			want: []Check{
				checkOn(export, "p|api|route:/export/*|user:42", 1),
				checkOn(free, "p|api|tier:free|user:42", 1),
				checkOn(global, "p|api|global|all", 1),
			}},
		{name: "route variants are the route: //export/./a;x=1 is /export/a",
			req: Request{User: "42", Route: "//export/./a;x=1"},
			want: []Check{
				checkOn(export, "p|api|route:/export/*|user:42", 1),
				checkOn(free, "p|api|tier:free|user:42", 1),
				checkOn(global, "p|api|global|all", 1),
			}},
		{name: "exact route is exact: /reports/x is not /reports",
			req: Request{User: "42", Route: "/reports/x", Cost: 2},
			want: []Check{
				checkOn(free, "p|api|tier:free|user:42", 2),
				checkOn(global, "p|api|global|all", 2),
			}},
		{name: "cost from the request when the route has none",
			req: Request{User: "42", Route: "/login", IP: "1.2.3.4", Cost: 5},
			want: []Check{
				checkOn(login, "p|api|route:/login|ip:1.2.3.4|/login", 5),
				checkOn(free, "p|api|tier:free|user:42", 5),
				checkOn(global, "p|api|global|all", 5),
			}},
		{name: "cost equal to the smallest capacity",
			req: Request{User: "42", Cost: 20},
			want: []Check{
				checkOn(free, "p|api|tier:free|user:42", 20),
				checkOn(global, "p|api|global|all", 20),
			}},
		{name: "cost above the free tier's capacity", req: Request{User: "42", Cost: 21},
			err: []string{"cost: 21 exceeds the capacity 20 of tier:free"}},
		{name: "cost above the /login capacity", req: Request{User: "42", IP: "1.2.3.4", Route: "/login", Cost: 6},
			err: []string{"cost: 6 exceeds the capacity 5 of route:/login"}},
		{name: "negative cost", req: Request{User: "42", Cost: -1},
			err: []string{"cost: must be at least 1, got -1"}},
		{name: "fields of 256 bytes are fine",
			req: Request{APIKey: long, Route: "/" + long[1:], Tier: "free"},
			want: []Check{
				checkOn(free, "p|api|tier:free|key:"+long, 1),
				checkOn(global, "p|api|global|all", 1),
			}},
		{name: "api_key longer than 256", req: Request{APIKey: long + "x"}, err: []string{"api_key: longer than 256 bytes"}},
		{name: "user longer than 256", req: Request{User: long + "x"}, err: []string{"user: longer than 256 bytes"}},
		{name: "ip longer than 256", req: Request{IP: long + "x"}, err: []string{"ip: longer than 256 bytes"}},
		{name: "route longer than 256", req: Request{User: "42", Route: "/" + long}, err: []string{"route: longer than 256 bytes"}},
		{name: "tier longer than 256", req: Request{User: "42", Tier: long + "x"}, err: []string{"tier: longer than 256 bytes"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := p.Resolve(c.req, nil)
			if c.err != nil {
				if got != nil {
					t.Errorf("%s: got checks %s with the error, want none", c.name, fmtChecks(got))
				}
				wantRequestErr(t, c.name, err, c.err...)
				return
			}
			if err != nil {
				t.Fatalf("%s: got error %v, want checks %s", c.name, err, fmtChecks(c.want))
			}
			wantChecks(t, c.name, got, c.want)
		})
	}
}

func TestResolveRouteSpecificity(t *testing.T) {
	set := parseOK(t, "routes", []byte(`policies:
  api:
    routes:
      - {match: /*, cost: 1}
      - {match: /a/*, cost: 2}
      - {match: /a/b/c, cost: 4}
      - {match: /a/b/*, cost: 3}
    global: {limit: 100, per: 1s}
`))
	p := set.Policies["api"]
	cases := []struct {
		route    string
		wantCost int64
	}{
		{"/a/b/c", 4},      // exact beats every prefix
		{"/a/b/c/", 4},     // the same route: trailing slash dropped
		{"//a/b/c;x=1", 4}, // the same route again
		{"/a/%62/c", 4},    // and again: %62 is b
		{"/a/b/x/../c", 4}, // dot segments resolved
		{"/a/b/cd", 3},     // longer prefix beats shorter
		{"/a/b/", 3},       // prefix includes its own slash
		{"/a/b", 3},        // "/a/b" is "/a/b/" normalised: the prefix's own path
		{"/a/bc", 2},       // "/a/bc" does not have the prefix "/a/b/"
		{"/a/x", 2},        // shorter prefix
		{"/ab", 1},         // "/a/*" needs the slash
		{"/", 1},           // catch-all
		{"", 1},            // no route: the request's cost (0 means 1)
		{"/zzz/yyy", 1},    // catch-all
	}
	for _, c := range cases {
		got, err := p.Resolve(Request{User: "u", Route: c.route, Cost: 0}, nil)
		if err != nil {
			t.Errorf("route %q: got error %v, want cost %d", c.route, err, c.wantCost)
			continue
		}
		want := []Check{checkOn(p.Global, "p|api|global|all", c.wantCost)}
		wantChecks(t, "route "+c.route, got, want)
	}
}

func TestResolveOverrideReplacesTier(t *testing.T) {
	p := exampleSet(t).Policies["api"]
	ov := *p.Tiers["enterprise"]
	ov.Scope = "override:tier:enterprise"
	cases := []struct {
		name string
		req  Request
		want []Check
	}{
		{"default tier replaced", Request{User: "42", Route: "/reports"}, []Check{
			checkOn(&ov, "p|api|override:tier:enterprise|user:42", 10),
			checkOn(p.Global, "p|api|global|all", 10),
		}},
		{"named tier replaced", Request{User: "42", Tier: "pro"}, []Check{
			checkOn(&ov, "p|api|override:tier:enterprise|user:42", 1),
			checkOn(p.Global, "p|api|global|all", 1),
		}},
		{"unknown tier ignored when overridden", Request{User: "42", Tier: "gold"}, []Check{
			checkOn(&ov, "p|api|override:tier:enterprise|user:42", 1),
			checkOn(p.Global, "p|api|global|all", 1),
		}},
		{"route layer kept", Request{User: "42", IP: "1.2.3.4", Route: "/login"}, []Check{
			checkOn(p.Routes[1].Layer, "p|api|route:/login|ip:1.2.3.4|/login", 1),
			checkOn(&ov, "p|api|override:tier:enterprise|user:42", 1),
			checkOn(p.Global, "p|api|global|all", 1),
		}},
		// The free tier's capacity (20) no longer bounds the cost.
		{"capacity is the override's", Request{User: "42", Cost: 100}, []Check{
			checkOn(&ov, "p|api|override:tier:enterprise|user:42", 100),
			checkOn(p.Global, "p|api|global|all", 100),
		}},
	}
	for _, c := range cases {
		got, err := p.Resolve(c.req, &ov)
		if err != nil {
			t.Errorf("%s: got error %v", c.name, err)
			continue
		}
		wantChecks(t, c.name, got, c.want)
	}
}

func TestResolveNoTier(t *testing.T) {
	set := parseOK(t, "notier", []byte(`policies:
  onlyroutes:
    routes:
      - {match: /a, limit: {limit: 5, per: 1s, key: identity+route}}
  tiered:
    tiers:
      free: {limit: 10, per: 1s}
`))
	r := set.Policies["onlyroutes"]
	got, err := r.Resolve(Request{User: "u", Route: "/a"}, nil)
	if err != nil {
		t.Fatalf("route only: %v", err)
	}
	wantChecks(t, "route only", got, []Check{checkOn(r.Routes[0].Layer, "p|onlyroutes|route:/a|user:u|/a", 1)})

	_, err = r.Resolve(Request{User: "u", Route: "/b"}, nil)
	wantRequestErr(t, "no layer applies", err, "policy onlyroutes has no default tier")

	// A policy with tiers but no default_tier: a request naming no tier
	// gets no tier layer at all, and with no global either it is refused.
	_, err = set.Policies["tiered"].Resolve(Request{User: "u"}, nil)
	wantRequestErr(t, "no default tier", err, "policy tiered has no default tier")
}

// dec is an admitted or rejected decision.
func dec(allowed bool, remaining int64, retry, reset time.Duration) bucket.Decision {
	return bucket.Decision{Allowed: allowed, Remaining: remaining, RetryAfter: retry, ResetAfter: reset}
}

// wantOutcome fails unless got equals want exactly.
func wantOutcome(t testing.TB, name string, got, want Outcome) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s:\n got  %+v\n want %+v", name, got, want)
	}
}

func TestCombine(t *testing.T) {
	// Layers as the resolution tests produce them.
	reports := Check{Scope: "route:/reports", Limit: bucket.MustLimit(bucket.TokenBucket, 2, time.Second, 0), Key: "p|api|route:/reports|user:42", Cost: 1}
	export := Check{Scope: "route:/export/*", Limit: bucket.MustLimit(bucket.SlidingWindowCounter, 100, time.Hour, 0), DryRun: true, Key: "x", Cost: 1}
	free := Check{Scope: "tier:free", Limit: bucket.MustLimit(bucket.TokenBucket, 10, time.Second, 20), Key: "p|api|tier:free|user:42", Cost: 1}
	ent := Check{Scope: "tier:enterprise", Limit: bucket.MustLimit(bucket.TokenBucket, 1000, time.Second, 5000), Key: "p|api|tier:enterprise|user:7", Cost: 1}
	global := Check{Scope: "global", Limit: bucket.MustLimit(bucket.TokenBucket, 2000, time.Second, 6000), Key: "p|api|global|all", Cost: 1}
	shadowFree := free
	shadowFree.DryRun = true
	leaky := Check{Scope: "tier:leaky", Limit: bucket.MustLimit(bucket.LeakyBucket, 10, time.Second, 5), Key: "k", Cost: 1}
	ms := time.Millisecond

	cases := []struct {
		name      string
		checks    []Check
		decisions []bucket.Decision
		want      Outcome
	}{
		{"all admit: the tightest layer names the scope",
			[]Check{reports, free, global},
			[]bucket.Decision{dec(true, 1, 0, 500*ms), dec(true, 19, 0, 100*ms), dec(true, 5999, 0, ms)},
			Outcome{Allowed: true, Scope: "route:/reports", Limit: 2, Per: time.Second, Remaining: 1, ResetAfter: 500 * ms}},
		{"all admit: tier tighter than global",
			[]Check{free, global},
			[]bucket.Decision{dec(true, 9, 0, 1100*ms), dec(true, 8, 0, 2*ms)},
			Outcome{Allowed: true, Scope: "global", Limit: 2000, Per: time.Second, Remaining: 8, ResetAfter: 1100 * ms}},
		{"all admit: equal remaining, the first layer wins",
			[]Check{free, global},
			[]bucket.Decision{dec(true, 7, 0, ms), dec(true, 7, 0, ms)},
			Outcome{Allowed: true, Scope: "tier:free", Limit: 10, Per: time.Second, Remaining: 7, ResetAfter: ms}},
		{"the route rejects",
			[]Check{reports, free, global},
			[]bucket.Decision{dec(false, 0, 300*ms, 800*ms), dec(true, 15, 0, 500*ms), dec(true, 5990, 0, 5*ms)},
			Outcome{Allowed: false, Scope: "route:/reports", Limit: 2, Per: time.Second, Remaining: 0,
				RetryAfter: 300 * ms, ResetAfter: 800 * ms, Refund: []int{1, 2}}},
		{"the tier rejects",
			[]Check{reports, free, global},
			[]bucket.Decision{dec(true, 1, 0, 500*ms), dec(false, 0, 100*ms, 2000*ms), dec(true, 5990, 0, 5*ms)},
			Outcome{Allowed: false, Scope: "tier:free", Limit: 10, Per: time.Second, Remaining: 0,
				RetryAfter: 100 * ms, ResetAfter: 2000 * ms, Refund: []int{0, 2}}},
		{"global rejects",
			[]Check{free, global},
			[]bucket.Decision{dec(true, 3, 0, 1700*ms), dec(false, 0, 1*ms, 3000*ms)},
			Outcome{Allowed: false, Scope: "global", Limit: 2000, Per: time.Second, Remaining: 0,
				RetryAfter: 1 * ms, ResetAfter: 3000 * ms, Refund: []int{0}}},
		{"an enterprise user hits the global ceiling",
			[]Check{ent, {Scope: "global", Limit: global.Limit, Key: "p|api|global|all", Cost: 1}},
			[]bucket.Decision{dec(true, 4000, 0, ms), dec(false, 0, 1*ms, 3*ms)},
			Outcome{Allowed: false, Scope: "global", Limit: 2000, Per: time.Second, Remaining: 0,
				RetryAfter: 1 * ms, ResetAfter: 3 * ms, Refund: []int{0}}},
		{"two reject: the larger retry-after names the scope (later layer)",
			[]Check{reports, free, global},
			[]bucket.Decision{dec(true, 1, 0, 500*ms), dec(false, 0, 100*ms, 2000*ms), dec(false, 0, 900*ms, 1000*ms)},
			Outcome{Allowed: false, Scope: "global", Limit: 2000, Per: time.Second, Remaining: 0,
				RetryAfter: 900 * ms, ResetAfter: 2000 * ms, Refund: []int{0}}},
		{"two reject: the larger retry-after names the scope (earlier layer)",
			[]Check{reports, free, global},
			[]bucket.Decision{dec(false, 0, 700*ms, 500*ms), dec(false, 2, 100*ms, 2000*ms), dec(true, 10, 0, 1000*ms)},
			Outcome{Allowed: false, Scope: "route:/reports", Limit: 2, Per: time.Second, Remaining: 0,
				RetryAfter: 700 * ms, ResetAfter: 2000 * ms, Refund: []int{2}}},
		{"two reject with equal retry-after: the first names the scope",
			[]Check{free, global},
			[]bucket.Decision{dec(false, 0, 100*ms, ms), dec(false, 0, 100*ms, ms)},
			Outcome{Allowed: false, Scope: "tier:free", Limit: 10, Per: time.Second, Remaining: 0,
				RetryAfter: 100 * ms, ResetAfter: ms}},
		{"a dry-run layer rejecting alone admits",
			[]Check{export, free, global},
			[]bucket.Decision{dec(false, 0, 36*time.Second, time.Hour), dec(true, 15, 0, 500*ms), dec(true, 5990, 0, 5*ms)},
			Outcome{Allowed: true, Scope: "tier:free", Limit: 10, Per: time.Second, Remaining: 15,
				ResetAfter: 500 * ms, WouldReject: []string{"route:/export/*"}}},
		{"a dry-run tier rejecting: global remains",
			[]Check{shadowFree, global},
			[]bucket.Decision{dec(false, 0, 100*ms, 2000*ms), dec(true, 5990, 0, 5*ms)},
			Outcome{Allowed: true, Scope: "global", Limit: 2000, Per: time.Second, Remaining: 5990,
				ResetAfter: 5 * ms, WouldReject: []string{"tier:free"}}},
		{"a dry-run layer admitting changes nothing",
			[]Check{export, free, global},
			[]bucket.Decision{dec(true, 0, 0, time.Hour), dec(true, 15, 0, 500*ms), dec(true, 5990, 0, 5*ms)},
			Outcome{Allowed: true, Scope: "tier:free", Limit: 10, Per: time.Second, Remaining: 15, ResetAfter: 500 * ms}},
		{"dry-run and real rejections: the real one rejects, the dry-run one is reported, not refunded",
			[]Check{export, free, global},
			[]bucket.Decision{dec(false, 0, 36*time.Second, time.Hour), dec(true, 15, 0, 500*ms), dec(false, 0, 2*ms, 5*ms)},
			Outcome{Allowed: false, Scope: "global", Limit: 2000, Per: time.Second, Remaining: 0,
				RetryAfter: 2 * ms, ResetAfter: 500 * ms, WouldReject: []string{"route:/export/*"}, Refund: []int{1}}},
		{"every layer dry-run and rejecting",
			[]Check{export, shadowFree},
			[]bucket.Decision{dec(false, 0, time.Second, time.Hour), dec(false, 3, 100*ms, ms)},
			Outcome{Allowed: true, Scope: "route:/export/*", Limit: 100, Per: time.Hour, Remaining: 0,
				WouldReject: []string{"route:/export/*", "tier:free"}}},
		{"leaky bucket delay: the largest on admission",
			[]Check{leaky, global},
			[]bucket.Decision{{Allowed: true, Remaining: 2, Delay: 300 * ms, ResetAfter: 400 * ms}, {Allowed: true, Remaining: 10, Delay: 0, ResetAfter: ms}},
			Outcome{Allowed: true, Scope: "tier:leaky", Limit: 10, Per: time.Second, Remaining: 2, Delay: 300 * ms, ResetAfter: 400 * ms}},
		{"leaky bucket delay: none on rejection",
			[]Check{leaky, global},
			[]bucket.Decision{{Allowed: true, Remaining: 2, Delay: 300 * ms, ResetAfter: 400 * ms}, dec(false, 0, 5*ms, 5*ms)},
			Outcome{Allowed: false, Scope: "global", Limit: 2000, Per: time.Second, Remaining: 0, RetryAfter: 5 * ms,
				ResetAfter: 400 * ms, Refund: []int{0}}},
		{"no checks", nil, nil, Outcome{Allowed: true}},
	}
	for _, c := range cases {
		got := Combine(c.checks, c.decisions)
		wantOutcome(t, c.name, got, c.want)
	}
}

// TestResolveThenCombine runs the table end to end: resolve a
// request against the example file, decide each check with real buckets,
// and combine.
func TestResolveThenCombine(t *testing.T) {
	p := exampleSet(t).Policies["api"]
	store, err := bucket.NewStore(bucket.DefaultStoreConfig())
	if err != nil {
		t.Fatal(err)
	}
	const now = clock.Instant(1_000_000_000_000)
	run := func(req Request) Outcome {
		t.Helper()
		checks, err := p.Resolve(req, nil)
		if err != nil {
			t.Fatalf("Resolve(%+v): %v", req, err)
		}
		ds := make([]bucket.Decision, len(checks))
		for i := range checks {
			ds[i], err = store.Take(checks[i].Key, &checks[i].Limit, now, checks[i].Cost)
			if err != nil {
				t.Fatalf("Take %s: %v", checks[i].Key, err)
			}
		}
		return Combine(checks, ds)
	}

	// A free user: /reports costs 10 of a burst of 20: two pass, the third
	// is rejected by tier:free, with 1s to wait for 10 tokens at 10/s.
	for i, want := range []Outcome{
		{Allowed: true, Scope: "tier:free", Limit: 10, Per: time.Second, Remaining: 10, ResetAfter: time.Second},
		{Allowed: true, Scope: "tier:free", Limit: 10, Per: time.Second, Remaining: 0, ResetAfter: 2 * time.Second},
		{Allowed: false, Scope: "tier:free", Limit: 10, Per: time.Second, Remaining: 0, RetryAfter: time.Second,
			ResetAfter: 2 * time.Second, Refund: []int{1}},
	} {
		got := run(Request{User: "42", Route: "/reports"})
		wantOutcome(t, "free user /reports #"+string(rune('1'+i)), got, want)
	}

	// /login by IP: 5 per minute, keyed by ip and route.
	for i := range 5 {
		if got := run(Request{IP: "1.2.3.4", Route: "/login"}); !got.Allowed || got.Scope != "route:/login" || got.Remaining != int64(4-i) {
			t.Fatalf("/login #%d: got %+v, want allowed, scope route:/login, remaining %d", i+1, got, 4-i)
		}
	}
	got := run(Request{IP: "1.2.3.4", Route: "/login"})
	wantOutcome(t, "/login #6", got, Outcome{Allowed: false, Scope: "route:/login", Limit: 5, Per: time.Minute, Remaining: 0,
		RetryAfter: 12 * time.Second, ResetAfter: time.Minute, Refund: []int{1, 2}})
	// Another address is not affected.
	if got := run(Request{IP: "5.6.7.8", Route: "/login"}); !got.Allowed {
		t.Errorf("/login from another IP: got %+v, want allowed", got)
	}
}

// A route layer on a prefix pattern keyed by ip+route (or identity+route)
// should be one bucket per caller for the whole pattern; keying it by the
// request's concrete path lets a caller multiply its limit by varying the
// path (/export/1, /export/2, ...) and makes the number of keys unbounded.
func TestResolvePrefixRouteKey(t *testing.T) {
	set := parseOK(t, "prefix key", []byte(`policies:
  api:
    routes:
      - {match: /export/*, limit: {limit: 5, per: 1m, key: ip+route}}
`))
	p := set.Policies["api"]
	a, errA := p.Resolve(Request{IP: "1.2.3.4", Route: "/export/1"}, nil)
	b, errB := p.Resolve(Request{IP: "1.2.3.4", Route: "/export/2"}, nil)
	if errA != nil || errB != nil {
		t.Fatalf("resolve: %v, %v", errA, errB)
	}
	if a[0].Key != b[0].Key {
		t.Errorf("prefix route: /export/1 keyed %q, /export/2 keyed %q, want one key (e.g. api|route:/export/*|ip:1.2.3.4|/export/*)", a[0].Key, b[0].Key)
	}
}
