package main

// The forward-auth endpoint, /v1/authz, through a three-node cluster, as
// the gateways call it: Traefik's ForwardAuth here (its requests written
// out header for header), nginx's auth_request in nginx_test.go.

import (
	"context"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/ringlimit/ringlimit/ratelimitheader"
)

// gatewayPolicy: a free tier of 5 an hour for API keys, an anonymous tier
// of 3 an hour by client IP, and /login at 2 an hour by IP and route. The
// hour-long windows refill nothing a test could notice.
const gatewayPolicy = `
version: gateway
policies:
  api:
    default_tier: free
    anonymous_tier: anon
    tiers:
      free: { limit: 5, per: 1h }
      anon: { limit: 3, per: 1h, key: ip }
    routes:
      - match: /login
        limit: { limit: 2, per: 1h, key: ip+route }
`

// authzAnswer is what a gateway gets back from /v1/authz.
type authzAnswer struct {
	status int
	header http.Header
	body   string
}

// traefikAuth sends to addr what Traefik's ForwardAuth middleware (address
// http://addr/v1/authz+query, trustForwardHeader false) sends for a client
// request method uri from clientIP carrying the client's headers: a GET
// with the client's headers copied, X-Forwarded-For set to the client's
// address alone, X-Forwarded-Method, -Proto, -Host and -Uri (the request
// URI with its query).
func traefikAuth(client *http.Client, addr, query, method, uri, clientIP string, clientHeaders ...string) (authzAnswer, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/v1/authz"+query, nil)
	if err != nil {
		return authzAnswer{}, err
	}
	for i := 0; i+1 < len(clientHeaders); i += 2 {
		req.Header.Add(clientHeaders[i], clientHeaders[i+1])
	}
	req.Header.Set("X-Forwarded-For", clientIP)
	req.Header.Set("X-Forwarded-Method", method)
	req.Header.Set("X-Forwarded-Proto", "https")
	req.Header.Set("X-Forwarded-Host", "app.example")
	req.Header.Set("X-Forwarded-Uri", uri)
	resp, err := client.Do(req)
	if err != nil {
		return authzAnswer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return authzAnswer{status: resp.StatusCode, header: resp.Header, body: string(b)}, err
}

// The contract Traefik relies on, through three nodes, the requests spread
// over all of them: per API key, per client IP and per route, exactly the
// policy's numbers are admitted (200 with the headers Traefik copies with
// authResponseHeaders), the rest refused with 429 (Traefik passes a
// non-2xx answer, headers and body, to the client) and Retry-After.
func TestTraefikForwardAuthContract(t *testing.T) {
	h := newHarness(t)
	h.validateOpenAPI()
	c := startPolicyCluster(h, t.TempDir(), gatewayPolicy)
	client := []string{"User-Agent", "curl/8.5.0", "Accept", "*/*", "Authorization", "Bearer not-ours-to-read"}
	type tally struct {
		admitted, refused int
		remaining         []string // X-RateLimit-Remaining of each admission
		retryAfter        []string // Retry-After of each refusal
		start, end        time.Time
	}
	run := func(n int, query, method, uri, ip, deny string, hs ...string) tally {
		t.Helper()
		got := tally{start: time.Now()}
		for i := range n {
			a, err := traefikAuth(h.client, c.addrs[i%len(c.addrs)], query, method, uri, ip, append(slices.Clone(client), hs...)...)
			if err != nil {
				t.Fatal(err)
			}
			switch a.status {
			case http.StatusOK:
				got.admitted++
				got.remaining = append(got.remaining, a.header.Get("X-RateLimit-Remaining"))
				if a.header.Get("Retry-After") != "" {
					t.Errorf("%s %s: admitted with Retry-After %q", method, uri, a.header.Get("Retry-After"))
				}
			case map[string]int{"": 429, "403": 403}[deny]:
				got.refused++
				got.retryAfter = append(got.retryAfter, a.header.Get("Retry-After"))
				if !strings.Contains(a.body, `"code":"RATE_LIMITED"`) {
					t.Errorf("%s %s: refusal body %s", method, uri, a.body)
				}
			default:
				t.Fatalf("%s %s via %s: %d %s", method, uri, c.addrs[i%len(c.addrs)], a.status, a.body)
			}
		}
		got.end = time.Now()
		return got
	}
	// retryAfterOK reports whether a refusal's Retry-After ra is the time
	// to the next token, whole seconds rounded up: token seconds (3600 /
	// the hourly limit) less the time since the bucket was emptied, which
	// lies between since (before the first spend) and end.
	retryAfterOK := func(ra string, token int, since, end time.Time) bool {
		n, err := strconv.Atoi(ra)
		return err == nil && n <= token && n >= token-int(math.Ceil(end.Sub(since).Seconds()))
	}
	check := func(what string, got tally, admitted, refused int, remaining []string, token int) {
		t.Helper()
		if got.admitted != admitted || got.refused != refused || !slices.Equal(got.remaining, remaining) {
			t.Errorf("%s: %d admitted (remaining %v), %d refused; want %d (%v), %d", what, got.admitted, got.remaining, got.refused, admitted, remaining, refused)
		}
		for _, ra := range got.retryAfter {
			if !retryAfterOK(ra, token, got.start, got.end) {
				t.Errorf("%s: Retry-After %q, want %d less the %v since the first spend", what, ra, token, got.end.Sub(got.start).Round(time.Millisecond))
			}
		}
	}
	// One API key, 12 requests: the free tier's 5, then 429 with a token
	// 3600s/5 = 720s away.
	keyA := run(12, "", "POST", "/orders?id=7", "203.0.113.50", "", "X-Api-Key", "key-A")
	check("key-A", keyA, 5, 7, []string{"4", "3", "2", "1", "0"}, 720)
	// Another key from the same address: buckets of its own.
	check("key-B", run(6, "?policy=api", "GET", "/orders", "203.0.113.50", "", "X-Api-Key", "key-B"),
		5, 1, []string{"4", "3", "2", "1", "0"}, 720)
	// No key: the anonymous tier, by the client IP Traefik puts in
	// X-Forwarded-For (the nodes trust loopback, where the test runs).
	check("anonymous 203.0.113.60", run(5, "", "GET", "/", "203.0.113.60", ""), 3, 2, []string{"2", "1", "0"}, 1200)
	check("anonymous 203.0.113.61", run(4, "", "GET", "/", "203.0.113.61", ""), 3, 1, []string{"2", "1", "0"}, 1200)
	// /login: 2 an hour per IP, whatever the key; deny_status as asked.
	check("login", run(4, "?deny_status=403", "POST", "/login?next=%2F", "203.0.113.70", "403", "X-Api-Key", "key-C"),
		2, 2, []string{"1", "0"}, 1800)

	// The headers Traefik's authResponseHeaders would copy, on an
	// admission; and on a refusal, those Traefik passes to the client.
	a, err := traefikAuth(h.client, c.addrs[0], "", "GET", "/orders", "203.0.113.80", "X-Api-Key", "key-D")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"X-Ratelimit-Limit": "5", "X-Ratelimit-Remaining": "4", "Ratelimit-Policy": `"tier:free";q=5;w=3600`,
		"Ratelimit": `"tier:free";r=4;t=720`, "Retry-After": ""}
	for k, v := range want {
		if got := a.header.Get(k); a.status != 200 || got != v {
			t.Errorf("admission: %d, %s %q, want 200, %q", a.status, k, got, v)
		}
	}
	a, err = traefikAuth(h.client, c.addrs[1], "", "GET", "/orders", "203.0.113.50", "X-Api-Key", "key-A")
	if err != nil {
		t.Fatal(err)
	}
	if a.status != 429 || a.header.Get("X-Ratelimit-Remaining") != "0" || a.header.Get("Ratelimit-Policy") != `"tier:free";q=5;w=3600` ||
		!retryAfterOK(a.header.Get("Retry-After"), 720, keyA.start, time.Now()) || a.header.Get("Content-Type") != "application/json" {
		t.Errorf("refusal: %d %v %s", a.status, a.header, a.body)
	}
	// A client behind a Traefik that copies every header cannot name
	// another route: X-Original-URI disagreeing with X-Forwarded-Uri is bad
	// input, which Traefik passes on as 400.
	a, err = traefikAuth(h.client, c.addrs[2], "", "POST", "/login", "203.0.113.70", "X-Api-Key", "key-E", "X-Original-URI", "/cheap")
	if err != nil {
		t.Fatal(err)
	}
	if a.status != 400 || !strings.Contains(a.body, "INVALID_ARGUMENT") {
		t.Errorf("spoofed X-Original-URI: %d %s, want 400 INVALID_ARGUMENT", a.status, a.body)
	}
}

