package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/client"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
	pb "github.com/ringlimit/ringlimit/proto/ringlimitv1"
)

// mwPolicy: a free tier of 3 per hour, an anonymous tier of 2 per hour by
// IP, /reports costing 2, a global ceiling of 100 per hour; and a second
// policy without an anonymous tier.
const mwPolicy = `
version: mw
policies:
  default:
    default_tier: free
    anonymous_tier: anon
    tiers:
      free: { limit: 3, per: 1h, burst: 3 }
      anon: { limit: 2, per: 1h, burst: 2, key: ip }
    routes:
      - match: /reports
        cost: 2
    global: { limit: 100, per: 1h }
  plain:
    default_tier: free
    tiers:
      free: { limit: 3, per: 1h, burst: 3 }
    global: { limit: 100, per: 1h }
`

// mwFixture is a 3-node cluster, a Client on it, and an httptest server
// whose handler is wrapped by Middleware.
type mwFixture struct {
	c      *testCluster
	srv    *httptest.Server
	served atomic.Int64 // requests that reached the handler
	errs   []error
	mu     sync.Mutex
	erred  chan struct{} // closed at the first OnError
}

func newMW(t *testing.T, c *testCluster, targets []string, tweak func(*client.MiddlewareConfig)) *mwFixture {
	t.Helper()
	f := &mwFixture{c: c, erred: make(chan struct{})}
	cl := newClient(t, client.Config{Targets: targets, Timeout: 5 * time.Second})
	cfg := client.MiddlewareConfig{
		Client:   cl,
		Identity: client.HeaderIdentity("X-API-Key", ""),
		OnError: func(_ *http.Request, err error) {
			f.mu.Lock()
			f.errs = append(f.errs, err)
			if len(f.errs) == 1 {
				close(f.erred)
			}
			f.mu.Unlock()
		},
	}
	if tweak != nil {
		tweak(&cfg)
	}
	mw, err := client.Middleware(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.served.Add(1)
		io.WriteString(w, "served "+r.URL.Path)
	}))
	f.srv = httptest.NewServer(h)
	t.Cleanup(f.srv.Close)
	return f
}

func (f *mwFixture) onErrors() []error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]error(nil), f.errs...)
}

// response is what a test looks at in an answer.
type response struct {
	status int
	header http.Header
	body   string
}

func (f *mwFixture) get(t *testing.T, path, apiKey string) response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, f.srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if apiKey != "" {
		req.Header.Set("X-API-Key", apiKey)
	}
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: string(body)}
}

// wantAdmitted checks a 200 from the handler with its rate-limit headers.
// RateLimit-Policy names the deciding layer and its quota; the gRPC
// decision carries no window, so there is no w=.
func wantAdmitted(t *testing.T, what string, r response, path string, limit, remaining int64, scope string, resetS int64) {
	t.Helper()
	want := map[string]string{
		"X-RateLimit-Limit":     fmt.Sprint(limit),
		"X-RateLimit-Remaining": fmt.Sprint(remaining),
		"RateLimit-Policy":      fmt.Sprintf("%q;q=%d", scope, limit),
		"RateLimit":             fmt.Sprintf("%q;r=%d;t=%d", scope, remaining, resetS),
		"Retry-After":           "",
	}
	if r.status != http.StatusOK || r.body != "served "+path {
		t.Fatalf("%s: %d %q, want 200 from the handler", what, r.status, r.body)
	}
	for k, v := range want {
		if got := r.header.Get(k); got != v {
			t.Errorf("%s: %s = %q, want %q", what, k, got, v)
		}
	}
}

// wantRejected checks a 429 with its headers and exact JSON body.
func wantRejected(t *testing.T, what string, r response, limit, remaining int64, scope string, retryMs, resetS int64) {
	t.Helper()
	want := map[string]string{
		"X-RateLimit-Limit":     fmt.Sprint(limit),
		"X-RateLimit-Remaining": fmt.Sprint(remaining),
		"RateLimit-Policy":      fmt.Sprintf("%q;q=%d", scope, limit),
		"RateLimit":             fmt.Sprintf("%q;r=%d;t=%d", scope, remaining, resetS),
		"Retry-After":           fmt.Sprint((retryMs + 999) / 1000),
		"Content-Type":          "application/json",
	}
	if r.status != http.StatusTooManyRequests {
		t.Fatalf("%s: %d %q, want 429", what, r.status, r.body)
	}
	for k, v := range want {
		if got := r.header.Get(k); got != v {
			t.Errorf("%s: %s = %q, want %q", what, k, got, v)
		}
	}
	body := fmt.Sprintf(`{"code":"RATE_LIMITED","scope":%q,"retry_after_ms":%d,"limit":%d,"remaining":%d}`+"\n", scope, retryMs, limit, remaining)
	if r.body != body {
		t.Errorf("%s: body %q, want %q", what, r.body, body)
	}
}

