package client_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ringlimit/ringlimit/client"
)

// idPolicy: a tier of 10/s with bursts of 20 and a generous global layer.
// The test cluster's clock moves only when a test says so, so no bucket
// refills during a test and a burst is exactly what a caller gets.
const idPolicy = `
version: id
policies:
  default:
    default_tier: std
    tiers:
      std: { limit: 10, per: 1s, burst: 20 }
    global: { limit: 100000, per: 1h }
`

// send makes n requests through f's server from workers goroutines; hdr
// returns the headers of request i. It returns how many got 200 and 429.
func (f *mwFixture) send(t *testing.T, n, workers int, hdr func(i int) http.Header) (ok, limited int64) {
	t.Helper()
	var next, okN, limitedN atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				req, err := http.NewRequest(http.MethodGet, f.srv.URL+"/", nil)
				if err != nil {
					t.Error(err)
					return
				}
				req.Header = hdr(i)
				resp, err := f.srv.Client().Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
				switch resp.StatusCode {
				case http.StatusOK:
					okN.Add(1)
				case http.StatusTooManyRequests:
					limitedN.Add(1)
				default:
					t.Errorf("request %d: %d", i, resp.StatusCode)
				}
			}
		})
	}
	wg.Wait()
	return okN.Load(), limitedN.Load()
}

// Without an Identity the middleware believes no header: a client that
// sends a new X-API-Key with every request is still one caller, its IP.
func TestMiddlewareRotatingAPIKeyIsOneCaller(t *testing.T) {
	c := newCluster(t, 3, idPolicy)
	f := newMW(t, c, c.addrs(), func(cfg *client.MiddlewareConfig) { cfg.Identity = nil })
	ok, limited := f.send(t, 1000, 8, func(i int) http.Header {
		return http.Header{"X-Api-Key": {fmt.Sprintf("rotated-%d", i)}}
	})
	if ok != 20 || limited != 980 || f.served.Load() != 20 {
		t.Fatalf("1000 requests with rotating keys: %d admitted, %d limited, %d served; want 20, 980, 20",
			ok, limited, f.served.Load())
	}
	for key, want := range map[string]int64{
		"p|default|tier:std|ip:127.0.0.1":  20,
		"p|default|global|all":             20, // one ceiling for all; the rejected ones were refunded
		"p|default|tier:std|key:rotated-0": 0,
	} {
		if got := c.used(t, key); got != want {
			t.Errorf("%s: used %d, want %d", key, got, want)
		}
	}
	if errs := f.onErrors(); len(errs) != 0 {
		t.Fatalf("OnError: %v", errs)
	}
}

// With an Identity the application's user decides the buckets, whatever
// X-API-Key the client sends: two users from one address get 20 each.
func TestMiddlewareIdentityFromApplication(t *testing.T) {
	c := newCluster(t, 3, idPolicy)
	tokens := map[string]string{"Bearer a-secret": "alice", "Bearer b-secret": "bob"}
	f := newMW(t, c, c.addrs(), func(cfg *client.MiddlewareConfig) {
		cfg.Identity = func(r *http.Request) (string, string) { return "", tokens[r.Header.Get("Authorization")] }
	})
	ok, limited := f.send(t, 200, 8, func(i int) http.Header {
		tok := "Bearer a-secret"
		if i%2 == 1 {
			tok = "Bearer b-secret"
		}
		return http.Header{"Authorization": {tok}, "X-Api-Key": {fmt.Sprintf("rotated-%d", i)}}
	})
	if ok != 40 || limited != 160 {
		t.Fatalf("100 requests each from two users: %d admitted, %d limited; want 40, 160", ok, limited)
	}
	for key, want := range map[string]int64{
		"p|default|tier:std|user:alice":    20,
		"p|default|tier:std|user:bob":      20,
		"p|default|tier:std|ip:127.0.0.1":  0,
		"p|default|tier:std|key:rotated-0": 0,
	} {
		if got := c.used(t, key); got != want {
			t.Errorf("%s: used %d, want %d", key, got, want)
		}
	}
}

