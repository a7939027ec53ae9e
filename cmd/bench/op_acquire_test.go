package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/ringlimit/ringlimit/proto/ringlimitv1"
)

func TestParseFlagsAcquire(t *testing.T) {
	c, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.concurrencyLimit != 64 || c.leaseTTL != 30*time.Second {
		t.Errorf("defaults: concurrency-limit %d lease-ttl %v, want 64, 30s", c.concurrencyLimit, c.leaseTTL)
	}
	for _, good := range [][]string{
		{"--op", "acquire-release"},
		{"--op", "acquire-release", "--concurrency-limit", "1", "--lease-ttl", "1ms"},
		{"--op", "acquire-release", "--lease-ttl", "24h"},
		{"--op", "acquire-release", "--target", "redis://127.0.0.1:6379", "--concurrency-limit", "3"},
		{"--op", "acquire-release", "--proto", "client", "--concurrency-limit", "5", "--lease-ttl", "2s"},
		{"--op", "check", "--concurrency-limit", "0", "--lease-ttl", "0s"}, // only acquire-release reads them
	} {
		if _, err := parseFlags(good, io.Discard); err != nil {
			t.Errorf("parseFlags(%q): %v", good, err)
		}
	}
	for _, bad := range []struct {
		args []string
		want string // what the error says
	}{
		{[]string{"--op", "acquire-release", "--batch", "2"}, "--batch: --op acquire-release sends one acquire per request, got 2"},
		{[]string{"--op", "acquire-release", "--concurrency-limit", "0"}, "--concurrency-limit: at least 1, got 0"},
		{[]string{"--op", "acquire-release", "--concurrency-limit", "-3"}, "--concurrency-limit: at least 1, got -3"},
		{[]string{"--op", "acquire-release", "--target", "redis://127.0.0.1:6379", "--concurrency-limit", "0"}, "--concurrency-limit: at least 1, got 0"},
		{[]string{"--op", "acquire-release", "--proto", "http"}, `--op acquire-release: --proto grpc or client, got "http"`},
		{[]string{"--op", "acquire-release", "--proto", "rls"}, `--op acquire-release: --proto grpc or client, got "rls"`},
		{[]string{"--op", "acquire-release", "--proto", "client", "--lease"}, "--lease is for checks"},
		{[]string{"--op", "acquire-release", "--target-health"}, "not --target-health"},
		{[]string{"--op", "acquire-release", "--lease"}, "--lease is for checks"},
		{[]string{"--op", "acquire-release", "--lease-ttl", "0s"}, "--lease-ttl: whole milliseconds from 1ms to 24h, got 0s"},
		{[]string{"--op", "acquire-release", "--lease-ttl", "-1s"}, "--lease-ttl"},
		{[]string{"--op", "acquire-release", "--lease-ttl", "1500us"}, "--lease-ttl"},
		{[]string{"--op", "acquire-release", "--lease-ttl", "24h0m0.001s"}, "--lease-ttl"},
	} {
		_, err := parseFlags(bad.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("parseFlags(%q) = %v, want an error saying %q", bad.args, err, bad.want)
		}
	}
	var errOut strings.Builder
	if code := realMain([]string{"--op", "acquire-release", "--concurrency-limit", "0"}, io.Discard, &errOut); code != 2 ||
		!strings.Contains(errOut.String(), "--concurrency-limit") {
		t.Errorf("--concurrency-limit 0: exit %d, stderr %q; want 2 naming --concurrency-limit", code, errOut.String())
	}
}

// TestAcquireRequests: the exact requests of an acquire and a release.
func TestAcquireRequests(t *testing.T) {
	lim := &pb.Limit{Algorithm: pb.Algorithm_CONCURRENCY, Limit: 64}
	got := acquireRequest("bench:7", lim, 30*time.Second)
	want := &pb.AcquireRequest{Check: &pb.Check{Key: "bench:7", Limit: &pb.Limit{Algorithm: pb.Algorithm_CONCURRENCY, Limit: 64}}, TtlMs: 30_000}
	if !proto.Equal(got, want) {
		t.Errorf("acquireRequest = %v, want %v", got, want)
	}
	if got, want := releaseRequest("l1.abc", 1999*time.Microsecond), (&pb.ReleaseRequest{Lease: "l1.abc", LatencyMs: 1}); !proto.Equal(got, want) {
		t.Errorf("releaseRequest = %v, want %v", got, want)
	}
	for i, c := range []struct {
		d       *pb.Decision
		lease   string
		wantErr bool
	}{
		{&pb.Decision{Allowed: true, Lease: "l1"}, "l1", false},
		{&pb.Decision{Allowed: false}, "", false},
		{&pb.Decision{Allowed: true, Degraded: true}, "", false},
		{&pb.Decision{Allowed: true}, "", true},
		{nil, "", true},
	} {
		lease, err := leaseAnswer(c.d)
		if lease != c.lease || (err != nil) != c.wantErr {
			t.Errorf("step %d: leaseAnswer(%v) = %q, %v; want %q, error %v", i, c.d, lease, err, c.lease, c.wantErr)
		}
	}
}