const (
	freeTokenMs = 20 * 60_000 // one token of 3/h
	anonTokenMs = 30 * 60_000 // one token of 2/h
)

func TestMiddlewareHeadersAndRejection(t *testing.T) {
	c := newCluster(t, 3, mwPolicy)
	f := newMW(t, c, c.addrs(), nil)
	for i := range int64(3) {
		r := f.get(t, "/", "alice")
		wantAdmitted(t, fmt.Sprintf("request %d", i+1), r, "/", 3, 2-i, "tier:free", (i+1)*freeTokenMs/1000)
	}
	r := f.get(t, "/", "alice")
	wantRejected(t, "request 4", r, 3, 0, "tier:free", freeTokenMs, 3*freeTokenMs/1000)
	if n := f.served.Load(); n != 3 {
		t.Fatalf("handler ran %d times, want 3", n)
	}
	// The rejected request spent nothing: the global layer it passed was
	// refunded.
	if got := c.used(t, "p|default|global|all"); got != 3 {
		t.Fatalf("global layer: used %d, want 3", got)
	}
	if got := c.used(t, "p|default|tier:free|key:alice"); got != 3 {
		t.Fatalf("tier layer: used %d, want 3", got)
	}
	// Another caller has its own buckets.
	wantAdmitted(t, "bob", f.get(t, "/", "bob"), "/", 3, 2, "tier:free", freeTokenMs/1000)
	// After one token's worth of time alice gets one more request.
	c.clock.Advance(freeTokenMs * time.Millisecond)
	r = f.get(t, "/", "alice")
	if r.status != http.StatusOK || r.header.Get("X-RateLimit-Remaining") != "0" {
		t.Fatalf("after 20 min: %d, remaining %q; want 200 with 0 left", r.status, r.header.Get("X-RateLimit-Remaining"))
	}
	if errs := f.onErrors(); len(errs) != 0 {
		t.Fatalf("OnError: %v", errs)
	}
}

func TestMiddlewareRouteCost(t *testing.T) {
	c := newCluster(t, 3, mwPolicy)
	f := newMW(t, c, c.addrs(), nil)
	wantAdmitted(t, "/reports", f.get(t, "/reports", "carol"), "/reports", 3, 1, "tier:free", 2*freeTokenMs/1000)
	// Two tokens needed, one left: one token's wait.
	wantRejected(t, "/reports again", f.get(t, "/reports", "carol"), 3, 1, "tier:free", freeTokenMs, 2*freeTokenMs/1000)
	wantAdmitted(t, "/", f.get(t, "/", "carol"), "/", 3, 0, "tier:free", 3*freeTokenMs/1000)
	if got := c.used(t, "p|default|global|all"); got != 3 {
		t.Fatalf("global layer: used %d, want 3 (2 + 1, the rejected 2 refunded)", got)
	}
}

// Cost from the request applies where the route names no cost; a route's
// cost wins over it (policy.Resolve: "the /reports cost beats the
// request's cost").
func TestMiddlewareCostFunc(t *testing.T) {
	c := newCluster(t, 3, mwPolicy)
	f := newMW(t, c, c.addrs(), func(cfg *client.MiddlewareConfig) {
		cfg.Cost = func(r *http.Request) int64 {
			if r.URL.Query().Get("heavy") != "" {
				return 3
			}
			return 0
		}
	})
	wantAdmitted(t, "heavy /", f.get(t, "/?heavy=1", "dave"), "/", 3, 0, "tier:free", 3*freeTokenMs/1000)
	wantAdmitted(t, "heavy /reports", f.get(t, "/reports?heavy=1", "erin"), "/reports", 3, 1, "tier:free", 2*freeTokenMs/1000)
}