// X-Forwarded-For names the client only when the connection comes from a
// trusted proxy, and then only as far back as the trusted proxies reach.
func TestMiddlewareTrustedProxies(t *testing.T) {
	c := newCluster(t, 3, idPolicy)
	proxies := []string{"10.0.0.0/8", "192.0.2.10", "fd00::/8"}
	cases := []struct {
		name    string
		trusted []string
		peer    string
		xff     []string
		want    string
	}{
		{"default: nothing trusted", nil, "10.0.0.6:1234", []string{"203.0.113.9"}, "10.0.0.6"},
		{"untrusted peer", proxies, "198.51.100.7:1234", []string{"203.0.113.1"}, "198.51.100.7"},
		{"trusted peer", proxies, "10.0.0.2:1234", []string{"203.0.113.2"}, "203.0.113.2"},
		{"spoofed left, trusted right", proxies, "10.0.0.2:1234", []string{"6.6.6.6, 203.0.113.3, 10.0.0.9"}, "203.0.113.3"},
		{"two header lines", proxies, "10.0.0.2:1234", []string{"6.6.6.7", "203.0.113.4"}, "203.0.113.4"},
		{"every hop trusted", proxies, "10.0.0.2:1234", []string{"10.1.1.1, 10.2.2.2"}, "10.1.1.1"},
		{"garbage right-most", proxies, "10.0.0.3:1234", []string{"203.0.113.5, garbage"}, "10.0.0.3"},
		{"no header", proxies, "10.0.0.4:1234", nil, "10.0.0.4"},
		{"single trusted address", proxies, "192.0.2.10:1234", []string{"203.0.113.6"}, "203.0.113.6"},
		{"next to the single address", proxies, "192.0.2.11:1234", []string{"203.0.113.6"}, "192.0.2.11"},
		{"IPv6 proxy", proxies, "[fd00::1]:443", []string{"2001:db8::7"}, "2001:db8::7"},
		{"IPv4-mapped peer", proxies, "[::ffff:10.0.0.5]:1", []string{"203.0.113.8"}, "203.0.113.8"},
		{"hop with a port", proxies, "10.0.0.2:1234", []string{"203.0.113.10:5555"}, "203.0.113.10"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr = tc.peer
			for _, v := range tc.xff {
				r.Header.Add("X-Forwarded-For", v)
			}
			got, err := client.ClientIP(r, tc.trusted)
			if err != nil || got != tc.want {
				t.Fatalf("ClientIP = %q, %v; want %q", got, err, tc.want)
			}
			// And through the middleware: the request spends the bucket
			// of exactly that address.
			cl := newClient(t, client.Config{Targets: c.addrs()})
			mw, err := client.Middleware(client.MiddlewareConfig{Client: cl, TrustedProxies: tc.trusted})
			if err != nil {
				t.Fatal(err)
			}
			key := "p|default|tier:std|ip:" + tc.want
			before := c.used(t, key)
			w := httptest.NewRecorder()
			mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})).ServeHTTP(w, r)
			if w.Code != http.StatusOK {
				t.Fatalf("%d %s", w.Code, w.Body)
			}
			if got := c.used(t, key) - before; got != 1 {
				t.Fatalf("%s: spent %d, want 1", key, got)
			}
		})
	}
}

func TestMiddlewareConfigErrors(t *testing.T) {
	cl := newClient(t, client.Config{Targets: []string{"127.0.0.1:1"}})
	cases := []struct {
		name string
		cfg  client.MiddlewareConfig
		want string
	}{
		{"no client", client.MiddlewareConfig{}, "Client is required"},
		{"prefix too long", client.MiddlewareConfig{Client: cl, TrustedProxies: []string{"10.0.0.0/8", "10.0.0.0/33"}},
			`TrustedProxies[1]: "10.0.0.0/33" is not a CIDR prefix`},
		{"not an address", client.MiddlewareConfig{Client: cl, TrustedProxies: []string{"proxy.internal"}},
			`TrustedProxies[0]: "proxy.internal" is neither a CIDR prefix nor an address`},
		{"empty", client.MiddlewareConfig{Client: cl, TrustedProxies: []string{""}}, `TrustedProxies[0]: ""`},
		{"mapped prefix too short", client.MiddlewareConfig{Client: cl, TrustedProxies: []string{"::ffff:0:0/80"}},
			"IPv4-mapped prefix must be /96 or longer"},
		{"IP and TrustedProxies", client.MiddlewareConfig{Client: cl, TrustedProxies: []string{"10.0.0.0/8"},
			IP: func(*http.Request) string { return "" }}, "TrustedProxies has no effect when IP is set"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.cfg.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate: %v, want an error containing %q", err, tc.want)
			}
			mw, err := client.Middleware(tc.cfg)
			if mw != nil || err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "client: ") {
				t.Fatalf("Middleware: %v, want an error containing %q", err, tc.want)
			}
		})
	}
	good := client.MiddlewareConfig{Client: cl, TrustedProxies: []string{"10.0.0.0/8", " 192.0.2.1 ", "::ffff:10.0.0.0/104", "fd00::/8"}}
	if err := good.Validate(); err != nil {
		t.Fatalf("Validate(%v): %v", good.TrustedProxies, err)
	}
}

// FuzzClientIP: whatever the headers say, the client IP is the peer unless
// the peer is trusted, and otherwise the peer or an address from the
// header; nothing panics.
func FuzzClientIP(f *testing.F) {
	f.Add("10.0.0.2:1234", "6.6.6.6, 203.0.113.3, 10.0.0.9")
	f.Add("198.51.100.7:1", "203.0.113.1")
	f.Add("[fd00::1]:443", "2001:db8::7, [2001:db8::8]:9, ,,")
	f.Add("[::ffff:10.0.0.5]:1", "::ffff:1.2.3.4")
	f.Fuzz(func(t *testing.T, peer, xff string) {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = peer
		r.Header.Set("X-Forwarded-For", xff)
		trusted := []string{"10.0.0.0/8", "fd00::/8"}
		got, err := client.ClientIP(r, trusted)
		if err != nil {
			t.Fatal(err)
		}
		ap, perr := netip.ParseAddrPort(peer)
		if perr != nil {
			return // not an IP peer: passed through as it is
		}
		p := ap.Addr().Unmap().WithZone("")
		if !netip.MustParsePrefix("10.0.0.0/8").Contains(p) && !netip.MustParsePrefix("fd00::/8").Contains(p) {
			if got != p.String() {
				t.Fatalf("untrusted peer %s: got %q", peer, got)
			}
			return
		}
		if got == p.String() {
			return
		}
		a, err := netip.ParseAddr(got)
		if err != nil {
			t.Fatalf("got %q, not an address", got)
		}
		found := false
		for hop := range strings.SplitSeq(xff, ",") {
			hop = strings.TrimSpace(hop)
			h, err := netip.ParseAddr(hop)
			if err != nil {
				hp, err := netip.ParseAddrPort(hop)
				if err != nil {
					continue
				}
				h = hp.Addr()
			}
			if h.Unmap().WithZone("") == a {
				found = true
			}
		}
		if !found {
			t.Fatalf("peer %s, X-Forwarded-For %q: got %q from neither", peer, xff, got)
		}
	})
}
