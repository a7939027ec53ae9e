package api

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ringlimit/ringlimit/policy"
)

// authzPolicy: a default policy whose anonymous tier keys by IP, a route
// limit on /login by IP and route, an expensive /reports; and a second
// policy, partner.
const authzPolicy = `
version: authz
policies:
  default:
    default_tier: free
    anonymous_tier: anon
    tiers:
      free: { limit: 3, per: 1m }
      anon: { limit: 2, per: 1m, key: ip }
    routes:
      - match: /login
        limit: { limit: 2, per: 10s, key: ip+route }
      - match: /reports
        cost: 2
  partner:
    default_tier: std
    tiers:
      std: { limit: 5, per: 1m }
`

// newAuthzEnv is one node running authzPolicy on the env's fake clock,
// trusting the given proxies; it returns the env and its HTTP handler.
func newAuthzEnv(t *testing.T, trusted ...string) (*testEnv, http.Handler) {
	t.Helper()
	e := newTestEnv(t, nil)
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(authzPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	mgr, err := policy.NewManager(policy.ManagerConfig{Path: path, Clock: e.clock, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	var prefixes []netip.Prefix
	for _, s := range trusted {
		prefixes = append(prefixes, netip.MustParsePrefix(s))
	}
	e.api, err = New(Config{Checker: e.router, Policy: mgr, Logger: slog.New(slog.DiscardHandler), TrustedProxies: prefixes,
		AddOverride: func(_ context.Context, o policy.Override) (policy.Override, error) { return mgr.AddOverride(o) },
		RevokeOverride: func(_ context.Context, id, actor string) (policy.Override, error) {
			return mgr.RevokeOverride(id, actor)
		}})
	if err != nil {
		t.Fatal(err)
	}
	return e, validated(t, e.api.Handler(nil))
}

// authzCall is one request to /v1/authz: its method, query, connection
// address and headers (name, value, name, value...).
type authzCall struct {
	method, query, remote string
	headers               []string
}

func (c authzCall) do(h http.Handler) *httptest.ResponseRecorder {
	method := c.method
	if method == "" {
		method = http.MethodGet
	}
	var body *strings.Reader
	if method == http.MethodPost {
		body = strings.NewReader(`{"ignored": true`) // not even JSON: the body is not read
	} else {
		body = strings.NewReader("")
	}
	r := httptest.NewRequest(method, "/v1/authz"+c.query, body)
	r.RemoteAddr = c.remote
	if r.RemoteAddr == "" {
		r.RemoteAddr = "198.51.100.1:4000"
	}
	for i := 0; i+1 < len(c.headers); i += 2 {
		r.Header.Add(c.headers[i], c.headers[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// The inputs, each from its header in nginx's or Traefik's spelling; the
// client IP from the forwarding headers only through a trusted proxy; the
// answers' statuses and headers; and exactly which buckets were spent.
func TestAuthz(t *testing.T) {
	e, h := newAuthzEnv(t, "10.0.0.0/8")
	nginx := func(key, uri, xff string) []string {
		hs := []string{"X-Original-URI", uri, "X-Original-Method", "GET", "X-Forwarded-For", xff}
		if key != "" {
			hs = append(hs, "X-API-Key", key)
		}
		return hs
	}
	const proxy = "10.0.0.1:5000"
	free := `"tier:free";q=3;w=60`
	login := `"route:/login";q=2;w=10, "tier:free";q=3;w=60`
	steps := []struct {
		call                             authzCall
		status                           int
		remaining, policy, rateLimit, ra string
	}{
		// The free tier (3/min) of key k1, through nginx, any method; the
		// query string is not part of the route.
		{authzCall{"GET", "", proxy, nginx("k1", "/items?page=2", "203.0.113.7")}, 200, "2", free, `"tier:free";r=2;t=20`, ""},
		{authzCall{"POST", "", proxy, nginx("k1", "/items", "203.0.113.7")}, 200, "1", free, `"tier:free";r=1;t=40`, ""},
		{authzCall{"HEAD", "", proxy, nginx("k1", "/items", "203.0.113.7")}, 200, "0", free, `"tier:free";r=0;t=60`, ""},
		// Refused: 429 by default, deny_status otherwise; a token is 20s away.
		{authzCall{"GET", "", proxy, nginx("k1", "/items", "203.0.113.7")}, 429, "0", free, `"tier:free";r=0;t=60`, "20"},
		{authzCall{"GET", "?deny_status=403", proxy, nginx("k1", "/items", "203.0.113.7")}, 403, "0", free, `"tier:free";r=0;t=60`, "20"},
		{authzCall{"GET", "?deny_status=401", proxy, nginx("k1", "/items", "203.0.113.7")}, 401, "0", free, `"tier:free";r=0;t=60`, "20"},
		// Another policy: its own buckets.
		{authzCall{"GET", "?policy=partner&deny_status=403", proxy, nginx("k1", "/items", "203.0.113.7")}, 200, "4", `"tier:std";q=5;w=60`, `"tier:std";r=4;t=12`, ""},
		// Known by IP alone (the anonymous tier, keyed by IP): an untrusted
		// peer's X-Forwarded-For is not believed...
		{authzCall{"GET", "", "198.51.100.9:1", nginx("", "/items", "203.0.113.8")}, 200, "1", `"tier:anon";q=2;w=60`, `"tier:anon";r=1;t=30`, ""},
		// ...a trusted one's X-Real-IP is, without X-Forwarded-For...
		{authzCall{"GET", "", proxy, []string{"X-Original-URI", "/", "X-Real-IP", "203.0.113.9"}}, 200, "1", `"tier:anon";q=2;w=60`, `"tier:anon";r=1;t=30`, ""},
		// ...and its X-Forwarded-For is walked past the trusted hops.
		{authzCall{"GET", "", proxy, nginx("", "/items", "6.6.6.6, 203.0.113.10, 10.0.0.3")}, 200, "1", `"tier:anon";q=2;w=60`, `"tier:anon";r=1;t=30`, ""},
		// Traefik's headers; the route is decoded and cleaned, so that
		// /log%69n and /a/../login are /login (2 per 10s by IP and route).
		{authzCall{"GET", "", proxy, []string{"X-Forwarded-Uri", "/log%69n?next=/", "X-Forwarded-Method", "POST", "X-Forwarded-Proto", "https",
			"X-Forwarded-Host", "app.example", "X-Forwarded-For", "203.0.113.11", "X-Api-Key", "k2"}}, 200, "1", login, `"route:/login";r=1;t=20`, ""},
		{authzCall{"PUT", "", proxy, nginx("k2", "/a/../login", "203.0.113.11")}, 200, "0", login, `"route:/login";r=0;t=40`, ""},
		// //login/ is /login too: refused by the route (a token of 2/10s
		// is 5s away), whose refusal refunds k4's tier.
		{authzCall{"GET", "", proxy, nginx("k4", "//login/?x", "203.0.113.11")}, 429, "0", login, `"route:/login";r=0;t=20`, "5"},
		// The route refuses (a token of 2/10s is 5s away); the tier's
		// reset is as it stood before the refund.
		{authzCall{"GET", "", proxy, nginx("k2", "/login", "203.0.113.11")}, 429, "0", login, `"route:/login";r=0;t=60`, "5"},
		// /reports costs 2 of the tier.
		{authzCall{"GET", "", proxy, nginx("k3", "/reports", "203.0.113.12")}, 200, "1", free, `"tier:free";r=1;t=40`, ""},
	}
	for i, st := range steps {
		w := st.call.do(h)
		g := w.Header()
		if w.Code != st.status || g.Get("X-RateLimit-Remaining") != st.remaining || g.Get("RateLimit-Policy") != st.policy ||
			g.Get("RateLimit") != st.rateLimit || g.Get("Retry-After") != st.ra {
			t.Errorf("step %d: %s /v1/authz%s = %d, remaining %q, RateLimit-Policy %q, RateLimit %q, Retry-After %q\n  want %d %q %q %q %q\n  body %s",
				i, st.call.method, st.call.query, w.Code, g.Get("X-RateLimit-Remaining"), g.Get("RateLimit-Policy"), g.Get("RateLimit"), g.Get("Retry-After"),
				st.status, st.remaining, st.policy, st.rateLimit, st.ra, w.Body)
		}
	}
	// Exactly these buckets, by exactly these amounts: the refusals spent
	// nothing (the route's refusal refunded the tier).
	spent := map[string]int64{
		"default|tier:free|key:k1":                    3,
		"partner|tier:std|key:k1":                     1,
		"default|tier:anon|ip:198.51.100.9":           1,
		"default|tier:anon|ip:203.0.113.9":            1,
		"default|tier:anon|ip:203.0.113.10":           1,
		"default|route:/login|ip:203.0.113.11|/login": 2,
		"default|tier:free|key:k2":                    2,
		"default|tier:free|key:k3":                    2,
		"default|tier:free|key:k4":                    0, // refunded: /login refused it
	}
	for key, want := range spent {
		if _, got, _ := e.store.Used("p|"+key, e.clock.Now()); got != want {
			t.Errorf("%s: used %d, want %d", key, got, want)
		}
	}
	if n := e.store.Len(); n != len(spent) {
		t.Errorf("the store holds %d keys, want %d", n, len(spent))
	}
}

// Bad input is 400 INVALID_ARGUMENT naming what is wrong, and spends
// nothing.
func TestAuthzBadInput(t *testing.T) {
	e, h := newAuthzEnv(t, "10.0.0.0/8")
	ok := []string{"X-Original-URI", "/items", "X-API-Key", "k"}
	with := func(hs ...string) []string { return append(append([]string{}, ok...), hs...) }
	cases := []struct {
		call authzCall
		want string
	}{
		{authzCall{query: "?deny_status=abc", headers: ok}, "deny_status"},
		{authzCall{query: "?deny_status=200", headers: ok}, "deny_status"},
		{authzCall{query: "?deny_status=400", headers: ok}, "deny_status"},
		{authzCall{query: "?deny_status=500", headers: ok}, "deny_status"},
		{authzCall{query: "?deny_status=+429", headers: ok}, "deny_status"},
		{authzCall{query: "?deny_status=", headers: ok}, "deny_status"},
		{authzCall{query: "?deny_status=403&deny_status=401", headers: ok}, "given 2 times"},
		{authzCall{query: "?tier=pro", headers: ok}, "query tier: unknown parameter"},
		{authzCall{query: "?policy=nope", headers: ok}, `no policy named`},
		{authzCall{query: "?policy=%zz", headers: ok}, "query"},
		{authzCall{headers: []string{"X-API-Key", "k"}}, "X-Original-Uri or X-Forwarded-Uri: required"},
		{authzCall{headers: []string{"X-Original-URI", "items", "X-API-Key", "k"}}, "want a path"},
		{authzCall{headers: []string{"X-Original-URI", "/it%zzems", "X-API-Key", "k"}}, "bad percent-encoding"},
		{authzCall{headers: with("X-Forwarded-Uri", "/other")}, "both given and they differ"},
		{authzCall{headers: with("X-Original-Method", "GET", "X-Forwarded-Method", "POST")}, "both given and they differ"},
		{authzCall{headers: with("X-Original-Method", "G(ET")}, "not an HTTP method"},
		{authzCall{headers: with("X-API-Key", "k2")}, "X-Api-Key: given 2 times"},
		{authzCall{headers: []string{"X-Original-URI", "/items", "X-API-Key", "a|b"}}, "must not contain '|'"},
		{authzCall{headers: []string{"X-Original-URI", "/items", "X-API-Key", strings.Repeat("k", 300)}}, "longer than 256 bytes"},
		{authzCall{remote: "10.0.0.1:1", headers: []string{"X-Original-URI", "/", "X-Real-IP", "203.0.113.1", "X-Real-IP", "203.0.113.2"}}, "X-Real-Ip: given 2 times"},
	}
	for i, c := range cases {
		w := c.call.do(h)
		body := w.Body.String()
		if w.Code != http.StatusBadRequest || !strings.Contains(body, `"code":"INVALID_ARGUMENT"`) || !strings.Contains(body, c.want) {
			t.Errorf("case %d: %s %v = %d %s\n  want 400 INVALID_ARGUMENT containing %q", i, c.call.query, c.call.headers, w.Code, body, c.want)
		}
		if w.Header().Get("Retry-After") != "" || w.Header().Get("X-RateLimit-Limit") != "" {
			t.Errorf("case %d: rate-limit headers on a 400: %v", i, w.Header())
		}
	}
	if n := e.store.Len(); n != 0 {
		t.Errorf("bad input left %d keys in the store, want 0", n)
	}
	// The accepted ends of deny_status's range.
	for _, s := range []string{"401", "499"} {
		if w := (authzCall{query: "?deny_status=" + s, headers: ok}).do(h); w.Code != http.StatusOK {
			t.Errorf("deny_status=%s: %d %s, want 200", s, w.Code, w.Body)
		}
	}
}

// A node without a policy file answers 501: a misconfiguration the gateway
// must neither take for a refusal nor retry.
func TestAuthzNoPolicy(t *testing.T) {
	e := newTestEnv(t, nil)
	w := authzCall{headers: []string{"X-Original-URI", "/", "X-API-Key", "k"}}.do(validated(t, e.api.Handler(nil)))
	if w.Code != http.StatusNotImplemented || !strings.Contains(w.Body.String(), `"code":"UNIMPLEMENTED"`) || !strings.Contains(w.Body.String(), "--policy") {
		t.Fatalf("no policy: %d %s, want 501 UNIMPLEMENTED naming --policy", w.Code, w.Body)
	}
}

func TestRouteOf(t *testing.T) {
	for _, st := range []struct{ in, want string }{
		{"/", "/"},
		{"/a?b=c", "/a"},
		{"/a#frag", "/a"},
		{"/a/", "/a"},
		{"//login", "/login"},
		{"/login;jsessionid=1", "/login"},
		{"/%6Cogin/", "/login"},
		{"/a%2Fb", "/a%2Fb"},
		{"/a/./b/../c/", "/a/c"},
		{"/../../login", "/login"},
		{"/%2e%2e/login", "/login"},
		{"/log%69n", "/login"},
		{"http://app.example/x/y?z", "/x/y"},
		{"https://app.example", "/"},
		{"/?only=query", "/"},
	} {
		if got, err := routeOf(st.in); err != nil || got != st.want {
			t.Errorf("routeOf(%q) = %q, %v want %q", st.in, got, err, st.want)
		}
	}
}

func TestNewTrustedProxiesInvalid(t *testing.T) {
	e := newTestEnv(t, nil)
	if _, err := New(Config{Checker: e.router, TrustedProxies: []netip.Prefix{{}}}); err == nil || !strings.Contains(err.Error(), "TrustedProxies[0]") {
		t.Fatalf("New with a zero prefix: %v, want an error naming TrustedProxies[0]", err)
	}
}
