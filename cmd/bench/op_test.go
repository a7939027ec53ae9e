package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/ringlimit/ringlimit/proto/ringlimitv1"
)

func TestParseFlagsOp(t *testing.T) {
	c, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.op != "check" || c.reserveCost != 10 || c.reserveTTL != 0 {
		t.Errorf("defaults: op %q reserve-cost %d reserve-ttl %v, want check, 10, 0", c.op, c.reserveCost, c.reserveTTL)
	}
	for _, good := range [][]string{
		{"--op", "peek"},
		{"--op", "peek", "--proto", "client", "--batch", "4"},
		{"--op", "peek", "--proto", "http"},
		{"--op", "peek", "--algorithm", "sliding_window_log"},
		{"--op", "reserve-settle"},
		{"--op", "reserve-settle", "--proto", "client", "--reserve-cost", "1", "--reserve-ttl", "1s"},
		{"--op", "reserve-settle", "--proto", "http", "--reserve-ttl", "24h"},
		{"--op", "reserve-settle", "--limit", "5", "--reserve-cost", "5"},
		{"--op", "check", "--reserve-cost", "0"}, // only reserve-settle reads it
	} {
		if _, err := parseFlags(good, io.Discard); err != nil {
			t.Errorf("parseFlags(%q): %v", good, err)
		}
	}
	for _, bad := range []struct {
		args []string
		want string // the flag the error names
	}{
		{[]string{"--op", "spend"}, "--op"},
		{[]string{"--op", ""}, "--op"},
		{[]string{"--op", "peek", "--proto", "rls"}, "--op peek: --proto"},
		{[]string{"--op", "peek", "--proto", "authz"}, "--op peek: --proto"},
		{[]string{"--op", "reserve-settle", "--proto", "rls"}, "--op reserve-settle: --proto"},
		{[]string{"--op", "peek", "--target-health"}, "--op peek: ringlimit targets only"},
		{[]string{"--op", "peek", "--target", "redis://127.0.0.1:6379"}, "--op peek: ringlimit targets only"},
		{[]string{"--op", "peek", "--lease"}, "--lease"},
		{[]string{"--op", "reserve-settle", "--lease"}, "--lease"},
		{[]string{"--op", "reserve-settle", "--batch", "2"}, "--batch"},
		{[]string{"--op", "reserve-settle", "--algorithm", "leaky_bucket"}, "--algorithm"},
		{[]string{"--op", "reserve-settle", "--reserve-cost", "0"}, "--reserve-cost"},
		{[]string{"--op", "reserve-settle", "--limit", "5", "--reserve-cost", "6"}, "--reserve-cost: at most the burst (5)"},
		{[]string{"--op", "reserve-settle", "--burst", "3", "--reserve-cost", "4"}, "--reserve-cost: at most the burst (3)"},
		{[]string{"--op", "reserve-settle", "--reserve-ttl", "999ms"}, "--reserve-ttl"},
		{[]string{"--op", "reserve-settle", "--reserve-ttl", "24h0m1s"}, "--reserve-ttl"},
		{[]string{"--op", "reserve-settle", "--reserve-ttl", "1500100us"}, "--reserve-ttl"},
		{[]string{"--op", "reserve-settle", "--reserve-ttl", "-1s"}, "--reserve-ttl"},
	} {
		_, err := parseFlags(bad.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("parseFlags(%q) = %v, want an error naming %q", bad.args, err, bad.want)
		}
	}
	var errOut strings.Builder
	if code := realMain([]string{"--op", "settle"}, io.Discard, &errOut); code != 2 || !strings.Contains(errOut.String(), "--op") {
		t.Errorf("bad --op: exit %d, stderr %q; want 2 naming --op", code, errOut.String())
	}
}

