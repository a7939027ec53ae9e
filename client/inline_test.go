package client_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/client"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
	pb "github.com/ringlimit/ringlimit/proto/ringlimitv1"
)

// wantInline checks the status and rate-limit headers of an answer under
// an inline limit of q per w seconds, and the body of a 429.
func wantInline(t *testing.T, what string, r response, code int, q, w, remaining, resetS, retryMs int64) {
	t.Helper()
	want := map[string]string{
		"X-RateLimit-Limit":     fmt.Sprint(q),
		"X-RateLimit-Remaining": fmt.Sprint(remaining),
		"RateLimit-Policy":      fmt.Sprintf(`"inline";q=%d;w=%d`, q, w),
		"RateLimit":             fmt.Sprintf(`"inline";r=%d;t=%d`, remaining, resetS),
		"Retry-After":           "",
		client.StatusHeader:     "",
	}
	if code == http.StatusTooManyRequests {
		want["Retry-After"] = fmt.Sprint((retryMs + 999) / 1000)
		body := fmt.Sprintf(`{"code":"RATE_LIMITED","scope":"inline","retry_after_ms":%d,"limit":%d,"remaining":%d}`+"\n", retryMs, q, remaining)
		if r.body != body {
			t.Errorf("%s: body %q, want %q", what, r.body, body)
		}
	}
	if r.status != code {
		t.Fatalf("%s: %d %q, want %d", what, r.status, r.body, code)
	}
	for k, v := range want {
		if got := r.header.Get(k); got != v {
			t.Errorf("%s: %s = %q, want %q", what, k, got, v)
		}
	}
}

// "5 per 10 s per IP": exactly five 200s, then 429 with the headers, on a
// cluster whose policy file knows nothing of it; one token (2 s) later one
// more request passes.
func TestMiddlewareInlineLimitPerIP(t *testing.T) {
	c := newCluster(t, 3, mwPolicy)
	f := newMW(t, c, c.addrs(), func(cfg *client.MiddlewareConfig) {
		cfg.Limit = client.Per(5, 10*time.Second)
	})
	for i := range int64(5) {
		wantInline(t, fmt.Sprintf("request %d", i+1), f.get(t, "/", ""), http.StatusOK, 5, 10, 4-i, 2*(i+1), 0)
	}
	wantInline(t, "request 6", f.get(t, "/", ""), http.StatusTooManyRequests, 5, 10, 0, 10, 2000)
	if n := f.served.Load(); n != 5 {
		t.Fatalf("handler ran %d times, want 5", n)
	}
	ipKey := lkey("ip:127.0.0.1", bucket.TokenBucket, 5, 10*time.Second, 0)
	if got := c.used(t, ipKey); got != 5 {
		t.Fatalf("ip:127.0.0.1: used %d, want 5", got)
	}
	// An authenticated caller (Identity) is its own key, not its IP's.
	wantInline(t, "alice", f.get(t, "/", "alice"), http.StatusOK, 5, 10, 4, 2, 0)
	if got := c.used(t, lkey("key:alice", bucket.TokenBucket, 5, 10*time.Second, 0)); got != 1 {
		t.Fatalf("key:alice: used %d, want 1", got)
	}
	c.clock.Advance(2 * time.Second)
	wantInline(t, "after 2 s", f.get(t, "/", ""), http.StatusOK, 5, 10, 0, 10, 0)
	wantInline(t, "after 2 s, again", f.get(t, "/", ""), http.StatusTooManyRequests, 5, 10, 0, 10, 2000)
	// The policy was never asked.
	if got := c.used(t, "p|default|global|all"); got != 0 {
		t.Fatalf("policy global layer: used %d, want 0", got)
	}
	if errs := f.onErrors(); len(errs) != 0 {
		t.Fatalf("OnError: %v", errs)
	}
}