func TestMiddlewareAnonymousByIP(t *testing.T) {
	c := newCluster(t, 3, mwPolicy)
	t.Run("anonymous tier", func(t *testing.T) {
		f := newMW(t, c, c.addrs(), nil)
		wantAdmitted(t, "anonymous 1", f.get(t, "/", ""), "/", 2, 1, "tier:anon", anonTokenMs/1000)
		wantAdmitted(t, "anonymous 2", f.get(t, "/", ""), "/", 2, 0, "tier:anon", 2*anonTokenMs/1000)
		wantRejected(t, "anonymous 3", f.get(t, "/", ""), 2, 0, "tier:anon", anonTokenMs, 2*anonTokenMs/1000)
		// A caller with a key from the same address is not affected.
		wantAdmitted(t, "with a key", f.get(t, "/", "frank"), "/", 3, 2, "tier:free", freeTokenMs/1000)
		if got := c.used(t, "p|default|tier:anon|ip:127.0.0.1"); got != 2 {
			t.Fatalf("anonymous bucket of 127.0.0.1: used %d, want 2", got)
		}
	})
	t.Run("no anonymous tier", func(t *testing.T) {
		f := newMW(t, c, c.addrs(), func(cfg *client.MiddlewareConfig) { cfg.Policy = "plain" })
		for i := range int64(3) {
			wantAdmitted(t, fmt.Sprintf("anonymous %d", i+1), f.get(t, "/", ""), "/", 3, 2-i, "tier:free", (i+1)*freeTokenMs/1000)
		}
		wantRejected(t, "anonymous 4", f.get(t, "/", ""), 3, 0, "tier:free", freeTokenMs, 3*freeTokenMs/1000)
		if got := c.used(t, "p|plain|tier:free|ip:127.0.0.1"); got != 3 {
			t.Fatalf("free bucket of 127.0.0.1: used %d, want 3", got)
		}
	})
}

func TestMiddlewareOneCallPerRequest(t *testing.T) {
	c := newCluster(t, 3, mwPolicy)
	f := newMW(t, c, c.addrs(), nil)
	c.rpc.reset()
	for i := range 10 {
		f.get(t, "/", fmt.Sprintf("seq-%d", i%4))
	}
	if calls, checks := c.rpc.calls.Load(), c.rpc.checks.Load(); calls != 10 || checks != 10 {
		t.Fatalf("10 requests: %d checks in %d RPCs, want 10 in 10", checks, calls)
	}
	// Concurrent requests: one check each (RPCs may carry several).
	c.rpc.reset()
	var wg sync.WaitGroup
	for i := range 30 {
		wg.Go(func() {
			if r := f.get(t, "/", fmt.Sprintf("par-%d", i)); r.status != http.StatusOK {
				t.Errorf("par-%d: %d", i, r.status)
			}
		})
	}
	wg.Wait()
	if calls, checks := c.rpc.calls.Load(), c.rpc.checks.Load(); checks != 30 || calls > 30 {
		t.Fatalf("30 concurrent requests: %d checks in %d RPCs, want 30 checks", checks, calls)
	}
}

func TestMiddlewareFailureModes(t *testing.T) {
	dead := []string{testkit.DeadAddr(t), testkit.DeadAddr(t)}
	// Local (the zero value: a MiddlewareConfig that names none) and
	// FailOpen serve the request: the middleware keeps no buckets to fall
	// back to.
	for _, tc := range []struct {
		name  string
		tweak func(*client.MiddlewareConfig)
	}{
		{"fail open (default: local, the zero value)", nil},
		{"local", func(cfg *client.MiddlewareConfig) { cfg.FailureMode = bucket.Local }},
		{"fail open", func(cfg *client.MiddlewareConfig) { cfg.FailureMode = bucket.FailOpen }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newMW(t, nil, dead, tc.tweak)
			start := time.Now()
			r := f.get(t, "/", "alice")
			if r.status != http.StatusOK || r.body != "served /" || time.Since(start) > 2*time.Second {
				t.Fatalf("%d %q after %v, want the handler's 200 at once", r.status, r.body, time.Since(start))
			}
			for _, h := range []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "RateLimit-Policy", "RateLimit", "Retry-After"} {
				if v := r.header.Get(h); v != "" {
					t.Errorf("%s = %q on a request no node decided", h, v)
				}
			}
			if errs := f.onErrors(); len(errs) != 1 || !errors.Is(errs[0], client.ErrNoNode) {
				t.Fatalf("OnError got %v, want one ErrNoNode", errs)
			}
		})
	}
	t.Run("fail closed", func(t *testing.T) {
		f := newMW(t, nil, dead, func(cfg *client.MiddlewareConfig) { cfg.FailureMode = bucket.FailClosed })
		r := f.get(t, "/", "alice")
		if r.status != http.StatusServiceUnavailable || r.header.Get("Content-Type") != "application/json" ||
			r.body != `{"code":"UNAVAILABLE","message":"rate limiter unavailable"}`+"\n" {
			t.Fatalf("%d %q %q, want 503 with the UNAVAILABLE body", r.status, r.header.Get("Content-Type"), r.body)
		}
		if n := f.served.Load(); n != 0 {
			t.Fatalf("handler ran %d times", n)
		}
		if errs := f.onErrors(); len(errs) != 1 || !errors.Is(errs[0], client.ErrNoNode) {
			t.Fatalf("OnError got %v, want one ErrNoNode", errs)
		}
	})
	t.Run("not a failure mode", func(t *testing.T) {
		cl := newClient(t, client.Config{Targets: dead})
		mw, err := client.Middleware(client.MiddlewareConfig{Client: cl, FailureMode: bucket.FailureMode(7)})
		if mw != nil || err == nil || !strings.Contains(err.Error(), "failure_mode(7)") {
			t.Fatalf("Middleware with failure mode 7: %v, want an error naming it", err)
		}
	})
}

