package client_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/client"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
	pb "github.com/ringlimit/ringlimit/proto/ringlimitv1"
)

// leaseServer is an in-test RateLimiter that grants at most limit leases
// at once and records every call. Safe for concurrent use.
type leaseServer struct {
	pb.UnimplementedRateLimiterServer
	limit        int64
	retryAfterMs int64
	grantMs      int64 // the TTL granted to an acquire that names none

	mu       sync.Mutex
	n        int
	held     map[string]bool
	acquires []*pb.AcquireRequest
	renews   []*pb.RenewRequest
	releases []*pb.ReleaseRequest
	reports  []*pb.ReportRequest
	checks   int
}

func (s *leaseServer) Acquire(_ context.Context, req *pb.AcquireRequest) (*pb.AcquireResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.acquires = append(s.acquires, req)
	d := &pb.Decision{Limit: s.limit, Scope: "inline", Owner: "fake"}
	if int64(len(s.held)) >= s.limit {
		d.RetryAfterMs, d.InFlight = s.retryAfterMs, int64(len(s.held))
		return &pb.AcquireResponse{Decision: d}, nil
	}
	s.n++
	id := fmt.Sprintf("lease-%d", s.n)
	s.held[id] = true
	d.Allowed, d.Lease, d.InFlight, d.ExpiresInMs = true, id, int64(len(s.held)), cmp.Or(req.GetTtlMs(), s.grantMs)
	d.Remaining = s.limit - d.InFlight
	return &pb.AcquireResponse{Decision: d}, nil
}

func (s *leaseServer) Renew(_ context.Context, req *pb.RenewRequest) (*pb.RenewResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.renews = append(s.renews, req)
	if !s.held[req.GetLease()] {
		return nil, status.Error(codes.NotFound, "LEASE_NOT_FOUND: lease not found")
	}
	return &pb.RenewResponse{Renewed: true, ExpiresInMs: req.GetTtlMs(), InFlight: int64(len(s.held)), Limit: s.limit, Owner: "fake"}, nil
}

func (s *leaseServer) Release(_ context.Context, req *pb.ReleaseRequest) (*pb.ReleaseResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.releases = append(s.releases, req)
	released := s.held[req.GetLease()]
	delete(s.held, req.GetLease())
	return &pb.ReleaseResponse{Released: released, InFlight: int64(len(s.held)), Limit: s.limit, Owner: "fake"}, nil
}

func (s *leaseServer) Report(_ context.Context, req *pb.ReportRequest) (*pb.ReportResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reports = append(s.reports, req)
	return &pb.ReportResponse{Reported: 1, Limit: s.limit, Owner: "fake"}, nil
}

func (s *leaseServer) Check(_ context.Context, req *pb.CheckRequest) (*pb.CheckResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.checks++
	ds := make([]*pb.Decision, len(req.GetChecks()))
	for i := range ds {
		ds[i] = &pb.Decision{Allowed: true, Limit: 10, Remaining: 9, Scope: "tier:free", Owner: "fake"}
	}
	return &pb.CheckResponse{Decisions: ds}, nil
}

// counts returns how many acquires, renews, releases and reports s took.
func (s *leaseServer) counts() (acquires, renews, releases, reports int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.acquires), len(s.renews), len(s.releases), len(s.reports)
}

// startLeaseServer serves s on a loopback port until the test ends and
// returns a Client of it (and first of any extra targets) on clk.
func startLeaseServer(t *testing.T, s *leaseServer, clk *testkit.Clock, before ...string) *client.Client {
	t.Helper()
	s.held = map[string]bool{}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pb.RegisterRateLimiterServer(srv, s)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	c, err := client.New(client.Config{Targets: append(before, lis.Addr().String()), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestConcurrencyMiddlewareReleasesOncePerAcquire: four requests (a 200
// that takes 120 ms on the fake clock, a 503, a panic, a client gone
// before the handler wrote) each acquire one lease and release it exactly
// once, with outcomes ok, error, error, dropped and latencies 120, 0, 0, 0.
func TestConcurrencyMiddlewareReleasesOncePerAcquire(t *testing.T) {
	clk := testkit.NewClock(0)
	s := &leaseServer{limit: 5}
	c := startLeaseServer(t, s, clk)
	mw, err := client.ConcurrencyMiddleware(client.ConcurrencyConfig{MiddlewareConfig: client.MiddlewareConfig{Client: c}, InFlight: 5})
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ok":
			clk.Advance(120 * time.Millisecond)
			w.Write([]byte("ok"))
		case "/fail":
			w.WriteHeader(http.StatusServiceUnavailable)
		case "/panic":
			panic("handler broke")
		case "/gone":
			r.Context().Value(cancelKey{}).(context.CancelFunc)()
		}
	}))
	for _, path := range []string{"/ok", "/fail", "/panic", "/gone"} {
		ctx, cancel := context.WithCancel(context.Background())
		r := httptest.NewRequest(http.MethodGet, path, nil).WithContext(context.WithValue(ctx, cancelKey{}, cancel))
		r.RemoteAddr = "192.0.2.1:1234"
		func() {
			defer func() {
				if p := recover(); (p != nil) != (path == "/panic") {
					t.Errorf("%s: panic %v", path, p)
				}
			}()
			h.ServeHTTP(httptest.NewRecorder(), r)
		}()
		cancel()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.acquires) != 4 || len(s.releases) != 4 || len(s.renews) != 0 || len(s.held) != 0 {
		t.Fatalf("acquires %d, releases %d, renews %d, held %d; want 4, 4, 0, 0", len(s.acquires), len(s.releases), len(s.renews), len(s.held))
	}
	want := []struct {
		outcome pb.Outcome
		latency int64
	}{{pb.Outcome_OUTCOME_OK, 120}, {pb.Outcome_OUTCOME_ERROR, 0}, {pb.Outcome_OUTCOME_ERROR, 0}, {pb.Outcome_OUTCOME_DROPPED, 0}}
	for i, rel := range s.releases {
		a := s.acquires[i]
		if a.GetCheck().GetKey() != "ip:192.0.2.1" || a.GetCheck().GetLimit().GetAlgorithm() != pb.Algorithm_CONCURRENCY ||
			a.GetCheck().GetLimit().GetLimit() != 5 || a.GetTtlMs() != 0 {
			t.Errorf("acquire %d: %v", i, a)
		}
		if rel.GetLease() != fmt.Sprintf("lease-%d", i+1) || rel.GetOutcome() != want[i].outcome || rel.GetLatencyMs() != want[i].latency {
			t.Errorf("release %d: %v, want lease-%d %v %d ms", i, rel, i+1, want[i].outcome, want[i].latency)
		}
	}
}