// Key and Cost choose the bucket and the spend; the burst and algorithm
// of the Limit reach the cluster.
func TestMiddlewareInlineKeyAndCost(t *testing.T) {
	c := newCluster(t, 3, "")
	f := newMW(t, c, c.addrs(), func(cfg *client.MiddlewareConfig) {
		cfg.Limit = client.PerMinute(6).WithBurst(4)
		cfg.Key = func(r *http.Request) string { return "tenant:" + r.Header.Get("X-API-Key") }
		cfg.Cost = func(r *http.Request) int64 {
			if r.URL.Path == "/heavy" {
				return 3
			}
			return 0
		}
	})
	// 6 per minute: a token every 10 s; burst 4.
	r := f.get(t, "/heavy", "acme")
	if r.status != http.StatusOK || r.header.Get("X-RateLimit-Remaining") != "1" || r.header.Get("RateLimit") != `"inline";r=1;t=30` {
		t.Fatalf("heavy: %d remaining %q RateLimit %q, want 200, 1, t=30", r.status, r.header.Get("X-RateLimit-Remaining"), r.header.Get("RateLimit"))
	}
	if r := f.get(t, "/heavy", "acme"); r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") != "20" {
		t.Fatalf("heavy again: %d Retry-After %q, want 429 and 20", r.status, r.header.Get("Retry-After"))
	}
	if r := f.get(t, "/heavy", "other"); r.status != http.StatusOK {
		t.Fatalf("another tenant: %d, want 200", r.status)
	}
	if got := c.used(t, lkey("tenant:acme", bucket.TokenBucket, 6, time.Minute, 4)); got != 3 {
		t.Fatalf("tenant:acme: used %d, want 3", got)
	}
	// A key the cluster refuses is 400, not a pass.
	f2 := newMW(t, c, c.addrs(), func(cfg *client.MiddlewareConfig) {
		cfg.Limit = client.PerMinute(6)
		cfg.Key = func(*http.Request) string { return "" }
	})
	if r := f2.get(t, "/", ""); r.status != http.StatusBadRequest || !strings.Contains(r.body, "INVALID_ARGUMENT") {
		t.Fatalf("empty key: %d %q, want 400 INVALID_ARGUMENT", r.status, r.body)
	}
	if n := f2.served.Load(); n != 0 {
		t.Fatalf("handler ran %d times for an empty key", n)
	}
}

func TestMiddlewareInlineConfigErrors(t *testing.T) {
	cl := newClient(t, client.Config{Targets: []string{testkit.DeadAddr(t)}})
	route := func(r *http.Request) string { return r.URL.Path }
	for _, tc := range []struct {
		cfg  client.MiddlewareConfig
		want string
	}{
		{client.MiddlewareConfig{Client: cl, Limit: client.PerSecond(5), Policy: "api"}, "Policy, Route and Tier name policy"},
		{client.MiddlewareConfig{Client: cl, Limit: client.PerSecond(5), Route: route}, "Policy, Route and Tier name policy"},
		{client.MiddlewareConfig{Client: cl, Limit: client.PerSecond(5), Tier: route}, "Policy, Route and Tier name policy"},
		{client.MiddlewareConfig{Client: cl, Key: route}, "Key has no effect without Limit"},
		{client.MiddlewareConfig{Client: cl, Limit: client.PerSecond(0)}, "limit: must be at least 1, got 0"},
	} {
		if mw, err := client.Middleware(tc.cfg); mw != nil || err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Middleware(%+v): %v, want an error containing %q", tc.cfg, err, tc.want)
		}
	}
}

// logLines is a slog destination that keeps each line; safe for
// concurrent use.
type logLines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logLines) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Split(strings.TrimSuffix(l.buf.String(), "\n"), "\n")
}