// A request the cluster refuses as invalid (an identity or a path the
// policy does not accept: a '|', more than 256 bytes) must not be served
// unlimited: the failure mode is for "no node answers", not for bad input.
func TestMiddlewareInvalidRequestIsNotABypass(t *testing.T) {
	c := newCluster(t, 3, mwPolicy)
	f := newMW(t, c, c.addrs(), nil)
	cases := []struct{ name, path, key string }{
		{"'|' in the API key", "/", "mallory|x"},
		{"API key of 300 bytes", "/", strings.Repeat("m", 300)},
		{"'|' in the path", "/a%7Cb", "mallory"},
		{"path of 300 bytes", "/" + strings.Repeat("p", 300), "mallory"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for i := range 10 {
				if r := f.get(t, tc.path, tc.key); r.status != http.StatusBadRequest || !strings.Contains(r.body, `"INVALID_ARGUMENT"`) {
					t.Fatalf("%s: request %d: %d %s, want 400 INVALID_ARGUMENT", tc.name, i, r.status, r.body)
				}
			}
			if n := f.served.Load(); n != 0 {
				t.Fatalf("%s: handler ran %d times, want 0", tc.name, n)
			}
		})
	}
}

func TestMiddlewareCustomExtractors(t *testing.T) {
	c := newCluster(t, 3, mwPolicy)
	f := newMW(t, c, c.addrs(), func(cfg *client.MiddlewareConfig) {
		cfg.Identity = client.HeaderIdentity("", "X-User")
		cfg.IP = func(r *http.Request) string { return r.Header.Get("X-Forwarded-For") }
		cfg.Route = func(r *http.Request) string { return strings.TrimPrefix(r.URL.Path, "/v2") }
		cfg.Tier = func(r *http.Request) string { return r.Header.Get("X-Tier") }
	})
	do := func(path string, hdr map[string]string) response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, f.srv.URL+path, nil)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := f.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return response{resp.StatusCode, resp.Header, string(body)}
	}
	// User from X-User (trimmed), route /v2/reports → /reports (cost 2).
	wantAdmitted(t, "user", do("/v2/reports", map[string]string{"X-User": " 42 "}), "/v2/reports", 3, 1, "tier:free", 2*freeTokenMs/1000)
	if got := c.used(t, "p|default|tier:free|user:42"); got != 2 {
		t.Fatalf("user 42: used %d, want 2", got)
	}
	// IP from X-Forwarded-For, anonymous tier.
	wantAdmitted(t, "ip", do("/", map[string]string{"X-Forwarded-For": "203.0.113.9"}), "/", 2, 1, "tier:anon", anonTokenMs/1000)
	if got := c.used(t, "p|default|tier:anon|ip:203.0.113.9"); got != 1 {
		t.Fatalf("203.0.113.9: used %d, want 1", got)
	}
	// An unknown tier is refused by the cluster, and OnError says why.
	do("/", map[string]string{"X-User": "43", "X-Tier": "gold"})
	if errs := f.onErrors(); len(errs) != 1 || status.Code(errs[0]) != codes.InvalidArgument || !strings.Contains(errs[0].Error(), `no tier "gold"`) {
		t.Fatalf("unknown tier: OnError %v, want the InvalidArgument naming the tier", errs)
	}
}

// The request's context reaches the cluster call: a client that has gone
// away does not wait for the limiter.
func TestMiddlewareUsesRequestContext(t *testing.T) {
	c := newCluster(t, 1, mwPolicy)
	release := make(chan struct{})
	c.rpc.setHook(func(string, *pb.CheckRequest) error { <-release; return nil })
	defer close(release)
	f := newMW(t, c, c.addrs(), func(cfg *client.MiddlewareConfig) { cfg.FailureMode = bucket.FailClosed })
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.srv.URL+"/", nil)
	start := time.Now()
	resp, err := f.srv.Client().Do(req)
	if err == nil {
		resp.Body.Close()
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%v, want the caller's deadline", err)
	}
	select {
	case <-f.erred:
	case <-time.After(2 * time.Second):
	}
	if errs := f.onErrors(); len(errs) != 1 || !errors.Is(errs[0], context.Canceled) {
		t.Fatalf("OnError %v after %v, want the request's context.Canceled", errs, time.Since(start))
	}
}