// TestOpRequests: the exact requests of a reserve and a settle.
func TestOpRequests(t *testing.T) {
	lim := &pb.Limit{Algorithm: pb.Algorithm_TOKEN_BUCKET, Limit: 1_000_000_000, PerMs: 1000}
	cost := int64(10)
	got := reserveCheck("bench:7", lim, &cost, 30*time.Second)
	want := &pb.Check{Key: "bench:7", Cost: proto.Int64(10), Limit: &pb.Limit{Algorithm: pb.Algorithm_TOKEN_BUCKET, Limit: 1_000_000_000, PerMs: 1000},
		Reserve: true, ReserveTtlMs: 30_000}
	if !proto.Equal(got, want) {
		t.Errorf("reserveCheck = %v, want %v", got, want)
	}
	if got := reserveCheck("k", lim, &cost, 0); got.GetReserveTtlMs() != 0 || got.GetPeek() || !got.GetReserve() || got.GetCost() != 10 {
		t.Errorf("reserveCheck without a TTL = %v", got)
	}
	if got, want := settleRequest("r1.abc", 3), (&pb.SettleRequest{Reservation: "r1.abc", Cost: 3}); !proto.Equal(got, want) {
		t.Errorf("settleRequest = %v, want %v", got, want)
	}

	limitJSON := []byte(`,"limit":{"limit":5,"per":"1s"}}`)
	var b bytes.Buffer
	if err := httpReserveBody(&b, `bench:"7"`, 10, 90*time.Second, limitJSON); err != nil {
		t.Fatal(err)
	}
	if got, want := b.String(), `{"key":"bench:\"7\"","cost":10,"reserve":true,"reserve_ttl":"1m30s","limit":{"limit":5,"per":"1s"}}`; got != want {
		t.Errorf("httpReserveBody = %s, want %s", got, want)
	}
	b.Reset()
	if err := httpReserveBody(&b, "bench:7", 1, 0, limitJSON); err != nil {
		t.Fatal(err)
	}
	if got, want := b.String(), `{"key":"bench:7","cost":1,"reserve":true,"limit":{"limit":5,"per":"1s"}}`; got != want {
		t.Errorf("httpReserveBody without a TTL = %s, want %s", got, want)
	}
	sb, err := httpSettleBody("r1.abc", 0)
	if err != nil || string(sb) != `{"reservation":"r1.abc","cost":0}` {
		t.Errorf("httpSettleBody = %s, %v", sb, err)
	}

	for range 1000 {
		if c := trueCost(10); c < 0 || c > 10 {
			t.Fatalf("trueCost(10) = %d, want 0..10", c)
		}
	}
	seen := map[int64]bool{}
	for range 1000 {
		seen[trueCost(2)] = true
	}
	if len(seen) != 3 {
		t.Errorf("trueCost(2) drew %v in 1000 draws, want each of 0, 1 and 2", seen)
	}
}

// opLimiter is a RateLimiter that checks every request is the one --op
// sends: with peek every check peeks; with reserve every check is a
// reserve of 10 on an admitting limit, answered with the reservation
// "r-<key>-<n>" (keys ending in an odd digit are refused, without one), and every settle
// settles a known reservation once, at 0..10. noReservation answers
// admitted reserves without one (a node that does not know reserve).
type opLimiter struct {
	pb.UnimplementedRateLimiterServer
	peek, reserve, noReservation bool

	mu      sync.Mutex
	open    map[string]bool // reservations answered and not settled
	checks  int
	settles int
	costs   map[int64]int // settles by cost
}

func (f *opLimiter) Check(_ context.Context, req *pb.CheckRequest) (*pb.CheckResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := &pb.CheckResponse{}
	for _, c := range req.GetChecks() {
		f.checks++
		want := &pb.Check{Key: c.GetKey(), Limit: &pb.Limit{Algorithm: pb.Algorithm_TOKEN_BUCKET, Limit: 1_000_000_000, PerMs: 1000}, Peek: f.peek}
		if f.reserve {
			want.Cost, want.Reserve = proto.Int64(10), true
		}
		if !strings.HasPrefix(c.GetKey(), "bench:") || !proto.Equal(c, want) {
			return nil, status.Errorf(codes.InvalidArgument, "check %v, want %v", c, want)
		}
		last := c.GetKey()[len(c.GetKey())-1]
		d := &pb.Decision{Allowed: (last-'0')%2 == 0}
		if f.reserve && d.Allowed && !f.noReservation {
			d.Reservation = fmt.Sprintf("r-%s-%d", c.GetKey(), f.checks)
			f.open[d.Reservation] = true
		}
		resp.Decisions = append(resp.Decisions, d)
	}
	return resp, nil
}

func (f *opLimiter) Settle(_ context.Context, req *pb.SettleRequest) (*pb.SettleResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.reserve || !f.open[req.GetReservation()] || req.GetCost() < 0 || req.GetCost() > 10 {
		return nil, status.Errorf(codes.NotFound, "settle %v", req)
	}
	delete(f.open, req.GetReservation())
	f.settles++
	f.costs[req.GetCost()]++
	return &pb.SettleResponse{Settled: true, Cost: req.GetCost()}, nil
}