// An outage (every node answers UNAVAILABLE): 50 requests are served
// (fail open) with X-RateLimit-Status: unavailable and no rate-limit
// headers; the Client's log has one line for all of them, its Errors (as
// exported to Prometheus) counts 50, OnError hears 50; the first answer
// after it logs once more, and later answers log nothing. A second outage
// logs again.
func TestMiddlewareOutageLogsOnce(t *testing.T) {
	const requests = 50
	c := newCluster(t, 3, "")
	var logs logLines
	cl := newClient(t, client.Config{Targets: c.addrs(), Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "ringlimit_client_errors_total",
		Help: "Calls to the ringlimit cluster that no node answered.",
	}, func() float64 { return float64(cl.Errors()) }))
	f := newMW(t, c, c.addrs(), func(cfg *client.MiddlewareConfig) {
		cfg.Client = cl
		cfg.Limit = client.PerHour(1000)
	})
	down := func(string, *pb.CheckRequest) error { return status.Error(codes.Unavailable, "injected outage") }

	c.rpc.setHook(down)
	for i := range requests {
		r := f.get(t, "/", "")
		if r.status != http.StatusOK || r.body != "served /" || r.header.Get(client.StatusHeader) != client.StatusUnavailable {
			t.Fatalf("request %d in the outage: %d %q, %s %q; want the handler's 200 marked unavailable",
				i, r.status, r.body, client.StatusHeader, r.header.Get(client.StatusHeader))
		}
		for _, h := range []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "RateLimit-Policy", "RateLimit", "Retry-After"} {
			if v := r.header.Get(h); v != "" {
				t.Fatalf("request %d: %s = %q on a request no node decided", i, h, v)
			}
		}
	}
	lines := logs.lines()
	if len(lines) != 1 || !strings.Contains(lines[0], "level=WARN") ||
		!strings.Contains(lines[0], `msg="ringlimit: cluster unreachable: no node answered" targets=3`) ||
		!strings.Contains(lines[0], "injected outage") {
		t.Fatalf("log after %d failed requests: %q, want one WARN line", requests, lines)
	}
	if got := cl.Errors(); got != requests {
		t.Fatalf("Errors = %d, want %d", got, requests)
	}
	if got := testkit.Metric(t, reg, "ringlimit_client_errors_total"); got != requests {
		t.Fatalf("ringlimit_client_errors_total = %v, want %d", got, requests)
	}
	errs := f.onErrors()
	if len(errs) != requests || !errors.Is(errs[0], client.ErrNoNode) || !errors.Is(errs[requests-1], client.ErrNoNode) {
		t.Fatalf("OnError heard %d errors (first %v), want %d ErrNoNode", len(errs), errs[0], requests)
	}

	c.rpc.setHook(nil)
	for i := range 5 {
		r := f.get(t, "/", "")
		if r.status != http.StatusOK || r.header.Get(client.StatusHeader) != "" || r.header.Get("X-RateLimit-Remaining") != fmt.Sprint(999-i) {
			t.Fatalf("request %d after the outage: %d, %s %q, remaining %q; want 200 checked, %d left",
				i, r.status, client.StatusHeader, r.header.Get(client.StatusHeader), r.header.Get("X-RateLimit-Remaining"), 999-i)
		}
	}
	lines = logs.lines()
	if len(lines) != 2 || !strings.Contains(lines[1], "level=INFO") ||
		!strings.Contains(lines[1], `msg="ringlimit: cluster reachable again" failed_calls=50`) {
		t.Fatalf("log after recovery: %q, want a second line, INFO, naming 50 failed calls", lines)
	}
	if got := cl.Errors(); got != requests {
		t.Fatalf("Errors = %d after recovery, want still %d", got, requests)
	}

	c.rpc.setHook(down)
	for range 3 {
		f.get(t, "/", "")
	}
	c.rpc.setHook(nil)
	f.get(t, "/", "")
	if lines := logs.lines(); len(lines) != 4 || !strings.Contains(lines[2], "cluster unreachable") ||
		!strings.Contains(lines[3], "failed_calls=3") {
		t.Fatalf("log after a second outage of 3 requests: %q, want two more lines", lines)
	}
	if got := cl.Errors(); got != requests+3 {
		t.Fatalf("Errors = %d, want %d", got, requests+3)
	}
}