func TestParseConfigTrustedProxies(t *testing.T) {
	prefixes := func(ps ...string) []netip.Prefix {
		var out []netip.Prefix
		for _, p := range ps {
			out = append(out, netip.MustParsePrefix(p))
		}
		return out
	}
	for _, st := range []struct {
		args []string
		env  string
		want []netip.Prefix
	}{
		{nil, "", nil}, // trust none unless told
		{[]string{"--trusted-proxies", "127.0.0.0/8,::1"}, "", prefixes("127.0.0.0/8", "::1/128")},
		{[]string{"--trusted-proxies", "10.0.0.0/8, 192.0.2.7 ,fd00::/8"}, "", prefixes("10.0.0.0/8", "192.0.2.7/32", "fd00::/8")},
		{nil, "172.16.0.0/12", prefixes("172.16.0.0/12")},
		{[]string{"--trusted-proxies", ""}, "172.16.0.0/12", nil}, // trust none
	} {
		c, err := parseConfig(st.args, func(k string) string { return map[string]string{"RINGLIMIT_TRUSTED_PROXIES": st.env}[k] }, io.Discard)
		if err != nil || !slices.Equal(c.TrustedProxies, st.want) {
			t.Errorf("parseConfig(%q, env %q): %v, %v; want %v", st.args, st.env, c.TrustedProxies, err, st.want)
		}
	}
	for _, bad := range []struct{ args []string }{
		{[]string{"--trusted-proxies", "10.0.0.0/33"}},
		{[]string{"--trusted-proxies", "127.0.0.1,gateway.internal"}},
	} {
		_, err := parseConfig(bad.args, func(string) string { return "" }, io.Discard)
		if err == nil || !strings.HasPrefix(err.Error(), "--trusted-proxies: ") {
			t.Errorf("parseConfig(%q) = %v, want an error naming --trusted-proxies", bad.args, err)
		}
	}
	_, err := parseConfig(nil, func(k string) string { return map[string]string{"RINGLIMIT_TRUSTED_PROXIES": "10.0.0.0/99"}[k] }, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--trusted-proxies") {
		t.Errorf("RINGLIMIT_TRUSTED_PROXIES=10.0.0.0/99: %v, want an error naming the flag", err)
	}
}