// startOpLimiter serves f on n loopback ports (n nodes sharing one
// state, as a reservation can be settled through any node) and returns the
// addresses.
func startOpLimiter(t *testing.T, f *opLimiter, n int) []string {
	t.Helper()
	f.open, f.costs = map[string]bool{}, map[int64]int{}
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

func TestRunPeek(t *testing.T) {
	for _, proto := range []string{"grpc", "client"} {
		t.Run(proto, func(t *testing.T) {
			f := &opLimiter{peek: true}
			addrs := startOpLimiter(t, f, 2)
			res, err := run(context.Background(), shortConfig(t, "--proto", proto, "--op", "peek", "--targets", strings.Join(addrs, ","), "--batch", "2"))
			if err != nil {
				t.Fatal(err)
			}
			checkCommon(t, res)
			if res.Op != "peek" || res.Checks != 2*res.Requests || res.Calls != res.Checks || res.CallsPerS != res.ChecksPerS {
				t.Errorf("op %q requests %d checks %d calls %d (%v/s, checks %v/s); want peek, 2 checks a request, calls = checks",
					res.Op, res.Requests, res.Checks, res.Calls, res.CallsPerS, res.ChecksPerS)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.checks < int(res.Checks) || f.settles != 0 {
				t.Errorf("the nodes saw %d checks and %d settles, want at least the %d checks counted and no settle", f.checks, f.settles, res.Checks)
			}
			var sb strings.Builder
			if err := res.writeSummary(&sb); err != nil || !strings.Contains(sb.String(), "op           peek: every check a peek") {
				t.Errorf("summary: %v\n%s", err, sb.String())
			}
			sb.Reset()
			res.writeJSON(&sb)
			if !strings.Contains(sb.String(), `"op":"peek"`) || !strings.Contains(sb.String(), fmt.Sprintf(`"calls":%d,`, res.Calls)) {
				t.Errorf("json: %s", sb.String())
			}
		})
	}
}

func TestRunReserveSettle(t *testing.T) {
	for _, proto := range []string{"grpc", "client"} {
		t.Run(proto, func(t *testing.T) {
			f := &opLimiter{reserve: true}
			addrs := startOpLimiter(t, f, 2)
			res, err := run(context.Background(), shortConfig(t, "--proto", proto, "--op", "reserve-settle", "--targets", strings.Join(addrs, ",")))
			if err != nil {
				t.Fatal(err)
			}
			checkCommon(t, res)
			// 50 keys, half ending in an odd digit: refused, no settle; the
			// others one reserve and one settle each.
			if res.Op != "reserve-settle" || res.Checks != res.Requests || res.Calls != res.Requests+res.Allowed || res.Rejected == 0 || res.Allowed == 0 {
				t.Errorf("op %q requests %d checks %d allowed %d rejected %d calls %d; want calls = requests + allowed",
					res.Op, res.Requests, res.Checks, res.Allowed, res.Rejected, res.Calls)
			}
			if f := float64(res.Rejected) / float64(res.Checks); f < 0.4 || f > 0.6 {
				t.Errorf("refused fraction %.3f, want ≈ 0.5", f)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			// Every admitted reserve was settled, those of the warm-up and
			// of pairs still running at the end of the window too.
			if f.settles < int(res.Allowed) || len(f.open) != 0 {
				t.Errorf("settles %d for %d admitted reserves in the window (%d checks in all), %d reservations left open",
					f.settles, res.Allowed, f.checks, len(f.open))
			}
			if len(f.costs) != 11 && f.settles > 500 {
				t.Errorf("true costs drawn %v in %d settles, want every one of 0..10", f.costs, f.settles)
			}
			var sb strings.Builder
			if err := res.writeSummary(&sb); err != nil || !strings.Contains(sb.String(), "op           reserve-settle: ") {
				t.Errorf("summary: %v\n%s", err, sb.String())
			}
		})
	}
}

func TestRunReserveWithoutReservation(t *testing.T) {
	addrs := startOpLimiter(t, &opLimiter{reserve: true, noReservation: true}, 1)
	res, err := run(context.Background(), shortConfig(t, "--op", "reserve-settle", "--targets", addrs[0]))
	if err != nil {
		t.Fatal(err)
	}
	// Only the refused keys (ending in an odd digit) succeed: an admitted reserve
	// without an id is an error.
	if res.Errors == 0 || res.Allowed != 0 || res.Calls != res.Rejected || !strings.Contains(res.FirstError, "without a reservation") {
		t.Errorf("errors %d allowed %d rejected %d calls %d first error %q", res.Errors, res.Allowed, res.Rejected, res.Calls, res.FirstError)
	}
}

// TestRunHTTPOps: --proto http with --op peek and reserve-settle, every
// body exactly as sent.
func TestRunHTTPOps(t *testing.T) {
	const lim = `"limit":{"algorithm":"token_bucket","burst":0,"limit":1000000000,"per":"1s"}}`
	var mu sync.Mutex
	open := map[string]bool{}
	var peeks, reserves, settles, n int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		var probe struct {
			Key         string `json:"key"`
			Reservation string `json:"reservation"`
			Cost        int64  `json:"cost"`
		}
		if r.Method != http.MethodPost || json.Unmarshal(body, &probe) != nil {
			http.Error(w, string(body), http.StatusBadRequest)
			return
		}
		switch {
		case r.URL.Path == "/v1/check" && string(body) == `{"key":"`+probe.Key+`","peek":true,`+lim:
			peeks++
			io.WriteString(w, `{"allowed":true}`)
		case r.URL.Path == "/v1/check" && string(body) == `{"key":"`+probe.Key+`","cost":10,"reserve":true,"reserve_ttl":"2m0s",`+lim:
			reserves++
			n++
			id := fmt.Sprintf("r-%s-%d", probe.Key, n)
			open[id] = true
			fmt.Fprintf(w, `{"allowed":true,"remaining":5,"reservation":%q}`, id)
		case r.URL.Path == "/v1/settle" && string(body) == fmt.Sprintf(`{"reservation":%q,"cost":%d}`, probe.Reservation, probe.Cost) &&
			open[probe.Reservation] && probe.Cost >= 0 && probe.Cost <= 10:
			settles++
			delete(open, probe.Reservation)
			fmt.Fprintf(w, `{"settled":true,"cost":%d}`, probe.Cost)
		default:
			http.Error(w, r.URL.Path+" "+string(body), http.StatusBadRequest)
		}
	}))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")

	res, err := run(context.Background(), shortConfig(t, "--proto", "http", "--op", "peek", "--http-targets", host))
	if err != nil {
		t.Fatal(err)
	}
	checkCommon(t, res)
	mu.Lock()
	if res.Op != "peek" || res.Calls != res.Checks || res.Checks != res.Requests || peeks < int(res.Requests) || reserves != 0 || settles != 0 {
		t.Errorf("peek: requests %d calls %d; server saw %d peeks, %d reserves, %d settles", res.Requests, res.Calls, peeks, reserves, settles)
	}
	mu.Unlock()

	res, err = run(context.Background(), shortConfig(t, "--proto", "http", "--op", "reserve-settle", "--reserve-ttl", "2m", "--http-targets", host))
	if err != nil {
		t.Fatal(err)
	}
	checkCommon(t, res)
	mu.Lock()
	defer mu.Unlock()
	if res.Calls != 2*res.Requests || res.Allowed != res.Requests || reserves < int(res.Requests) || settles < int(res.Requests) || len(open) > 4 {
		t.Errorf("reserve-settle: requests %d calls %d; server saw %d reserves, %d settles, %d left open", res.Requests, res.Calls, reserves, settles, len(open))
	}
}