// Fail closed: 503, marked unavailable, counted and logged the same way.
func TestMiddlewareOutageFailClosed(t *testing.T) {
	var logs logLines
	dead := []string{testkit.DeadAddr(t), testkit.DeadAddr(t)}
	cl := newClient(t, client.Config{Targets: dead, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	f := newMW(t, nil, dead, func(cfg *client.MiddlewareConfig) {
		cfg.Client = cl
		cfg.Limit = client.PerSecond(5)
		cfg.FailureMode = bucket.FailClosed
	})
	for i := range 10 {
		r := f.get(t, "/", "")
		if r.status != http.StatusServiceUnavailable || r.header.Get(client.StatusHeader) != client.StatusUnavailable {
			t.Fatalf("request %d: %d, %s %q; want 503 marked unavailable", i, r.status, client.StatusHeader, r.header.Get(client.StatusHeader))
		}
	}
	if n := f.served.Load(); n != 0 {
		t.Fatalf("handler ran %d times", n)
	}
	if lines := logs.lines(); len(lines) != 1 || cl.Errors() != 10 {
		t.Fatalf("log %q, Errors %d; want one line and 10", lines, cl.Errors())
	}
}

// gate is a TCP relay to one node that a test can close, as if the node
// had stopped (connections reset, dials refused), and open again at the
// same address. Safe for concurrent use.
type gate struct {
	t      *testing.T
	target string
	addr   string

	mu    sync.Mutex
	lis   net.Listener // nil while closed
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func newGate(t *testing.T, target string) *gate {
	t.Helper()
	g := &gate{t: t, target: target, conns: map[net.Conn]struct{}{}}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g.addr = lis.Addr().String()
	g.serve(lis)
	t.Cleanup(func() {
		g.close()
		g.wg.Wait()
	})
	return g
}

func (g *gate) serve(lis net.Listener) {
	g.mu.Lock()
	g.lis = lis
	g.mu.Unlock()
	g.wg.Go(func() {
		for {
			in, err := lis.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", g.target)
			if err != nil {
				in.Close()
				continue
			}
			if !g.track(in, out) {
				in.Close()
				out.Close()
				return
			}
			for _, dir := range [][2]net.Conn{{in, out}, {out, in}} {
				g.wg.Go(func() {
					io.Copy(dir[0], dir[1])
					dir[0].Close()
					dir[1].Close()
				})
			}
		}
	})
}

// track records a relayed pair, unless the gate has closed meanwhile.
func (g *gate) track(cs ...net.Conn) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.lis == nil {
		return false
	}
	for _, c := range cs {
		g.conns[c] = struct{}{}
	}
	return true
}

// close stops accepting and breaks every relayed connection.
func (g *gate) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.lis != nil {
		g.lis.Close()
		g.lis = nil
	}
	for c := range g.conns {
		c.Close()
	}
	clear(g.conns)
}

// open listens at the gate's address again.
func (g *gate) open() {
	g.t.Helper()
	lis, err := net.Listen("tcp", g.addr)
	if err != nil {
		g.t.Fatal(err)
	}
	g.serve(lis)
}

// The cluster stops answering (every node's address refuses): 50 requests
// served with X-RateLimit-Status: unavailable, one log line, 50 errors;
// when the nodes are back the first answer logs once.
func TestMiddlewareOutageClusterStopped(t *testing.T) {
	const requests = 50
	c := newCluster(t, 3, "")
	var gates []*gate
	var targets []string
	for _, nd := range c.nodes {
		g := newGate(t, nd.addr)
		gates = append(gates, g)
		targets = append(targets, g.addr)
	}
	var logs logLines
	// The gates stand for the whole cluster: the client must not learn
	// the nodes' own addresses from the ring and go round them.
	cl := newClient(t, client.Config{Targets: targets, Timeout: 2 * time.Second, RingRefresh: -1,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		// Reconnect soon after the nodes are back.
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff: backoff.Config{BaseDelay: 10 * time.Millisecond, Multiplier: 1, MaxDelay: 10 * time.Millisecond}})}})
	f := newMW(t, c, targets, func(cfg *client.MiddlewareConfig) {
		cfg.Client = cl
		cfg.Limit = client.PerHour(1000)
	})
	if r := f.get(t, "/", ""); r.status != http.StatusOK || r.header.Get("X-RateLimit-Remaining") != "999" {
		t.Fatalf("before the outage: %d, remaining %q", r.status, r.header.Get("X-RateLimit-Remaining"))
	}
	for _, g := range gates {
		g.close()
	}
	for i := range requests {
		r := f.get(t, "/", "")
		if r.status != http.StatusOK || r.header.Get(client.StatusHeader) != client.StatusUnavailable || r.header.Get("X-RateLimit-Remaining") != "" {
			t.Fatalf("request %d with the cluster stopped: %d, %s %q, remaining %q; want 200 marked unavailable, no rate-limit headers",
				i, r.status, client.StatusHeader, r.header.Get(client.StatusHeader), r.header.Get("X-RateLimit-Remaining"))
		}
	}
	if lines := logs.lines(); len(lines) != 1 || !strings.Contains(lines[0], "cluster unreachable") {
		t.Fatalf("log after %d requests: %q, want one line", requests, lines)
	}
	if got := cl.Errors(); got != requests {
		t.Fatalf("Errors = %d, want %d", got, requests)
	}

	for _, g := range gates {
		g.open()
	}
	var failedMore uint64
	testkit.WaitFor(t, 20*time.Second, "a checked answer after the nodes are back", func() error {
		r := f.get(t, "/", "")
		if r.header.Get(client.StatusHeader) != "" {
			failedMore++
			return fmt.Errorf("%s: %s", client.StatusHeader, r.header.Get(client.StatusHeader))
		}
		if r.status != http.StatusOK || r.header.Get("X-RateLimit-Remaining") != "998" {
			return fmt.Errorf("%d, remaining %q", r.status, r.header.Get("X-RateLimit-Remaining"))
		}
		return nil
	})
	lines := logs.lines()
	if len(lines) != 2 || !strings.Contains(lines[1], fmt.Sprintf(`msg="ringlimit: cluster reachable again" failed_calls=%d`, requests+failedMore)) {
		t.Fatalf("log after recovery: %q, want a second line naming %d failed calls", lines, requests+failedMore)
	}
	for range 5 {
		f.get(t, "/", "")
	}
	if got := logs.lines(); len(got) != 2 {
		t.Fatalf("log after more answers: %q, want still 2 lines", got)
	}
}

// Calls failing at once from many goroutines log one line between them
// and are each counted.
func TestClientOutageConcurrentLogsOnce(t *testing.T) {
	const goroutines, perG = 8, 25
	var logs logLines
	cl := newClient(t, client.Config{Targets: []string{testkit.DeadAddr(t), testkit.DeadAddr(t)},
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	lim := newLimiter(t, cl, client.PerSecond(5))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range goroutines {
		wg.Go(func() {
			<-start // the first calls of all wait for the same dials, and fail together
			for range perG {
				if _, err := lim.AllowN(t.Context(), "k", 1); !errors.Is(err, client.ErrNoNode) {
					t.Errorf("AllowN with no node: %v, want ErrNoNode", err)
					return
				}
			}
		})
	}
	close(start)
	wg.Wait()
	if lines := logs.lines(); len(lines) != 1 || !strings.Contains(lines[0], "cluster unreachable") {
		t.Fatalf("log: %q, want one line", lines)
	}
	if got := cl.Errors(); got != goroutines*perG {
		t.Fatalf("Errors = %d, want %d", got, goroutines*perG)
	}
}