type cancelKey struct{}

// TestConcurrencyMiddlewareRenewsEveryThirdOfTTL: with a TTL of 3s, a
// handler running while the fake clock moves 3 × 1s is renewed exactly 3
// times, each for 3000 ms; after it returns, no renewal follows.
func TestConcurrencyMiddlewareRenewsEveryThirdOfTTL(t *testing.T) {
	clk := testkit.NewClock(0)
	s := &leaseServer{limit: 1}
	c := startLeaseServer(t, s, clk)
	mw, err := client.ConcurrencyMiddleware(client.ConcurrencyConfig{MiddlewareConfig: client.MiddlewareConfig{Client: c},
		InFlight: 1, TTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	unblock := make(chan struct{})
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-unblock }))
	served := make(chan struct{})
	go func() {
		defer close(served)
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/slow", nil))
	}()
	testkit.Eventually(t, 5*time.Second, "the renewal ticker", func() bool { return clk.Timers() == 1 })
	for i := 1; i <= 3; i++ {
		clk.Advance(time.Second)
		testkit.Eventually(t, 5*time.Second, fmt.Sprintf("renewal %d", i), func() bool { _, n, _, _ := s.counts(); return n == i })
	}
	close(unblock)
	<-served
	clk.Advance(10 * time.Second)
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.renews) != 3 || len(s.releases) != 1 {
		t.Fatalf("renews %d, releases %d; want 3, 1", len(s.renews), len(s.releases))
	}
	for i, r := range s.renews {
		if r.GetLease() != "lease-1" || r.GetTtlMs() != 3000 {
			t.Errorf("renew %d: %v, want lease-1 for 3000 ms", i, r)
		}
	}
	if clk.Timers() != 0 {
		t.Errorf("%d timers left on the clock, want 0", clk.Timers())
	}
}

// TestConcurrencyMiddlewareRenewsByGrantedTTL: a policy middleware that
// names no TTL acquires with ttl_ms 0 and renews every third of what the
// cluster granted (6s: every 2s), for 6000 ms, with the request's policy
// fields.
func TestConcurrencyMiddlewareRenewsByGrantedTTL(t *testing.T) {
	clk := testkit.NewClock(0)
	s := &leaseServer{limit: 1, grantMs: 6000}
	c := startLeaseServer(t, s, clk)
	mw, err := client.ConcurrencyMiddleware(client.ConcurrencyConfig{MiddlewareConfig: client.MiddlewareConfig{Client: c, Policy: "api"}})
	if err != nil {
		t.Fatal(err)
	}
	unblock := make(chan struct{})
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-unblock }))
	served := make(chan struct{})
	go func() {
		defer close(served)
		r := httptest.NewRequest(http.MethodGet, "/export", nil)
		r.RemoteAddr = "192.0.2.9:1"
		h.ServeHTTP(httptest.NewRecorder(), r)
	}()
	testkit.Eventually(t, 5*time.Second, "the renewal ticker", func() bool { return clk.Timers() == 1 })
	clk.Advance(time.Second)
	clk.Advance(time.Second)
	testkit.Eventually(t, 5*time.Second, "a renewal", func() bool { _, n, _, _ := s.counts(); return n == 1 })
	close(unblock)
	<-served
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.acquires[0]
	if q := a.GetCheck().GetRequest(); a.GetTtlMs() != 0 || q.GetPolicy() != "api" || q.GetRoute() != "/export" || q.GetIp() != "192.0.2.9" {
		t.Errorf("acquire: %v", a)
	}
	if len(s.renews) != 1 || s.renews[0].GetTtlMs() != 6000 || len(s.releases) != 1 {
		t.Errorf("renews %v, releases %d; want one renew for 6000 ms, one release", s.renews, len(s.releases))
	}
}

