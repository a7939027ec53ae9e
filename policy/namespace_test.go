package policy

import (
	"strings"
	"testing"
)

// TestGlobalIsACeiling: the global layer's default key is one bucket per
// policy, whatever identity a caller rotates through; "key: identity"
// keeps a bucket per identity for those who ask.
func TestGlobalIsACeiling(t *testing.T) {
	set := parseOK(t, "global", []byte(`policies:
  api:
    default_tier: free
    tiers:
      free: {limit: 3, per: 1h}
    global: {limit: 10, per: 1s}
  per_caller:
    default_tier: free
    tiers:
      free: {limit: 3, per: 1h}
    global: {limit: 10, per: 1s, key: identity}
`))
	api, per := set.Policies["api"], set.Policies["per_caller"]
	if api.Global.KeyBy != ByAll || per.Global.KeyBy != ByIdentity {
		t.Fatalf("global keyed by %q and %q, want all and identity", api.Global.KeyBy, per.Global.KeyBy)
	}
	for i, req := range []Request{{APIKey: "k1"}, {APIKey: "k2"}, {User: "u"}, {IP: "203.0.113.9"}} {
		got, err := api.Resolve(req, nil)
		if err != nil {
			t.Fatal(err)
		}
		if g := got[len(got)-1]; g.Scope != "global" || g.Key != "p|api|global|all" {
			t.Errorf("step %d: %+v: global check %+v, want key p|api|global|all", i, req, g)
		}
		got, err = per.Resolve(req, nil)
		if err != nil {
			t.Fatal(err)
		}
		if g := got[len(got)-1]; !strings.HasPrefix(g.Key, "p|per_caller|global|") || strings.HasSuffix(g.Key, "|all") {
			t.Errorf("step %d: %+v: per-caller global key %q", i, req, g.Key)
		}
	}
}

// TestPolicyKeysInTheirNamespace: every key a policy derives begins with
// bucket.NamespacePolicy, so no inline or RLS key can name it.
func TestPolicyKeysInTheirNamespace(t *testing.T) {
	p := exampleSet(t).Policies["api"]
	for _, req := range []Request{{User: "42"}, {APIKey: "k", Route: "/login", IP: "1.2.3.4"}, {IP: "1.2.3.4", Route: "/export/a"}} {
		got, err := p.Resolve(req, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range got {
			if !strings.HasPrefix(c.Key, "p|") {
				t.Errorf("%+v: key %q outside the policy namespace", req, c.Key)
			}
		}
	}
}

// TestRouteVariantsMatchTheRoute: every spelling of /login the attack
// tried is charged to the /login route limit, under its one key.
func TestRouteVariantsMatchTheRoute(t *testing.T) {
	p := exampleSet(t).Policies["api"]
	want, err := p.Resolve(Request{User: "42", IP: "203.0.113.9", Route: "/login"}, nil)
	if err != nil || want[0].Scope != "route:/login" {
		t.Fatalf("/login: %s, %v", fmtChecks(want), err)
	}
	for _, v := range []string{"/login/", "//login", "/login;jsessionid=1", "/%6Cogin", "/%6cogin/", "/./login", "/x/../login", "/login?next=/", "login"} {
		got, err := p.Resolve(Request{User: "42", IP: "203.0.113.9", Route: v}, nil)
		if err != nil {
			t.Fatal(err)
		}
		wantChecks(t, v, got, want)
	}
}

// TestRouteMatchMustBeNormalised: a route pattern requests could never
// spell (after normalisation) is refused with the spelling to use.
func TestRouteMatchMustBeNormalised(t *testing.T) {
	for _, c := range []struct{ match, want string }{
		{"/login/", `write "/login"`},
		{"//login", `write "/login"`},
		{"/a/./b", `write "/a/b"`},
		{"/%6Cogin", `write "/login"`},
		{"/login;x", `write "/login"`},
		{"//export/*", `write "/export/*"`},
	} {
		_, err := Parse([]byte("policies:\n  api:\n    routes:\n      - {match: \""+c.match+"\", cost: 1}\n    global: {limit: 10, per: 1s}\n"), "t")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("match %q: error %v, want one saying %s", c.match, err, c.want)
		}
	}
	for _, ok := range []string{"/", "/*", "/login", "/export/*", "/exp*", "/a%2Fb"} {
		if _, err := Parse([]byte("policies:\n  api:\n    routes:\n      - {match: \""+ok+"\", cost: 1}\n    global: {limit: 10, per: 1s}\n"), "t"); err != nil {
			t.Errorf("match %q refused: %v", ok, err)
		}
	}
}