// acquireLimiter is a RateLimiter that checks every Acquire is the one
// --op acquire-release sends (concurrency 64, TTL 30s) and grants keys
// ending in an even digit the lease "l-<key>-<n>" (the others are
// refused), and that every Release names a granted lease, with outcome OK
// and a latency from 0 to 2000 ms. The first granted acquire arriving
// after holdFrom is answered at holdUntil, whatever its caller does
// meanwhile (a node that grants an acquire its client gave up on).
// noLease grants without a lease.
type acquireLimiter struct {
	pb.UnimplementedRateLimiterServer
	noLease             bool
	holdFrom, holdUntil time.Time

	mu       sync.Mutex
	acquires int
	grants   int
	open     map[string]bool // leases granted and not released
	released map[string]int  // releases per lease
	strays   int             // releases of a lease never granted (or "")
	held     string          // the lease answered at holdUntil
	holding  bool
}

func (f *acquireLimiter) Acquire(_ context.Context, req *pb.AcquireRequest) (*pb.AcquireResponse, error) {
	key := req.GetCheck().GetKey()
	want := &pb.AcquireRequest{Check: &pb.Check{Key: key, Limit: &pb.Limit{Algorithm: pb.Algorithm_CONCURRENCY, Limit: 64}}, TtlMs: 30_000}
	if !strings.HasPrefix(key, "bench:") || !proto.Equal(req, want) {
		return nil, status.Errorf(codes.InvalidArgument, "acquire %v, want %v", req, want)
	}
	granted := (key[len(key)-1]-'0')%2 == 0
	f.mu.Lock()
	hold := granted && !f.holdFrom.IsZero() && !f.holding && time.Now().After(f.holdFrom)
	f.holding = f.holding || hold
	until := f.holdUntil
	f.mu.Unlock()
	if hold {
		<-time.After(time.Until(until))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.acquires++
	d := &pb.Decision{Allowed: granted, Limit: 64}
	if granted {
		f.grants++
		if !f.noLease {
			d.Lease = fmt.Sprintf("l-%s-%d", key, f.acquires)
			d.ExpiresInMs = 30_000
			f.open[d.Lease] = true
			d.InFlight = int64(len(f.open))
		}
		if hold {
			f.held = d.Lease
		}
	}
	return &pb.AcquireResponse{Decision: d}, nil
}

func (f *acquireLimiter) Release(_ context.Context, req *pb.ReleaseRequest) (*pb.ReleaseResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if req.GetOutcome() != pb.Outcome_OUTCOME_OK || req.GetLatencyMs() < 0 || req.GetLatencyMs() > 2000 {
		return nil, status.Errorf(codes.InvalidArgument, "release %v", req)
	}
	l := req.GetLease()
	switch {
	case f.open[l]:
		delete(f.open, l)
		f.released[l]++
		return &pb.ReleaseResponse{Released: true, InFlight: int64(len(f.open)), Limit: 64}, nil
	case f.released[l] > 0:
		f.released[l]++
		return &pb.ReleaseResponse{Released: false, InFlight: int64(len(f.open)), Limit: 64}, nil
	}
	f.strays++
	return nil, status.Errorf(codes.NotFound, "release of %q: no such lease", l)
}

// startAcquireLimiter serves f on n loopback ports sharing its state (a
// lease can be released through any node) and returns the addresses.
func startAcquireLimiter(t *testing.T, f *acquireLimiter, n int) []string {
	t.Helper()
	f.open, f.released = map[string]bool{}, map[string]int{}
	var addrs []string
	for range n {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		s := grpc.NewServer()
		pb.RegisterRateLimiterServer(s, f)
		go s.Serve(lis)
		t.Cleanup(s.Stop)
		addrs = append(addrs, lis.Addr().String())
	}
	return addrs
}

// TestRunAcquireRelease: over gRPC and through the Go client, one Release
// per granted Acquire, none for the refused ones, and no lease left open,
// that of an acquire answered after the end of the run included.
func TestRunAcquireRelease(t *testing.T) {
	for proto, target := range map[string]string{"grpc": "grpc acquire+release, ", "client": "go client acquire+release, "} {
		t.Run(proto, func(t *testing.T) { testRunAcquireRelease(t, proto, target) })
	}
}

// testRunAcquireRelease runs --op acquire-release with --proto proto
// against an acquireLimiter on two ports; target is how the result's
// target begins.
func testRunAcquireRelease(t *testing.T, proto, target string) {
	f := &acquireLimiter{}
	cfg := shortConfig(t, "--proto", proto, "--op", "acquire-release", "--targets", strings.Join(startAcquireLimiter(t, f, 2), ","))
	// The window is 100ms..400ms after the start: the first granted acquire
	// after 200ms is answered 100ms after the end.
	before := time.Now()
	f.mu.Lock()
	f.holdFrom, f.holdUntil = before.Add(200*time.Millisecond), before.Add(500*time.Millisecond)
	f.mu.Unlock()
	res, err := run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkCommon(t, res)
	// 50 keys, half ending in an odd digit: refused, no release; the
	// others one acquire and one release each.
	if res.Op != "acquire-release" || res.Checks != res.Requests || res.Calls != res.Requests+res.Allowed || res.Rejected == 0 || res.Allowed == 0 {
		t.Errorf("op %q requests %d checks %d allowed %d rejected %d calls %d; want calls = requests + allowed",
			res.Op, res.Requests, res.Checks, res.Allowed, res.Rejected, res.Calls)
	}
	if want := target + "concurrency 64, lease ttl 30s ["; !strings.HasPrefix(res.Target, want) || res.Proto != proto {
		t.Errorf("target %q proto %q, want %q… and %q", res.Target, res.Proto, want, proto)
	}
	if res.Algorithm != "concurrency" || res.Limit != 64 || res.PerMs != 0 || res.Burst != 0 || res.LeaseTTLMs != 30_000 {
		t.Errorf("algorithm %q limit %d per_ms %d burst %d lease_ttl_ms %d; want concurrency, 64, 0, 0, 30000",
			res.Algorithm, res.Limit, res.PerMs, res.Burst, res.LeaseTTLMs)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	total := 0
	for l, n := range f.released {
		total += n
		if n != 1 {
			t.Errorf("lease %s released %d times, want 1", l, n)
		}
	}
	if total != f.grants || len(f.open) != 0 || f.strays != 0 || f.grants < int(res.Allowed) {
		t.Errorf("%d grants (%d in the window) of %d acquires, %d releases, %d leases left open, %d stray releases; want a release per grant, none open, none stray",
			f.grants, res.Allowed, f.acquires, total, len(f.open), f.strays)
	}
	if f.held == "" || f.released[f.held] != 1 {
		t.Errorf("the acquire answered after the end of the run: lease %q released %d times, want once", f.held, f.released[f.held])
	}
	var sb strings.Builder
	if err := res.writeSummary(&sb); err != nil || !strings.Contains(sb.String(), "op           acquire-release: ") ||
		!strings.Contains(sb.String(), "limit        concurrency 64 in flight per key, lease ttl 30000ms\n") {
		t.Errorf("summary: %v\n%s", err, sb.String())
	}
	sb.Reset()
	res.writeJSON(&sb)
	for _, want := range []string{`"op":"acquire-release"`, `"lease_ttl_ms":30000`, `"algorithm":"concurrency"`, fmt.Sprintf(`"calls":%d,`, res.Calls)} {
		if !strings.Contains(sb.String(), want) {
			t.Errorf("json has no %s: %s", want, sb.String())
		}
	}
}

func TestRunAcquireWithoutLease(t *testing.T) {
	for _, proto := range []string{"grpc", "client"} {
		t.Run(proto, func(t *testing.T) {
			addrs := startAcquireLimiter(t, &acquireLimiter{noLease: true}, 1)
			res, err := run(context.Background(), shortConfig(t, "--proto", proto, "--op", "acquire-release", "--targets", addrs[0]))
			if err != nil {
				t.Fatal(err)
			}
			// Only the refused keys (ending in an odd digit) succeed: a
			// granted acquire without a lease is an error.
			if res.Errors == 0 || res.Allowed != 0 || res.Calls != res.Rejected || !strings.Contains(res.FirstError, "without a lease") {
				t.Errorf("errors %d allowed %d rejected %d calls %d first error %q", res.Errors, res.Allowed, res.Rejected, res.Calls, res.FirstError)
			}
		})
	}
}