// TestConcurrencyMiddlewareFull: with one slot held by a running request,
// a second answers 429 with Retry-After 2 (1,500 ms rounded up), the
// RATE_LIMITED body, X-RateLimit-Limit 1 and X-RateLimit-Remaining 0, and
// its handler never runs; only the first is released.
func TestConcurrencyMiddlewareFull(t *testing.T) {
	clk := testkit.NewClock(0)
	s := &leaseServer{limit: 1, retryAfterMs: 1500}
	c := startLeaseServer(t, s, clk)
	mw, err := client.ConcurrencyMiddleware(client.ConcurrencyConfig{MiddlewareConfig: client.MiddlewareConfig{Client: c}, InFlight: 1})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	ran := 0
	started, unblock := make(chan struct{}), make(chan struct{})
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		ran++
		mu.Unlock()
		close(started)
		<-unblock
	}))
	served := make(chan struct{})
	go func() {
		defer close(served)
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/a", nil))
	}()
	<-started
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/b", nil))
	close(unblock)
	<-served
	var body client.RejectBody
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatal(err)
	}
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "2" ||
		rec.Header().Get("X-RateLimit-Limit") != "1" || rec.Header().Get("X-RateLimit-Remaining") != "0" ||
		body != (client.RejectBody{Code: "RATE_LIMITED", Scope: "inline", RetryAfterMs: 1500, Limit: 1, Remaining: 0}) {
		t.Fatalf("full: %d %v %+v", rec.Code, rec.Header(), body)
	}
	a, _, rel, _ := s.counts()
	if ran != 1 || a != 2 || rel != 1 {
		t.Fatalf("handler ran %d times, acquires %d, releases %d; want 1, 2, 1", ran, a, rel)
	}
}

// TestMiddlewareReportsEachRequest: the rate middleware with Report tells
// the cluster each served request's outcome and latency (a 502 that takes
// 40 ms: error, 40), with the request's policy fields; with an inline
// Limit, Report is a configuration error.
func TestMiddlewareReportsEachRequest(t *testing.T) {
	clk := testkit.NewClock(0)
	s := &leaseServer{limit: 10}
	c := startLeaseServer(t, s, clk)
	mw, err := client.Middleware(client.MiddlewareConfig{Client: c, Policy: "api", Report: true})
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		clk.Advance(40 * time.Millisecond)
		w.WriteHeader(http.StatusBadGateway)
	}))
	r := httptest.NewRequest(http.MethodGet, "/search", nil)
	r.RemoteAddr = "192.0.2.7:1"
	h.ServeHTTP(httptest.NewRecorder(), r)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.checks != 1 || len(s.reports) != 1 {
		t.Fatalf("checks %d, reports %d; want 1, 1", s.checks, len(s.reports))
	}
	rep := s.reports[0]
	if q := rep.GetCheck().GetRequest(); rep.GetOutcome() != pb.Outcome_OUTCOME_ERROR || rep.GetLatencyMs() != 40 ||
		q.GetPolicy() != "api" || q.GetRoute() != "/search" || q.GetIp() != "192.0.2.7" {
		t.Fatalf("report: %v", rep)
	}
	if _, err := client.Middleware(client.MiddlewareConfig{Client: c, Limit: client.PerSecond(5), Report: true}); err == nil {
		t.Fatal("Report with an inline Limit: no error")
	}
}

// TestLeaseCalls: Acquire moves past a node that cannot be reached;
// Renew of an unknown lease is ErrLeaseNotFound; Release answers true
// once, then false.
func TestLeaseCalls(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := lis.Addr().String()
	lis.Close()
	s := &leaseServer{limit: 2}
	c := startLeaseServer(t, s, testkit.NewClock(0), dead)
	ctx := context.Background()
	l, err := c.Acquire(ctx, "jobs", 2, 10*time.Second, "req-1")
	if err != nil || !l.Allowed || l.ID != "lease-1" || l.InFlight != 1 || l.Limit != 2 || l.ExpiresIn != 10*time.Second {
		t.Fatalf("Acquire: %+v, %v", l, err)
	}
	if s.acquires[0].GetRequestId() != "req-1" {
		t.Errorf("request id %q, want req-1", s.acquires[0].GetRequestId())
	}
	if _, err := c.Renew(ctx, "lease-9", time.Second); !errors.Is(err, client.ErrLeaseNotFound) {
		t.Errorf("Renew of an unknown lease: %v, want ErrLeaseNotFound", err)
	}
	for i, want := range []bool{true, false} {
		if ok, err := c.Release(ctx, "lease-1", client.OutcomeOK, 0); ok != want || err != nil {
			t.Errorf("release %d: %v, %v; want %v", i+1, ok, err, want)
		}
	}
}