// examples/traefik.yml points ForwardAuth at /v1/authz and copies every
// rate-limit header a node writes on an admission.
func TestTraefikExample(t *testing.T) {
	b, err := os.ReadFile("../../examples/traefik.yml")
	if err != nil {
		t.Fatal(err)
	}
	var conf struct {
		HTTP struct {
			Middlewares map[string]struct {
				ForwardAuth struct {
					Address             string   `yaml:"address"`
					AuthRequestHeaders  []string `yaml:"authRequestHeaders"`
					AuthResponseHeaders []string `yaml:"authResponseHeaders"`
					TrustForwardHeader  bool     `yaml:"trustForwardHeader"`
				} `yaml:"forwardAuth"`
			} `yaml:"middlewares"`
		} `yaml:"http"`
	}
	if err := yaml.Unmarshal(b, &conf); err != nil {
		t.Fatal(err)
	}
	fa := conf.HTTP.Middlewares["ratelimit"].ForwardAuth
	u, err := url.Parse(fa.Address)
	if err != nil || u.Path != "/v1/authz" || fa.TrustForwardHeader || !slices.Contains(fa.AuthRequestHeaders, "X-API-Key") {
		t.Fatalf("forwardAuth %+v (%v): want address …/v1/authz, trustForwardHeader false, X-API-Key passed", fa, err)
	}
	// What a node writes on an admission, canonical names compared.
	w := httptest.NewRecorder()
	ratelimitheader.Write(w.Header(), &ratelimitheader.Decision{Allowed: true, Scope: "tier:free", Limit: 5, Remaining: 4})
	var copied []string
	for _, h := range fa.AuthResponseHeaders {
		copied = append(copied, http.CanonicalHeaderKey(h))
	}
	for k := range w.Header() {
		if !slices.Contains(copied, k) {
			t.Errorf("authResponseHeaders %v lacks %s", fa.AuthResponseHeaders, k)
		}
	}
}