// TestRunOpServerCounts: with --op peek or reserve-settle, the nodes'
// counts of the operations in the window (each scrape grows them by 40
// peeks, 20 reservations and 30 settles); with --op check, none.
func TestRunOpServerCounts(t *testing.T) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := n.Add(1)
		fmt.Fprintf(w, "%s{result=\"allowed\"} %d\n%s{result=\"error\"} %d\n%s{result=\"admitted\"} %d\n%s{result=\"ok\"} %d\n",
			metricPeeks, 30*i, metricPeeks, 10*i, metricReservations, 20*i, metricSettles, 30*i)
	}))
	t.Cleanup(srv.Close)
	for _, c := range []struct {
		op   string
		want bool
	}{{"peek", true}, {"reserve-settle", true}, {"check", false}} {
		f := &opLimiter{peek: c.op == "peek", reserve: c.op == "reserve-settle"}
		addrs := startOpLimiter(t, f, 1)
		res, err := run(context.Background(), shortConfig(t, "--op", c.op, "--targets", addrs[0], "--metrics-urls", srv.URL))
		if err != nil {
			t.Fatal(err)
		}
		checkCommon(t, res)
		if !c.want {
			if res.ServerPeeks != nil || res.ServerReservations != nil || res.ServerSettles != nil {
				t.Errorf("--op check: server ops %v %v %v, want none", res.ServerPeeks, res.ServerReservations, res.ServerSettles)
			}
			continue
		}
		if res.ServerPeeks == nil || *res.ServerPeeks != 40 || res.ServerReservations == nil || *res.ServerReservations != 20 ||
			res.ServerSettles == nil || *res.ServerSettles != 30 {
			t.Errorf("--op %s: server peeks %v reservations %v settles %v, want 40, 20, 30", c.op, res.ServerPeeks, res.ServerReservations, res.ServerSettles)
		}
		var sb strings.Builder
		res.writeSummary(&sb)
		if !strings.Contains(sb.String(), "server ops   40 peeks, 20 reservations, 30 settles counted by the nodes in the window") {
			t.Errorf("--op %s: summary\n%s", c.op, sb.String())
		}
	}
}
