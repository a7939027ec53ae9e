package api

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/ringlimit/ringlimit/bucket"
	pb "github.com/ringlimit/ringlimit/proto/ringlimitv1"
)

// startGRPC serves the env's gRPC surface on a real loopback listener and
// returns a client connected to it.
func (e *testEnv) startGRPC(t testing.TB) pb.RateLimiterClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	e.api.RegisterGRPC(s)
	served := make(chan error, 1)
	go func() { served <- s.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		s.Stop()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		s.Stop()
		if err := <-served; err != nil {
			t.Errorf("grpc Serve: %v", err)
		}
	})
	return pb.NewRateLimiterClient(conn)
}

func grpcCheck(t testing.TB, c pb.RateLimiterClient, req *pb.CheckRequest) (*pb.CheckResponse, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	return c.Check(ctx, req)
}

// pbCheck builds one check; a nil cost leaves it unset (1).
func pbCheck(key string, cost *int64, alg pb.Algorithm, limit, perMs, burst int64) *pb.Check {
	return &pb.Check{Key: key, Cost: cost, Limit: &pb.Limit{Algorithm: alg, Limit: limit, PerMs: perMs, Burst: burst}}
}

func batch(checks ...*pb.Check) *pb.CheckRequest { return &pb.CheckRequest{Checks: checks} }

// dec is a decision from either surface, for comparison.
type dec struct {
	Allowed                             bool
	Limit, Remaining                    int64
	RetryAfterMs, ResetAfterMs, DelayMs int64
	Scope, Owner                        string
}

func fromPB(d *pb.Decision) dec {
	return dec{d.GetAllowed(), d.GetLimit(), d.GetRemaining(), d.GetRetryAfterMs(), d.GetResetAfterMs(), d.GetDelayMs(), d.GetScope(), d.GetOwner()}
}

func showReq(req *pb.CheckRequest) string {
	if n := len(req.GetChecks()); n > 4 {
		return fmt.Sprintf("%d checks, first %v", n, req.GetChecks()[0])
	}
	return fmt.Sprint(req)
}

func TestGRPCInvalid(t *testing.T) {
	e := newTestEnv(t, nil)
	c := e.startGRPC(t)

	// A valid token bucket: 5 per second, capacity 8.
	ok := func(key string) *pb.Check { return pbCheck(key, nil, pb.Algorithm_TOKEN_BUCKET, 5, 1000, 8) }
	with := func(key string, f func(*pb.Check)) *pb.Check { ch := ok(key); f(ch); return ch }

	many := make([]*pb.Check, MaxBatch+1)
	for i := range many {
		many[i] = ok(fmt.Sprintf("g-many-%d", i))
	}
	cases := []struct {
		name  string
		req   *pb.CheckRequest
		field string
		keys  []string // valid keys of the batch, untouched afterwards
	}{
		{"empty batch", batch(), "checks", nil},
		{"batch of 1001", batch(many...), "checks", []string{"g-many-0", "g-many-1000"}},
		{"empty key", batch(ok("g1"), ok("")), "checks[1].key", []string{"g1"}},
		{"key of 1025 bytes", batch(ok("g2"), ok(strings.Repeat("k", bucket.MaxKeyLen+1))), "checks[1].key", []string{"g2"}},
		{"missing limit", batch(&pb.Check{Key: "g3"}), "checks[0].limit", []string{"g3"}},
		{"per_ms 0", batch(with("g4", func(c *pb.Check) { c.Limit.PerMs = 0 })), "checks[0].limit.per_ms", []string{"g4"}},
		{"per_ms -1", batch(with("g5", func(c *pb.Check) { c.Limit.PerMs = -1 })), "checks[0].limit.per_ms", []string{"g5"}},
		{"per_ms above 366 days", batch(with("g6", func(c *pb.Check) { c.Limit.PerMs = int64(bucket.MaxPer/time.Millisecond) + 1 })), "checks[0].limit", []string{"g6"}},
		{"algorithm 99", batch(with("g7", func(c *pb.Check) { c.Limit.Algorithm = 99 })), "checks[0].limit.algorithm", []string{"g7"}},
		{"algorithm -1", batch(ok("g8"), with("g8b", func(c *pb.Check) { c.Limit.Algorithm = -1 })), "checks[1].limit.algorithm", []string{"g8", "g8b"}},
		{"limit 0", batch(with("g9", func(c *pb.Check) { c.Limit.Limit = 0 })), "checks[0].limit.limit", []string{"g9"}},
		{"limit -1", batch(with("g10", func(c *pb.Check) { c.Limit.Limit = -1 })), "checks[0].limit.limit", []string{"g10"}},
		{"limit above the maximum", batch(with("g11", func(c *pb.Check) { c.Limit.Limit = bucket.MaxCount + 1 })), "checks[0].limit", []string{"g11"}},
		{"burst -1", batch(with("g12", func(c *pb.Check) { c.Limit.Burst = -1 })), "checks[0].limit.burst", []string{"g12"}},
		{"cost explicitly 0", batch(with("g13", func(c *pb.Check) { c.Cost = proto.Int64(0) })), "checks[0].cost", []string{"g13"}},
		{"cost -1", batch(with("g14", func(c *pb.Check) { c.Cost = proto.Int64(-1) })), "checks[0].cost", []string{"g14"}},
		{"cost above burst", batch(ok("g15"), ok("g15"), with("g15", func(c *pb.Check) { c.Cost = proto.Int64(9) })), "checks[2].cost", []string{"g15"}},
		{"cost above limit of a window", batch(pbCheck("g16", proto.Int64(6), pb.Algorithm_FIXED_WINDOW, 5, 1000, 100)), "checks[0].cost", []string{"g16"}},
		{"bad check last of three", batch(ok("g17"), ok("g18"), ok("")), "checks[2].key", []string{"g17", "g18"}},
	}
	for i, tc := range cases {
		before := e.store.Len()
		_, err := grpcCheck(t, c, tc.req)
		st, _ := status.FromError(err)
		if st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), tc.field) {
			t.Errorf("step %d (%s): Check(%s)\n  got %v (code %v)\n  want InvalidArgument naming %q", i, tc.name, showReq(tc.req), err, st.Code(), tc.field)
		}
		if n := e.store.Len(); n != before {
			t.Errorf("step %d (%s): store.Len() went from %d to %d: a bad batch applied something", i, tc.name, before, n)
		}
		// Each valid key of the batch is still full: 8 - 3 = 5 remain.
		for _, key := range tc.keys {
			req := batch(with(key, func(c *pb.Check) { c.Cost = proto.Int64(3) }))
			resp, err := grpcCheck(t, c, req)
			w := dec{Allowed: true, Limit: 5, Remaining: 5, ResetAfterMs: 600, Scope: "inline", Owner: "node-1"}
			if err != nil || len(resp.GetDecisions()) != 1 || fromPB(resp.GetDecisions()[0]) != w {
				t.Errorf("step %d (%s): follow-up Check(%v)\n  got %v, %v\n  want %+v", i, tc.name, req, resp, err, w)
			}
		}
	}
}

func TestGRPCBatchOrder(t *testing.T) {
	const tb2 = pb.Algorithm_TOKEN_BUCKET
	d := func(allowed bool, remaining, retry, reset int64) dec {
		return dec{Allowed: allowed, Limit: 2, Remaining: remaining, RetryAfterMs: retry, ResetAfterMs: reset, Scope: "inline", Owner: "node-1"}
	}
	cases := []struct {
		name string
		req  *pb.CheckRequest
		want []dec
	}{
		{"same key", batch(pbCheck("o", nil, tb2, 2, 1000, 0), pbCheck("o", nil, tb2, 2, 1000, 0), pbCheck("o", nil, tb2, 2, 1000, 0)),
			[]dec{d(true, 1, 0, 500), d(true, 0, 0, 1000), d(false, 0, 500, 1000)}},
		{"interleaved keys", batch(pbCheck("p", proto.Int64(2), tb2, 2, 1000, 0), pbCheck("q", nil, tb2, 2, 1000, 0), pbCheck("p", nil, tb2, 2, 1000, 0), pbCheck("q", nil, tb2, 2, 1000, 0)),
			[]dec{d(true, 0, 0, 1000), d(true, 1, 0, 500), d(false, 0, 500, 1000), d(true, 0, 0, 1000)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEnv(t, nil)
			c := e.startGRPC(t)
			resp, err := grpcCheck(t, c, tc.req)
			if err != nil {
				t.Fatalf("Check(%v): %v", tc.req, err)
			}
			if len(resp.GetDecisions()) != len(tc.want) {
				t.Fatalf("Check(%v): %d decisions, want %d", tc.req, len(resp.GetDecisions()), len(tc.want))
			}
			for i, got := range resp.GetDecisions() {
				if fromPB(got) != tc.want[i] {
					t.Errorf("decision %d of Check(%v)\n  got  %+v\n  want %+v", i, tc.req, fromPB(got), tc.want[i])
				}
			}
		})
	}

	t.Run("batch of 1000", func(t *testing.T) {
		e := newTestEnv(t, nil)
		c := e.startGRPC(t)
		checks := make([]*pb.Check, MaxBatch)
		for i := range checks {
			checks[i] = pbCheck("k"+strconv.Itoa(i%10), nil, pb.Algorithm_FIXED_WINDOW, 100, 1000, 0)
		}
		resp, err := grpcCheck(t, c, batch(checks...))
		if err != nil {
			t.Fatalf("Check(1000 checks): %v", err)
		}
		for i, got := range resp.GetDecisions() {
			// Key i%10 is on its (i/10+1)-th check: 100 fit, so all are allowed.
			w := dec{Allowed: true, Limit: 100, Remaining: int64(100 - (i/10 + 1)), ResetAfterMs: 1000, Scope: "inline", Owner: "node-1"}
			if fromPB(got) != w {
				t.Fatalf("decision %d: got %+v, want %+v", i, fromPB(got), w)
			}
		}
		if len(resp.GetDecisions()) != MaxBatch || e.store.Len() != 10 {
			t.Errorf("%d decisions and %d keys, want %d and 10", len(resp.GetDecisions()), e.store.Len(), MaxBatch)
		}
	})
}

// TestGRPCPerMsOverflow: a per_ms beyond the longest period is refused
// before it is turned into a time.Duration, where it would wrap around.
func TestGRPCPerMsOverflow(t *testing.T) {
	e := newTestEnv(t, nil)
	c := e.startGRPC(t)
	for i, perMs := range []int64{1<<58 + 1000, 1<<63 - 1} {
		req := batch(pbCheck("ovf", nil, pb.Algorithm_TOKEN_BUCKET, 5, perMs, 0))
		_, err := grpcCheck(t, c, req)
		if st, _ := status.FromError(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "checks[0].limit.per_ms") {
			t.Errorf("step %d: Check(%v): got %v, want InvalidArgument naming checks[0].limit.per_ms", i, req, err)
		}
	}
}

// parityStep is one check of the parity sequence and the clock step before it.
type parityStep struct {
	advance time.Duration
	key     string
	alg     pb.Algorithm
	limit   int64
	perMs   int64
	burst   int64
	cost    *int64
}

// paritySteps is a fixed pseudo-random sequence of checks over all five
// algorithms, two keys each, with varied costs (some left unset) and clock
// steps (some zero, some sub-millisecond, some past a whole period).
func paritySteps(n int) []parityStep {
	limits := []struct {
		alg                 pb.Algorithm
		limit, perMs, burst int64
	}{
		{pb.Algorithm_TOKEN_BUCKET, 5, 1000, 8},
		{pb.Algorithm_LEAKY_BUCKET, 3, 1500, 4},
		{pb.Algorithm_FIXED_WINDOW, 4, 250, 0},
		{pb.Algorithm_SLIDING_WINDOW_LOG, 6, 2000, 0},
		{pb.Algorithm_SLIDING_WINDOW_COUNTER, 5, 1000, 0},
	}
	r := rand.New(rand.NewPCG(20260105, 1004))
	steps := make([]parityStep, n)
	for i := range steps {
		l := limits[r.IntN(len(limits))]
		capacity := l.limit
		if l.burst > 0 {
			capacity = l.burst
		}
		s := parityStep{key: fmt.Sprintf("par-%d-%d", l.alg, r.IntN(2)), alg: l.alg, limit: l.limit, perMs: l.perMs, burst: l.burst}
		if r.IntN(4) != 0 {
			s.cost = proto.Int64(1 + r.Int64N(capacity))
		}
		switch r.IntN(6) {
		case 0, 1:
		case 5:
			s.advance = time.Duration(1+r.IntN(3000)) * time.Millisecond
		default:
			s.advance = time.Duration(1+r.IntN(300))*time.Millisecond + time.Duration(r.IntN(1000))*time.Microsecond
		}
		steps[i] = s
	}
	return steps
}

var algNames = map[pb.Algorithm]string{
	pb.Algorithm_TOKEN_BUCKET:           "token_bucket",
	pb.Algorithm_LEAKY_BUCKET:           "leaky_bucket",
	pb.Algorithm_FIXED_WINDOW:           "fixed_window",
	pb.Algorithm_SLIDING_WINDOW_LOG:     "sliding_window_log",
	pb.Algorithm_SLIDING_WINDOW_COUNTER: "sliding_window_counter",
}

func (s parityStep) json() string {
	lim := fmt.Sprintf(`{"algorithm":%q,"limit":%d,"per":"%dms","burst":%d}`, algNames[s.alg], s.limit, s.perMs, s.burst)
	cost := ""
	if s.cost != nil {
		cost = strconv.FormatInt(*s.cost, 10)
	}
	return chk(s.key, cost, lim)
}

func TestGRPCHTTPParity(t *testing.T) {
	he := newTestEnv(t, nil)
	hs := he.startHTTP(t)
	ge := newTestEnv(t, nil)
	gc := ge.startGRPC(t)

	type tally struct{ allowed, rejected, delayed int }
	seen := map[pb.Algorithm]*tally{}
	for i, s := range paritySteps(400) {
		he.clock.Advance(s.advance)
		ge.clock.Advance(s.advance)

		body := s.json()
		hr := hs.check(t, body)
		var cr CheckResponse
		if err := json.Unmarshal(hr.body, &cr); err != nil || (hr.status != http.StatusOK && hr.status != http.StatusTooManyRequests) {
			t.Fatalf("step %d: POST /v1/check %s: %d %s (%v)", i, body, hr.status, hr.body, err)
		}
		hd := dec{cr.Allowed, cr.Limit, cr.Remaining, cr.RetryAfterMs, cr.ResetAfterMs, cr.DelayMs, cr.Scope, cr.Owner}
		if hd.Allowed != (hr.status == http.StatusOK) {
			t.Errorf("step %d: POST /v1/check %s: status %d with allowed=%v", i, body, hr.status, hd.Allowed)
		}

		req := batch(&pb.Check{Key: s.key, Cost: s.cost, Limit: &pb.Limit{Algorithm: s.alg, Limit: s.limit, PerMs: s.perMs, Burst: s.burst}})
		resp, err := grpcCheck(t, gc, req)
		if err != nil || len(resp.GetDecisions()) != 1 {
			t.Fatalf("step %d: Check(%v): %v, %v", i, req, resp, err)
		}
		gd := fromPB(resp.GetDecisions()[0])
		if hd != gd {
			t.Fatalf("step %d (+%v): decisions differ\n  HTTP %s\n    -> %+v\n  gRPC %v\n    -> %+v", i, s.advance, body, hd, req, gd)
		}

		tl := seen[s.alg]
		if tl == nil {
			tl = &tally{}
			seen[s.alg] = tl
		}
		if hd.Allowed {
			tl.allowed++
		} else {
			tl.rejected++
		}
		if hd.DelayMs > 0 {
			tl.delayed++
		}
	}
	// The sequence must exercise both answers of every algorithm.
	for alg, name := range algNames {
		tl := seen[alg]
		if tl == nil || tl.allowed == 0 || tl.rejected == 0 {
			t.Errorf("%s: the sequence did not both admit and reject: %+v", name, tl)
		}
	}
	if seen[pb.Algorithm_LEAKY_BUCKET].delayed == 0 {
		t.Errorf("leaky_bucket: no check had delay_ms > 0")
	}
	t.Logf("per algorithm (allowed, rejected, delayed): %v", func() string {
		var b strings.Builder
		for alg, name := range algNames {
			fmt.Fprintf(&b, " %s=%+v", name, *seen[alg])
		}
		return b.String()
	}())
}

func TestGRPCGracefulStopInFlight(t *testing.T) {
	const n = 5
	var gate *gateChecker
	e := newTestEnv(t, func(c Checker) Checker { gate = newGate(c, n); return gate })
	lis := newNotifyListener(t)
	s := grpc.NewServer()
	e.api.RegisterGRPC(s)
	served := make(chan error, 1)
	go func() { served <- s.Serve(lis) }()
	t.Cleanup(s.Stop)
	addr := lis.Addr().String()

	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	client := pb.NewRateLimiterClient(conn)

	type result struct {
		i    int
		resp *pb.CheckResponse
		err  error
	}
	results := make(chan result, n)
	reqs := make([]*pb.CheckRequest, n)
	for i := range n {
		reqs[i] = batch(pbCheck(fmt.Sprintf("stop-%d", i), nil, pb.Algorithm_TOKEN_BUCKET, 10, 1000, 0))
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*waitFor)
			defer cancel()
			resp, err := client.Check(ctx, reqs[i])
			results <- result{i, resp, err}
		}()
	}
	awaitN(t, gate.entered, n, "gRPC checks blocked in the checker")

	stopped := make(chan struct{})
	go func() { s.GracefulStop(); close(stopped) }()
	awaitClosed(t, lis.closed, "listener closed by GracefulStop")
	assertRefused(t, addr)

	// A new client cannot get a call through either.
	conn2, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	_, err = grpcCheck(t, pb.NewRateLimiterClient(conn2), batch(pbCheck("late", nil, pb.Algorithm_TOKEN_BUCKET, 10, 1000, 0)))
	conn2.Close()
	if status.Code(err) != codes.Unavailable {
		t.Errorf("Check on a new connection during GracefulStop: %v, want Unavailable", err)
	}
	select {
	case <-stopped:
		t.Fatalf("GracefulStop returned with %d calls still in flight", n)
	default:
	}

	close(gate.release)
	w := dec{Allowed: true, Limit: 10, Remaining: 9, ResetAfterMs: 100, Scope: "inline", Owner: "node-1"}
	timer := time.NewTimer(waitFor)
	defer timer.Stop()
	for range n {
		select {
		case r := <-results:
			if r.err != nil || len(r.resp.GetDecisions()) != 1 || fromPB(r.resp.GetDecisions()[0]) != w {
				t.Errorf("call %d: Check(%v)\n  got %v, %v\n  want %+v", r.i, reqs[r.i], r.resp, r.err, w)
			}
		case <-timer.C:
			t.Fatalf("in-flight calls did not finish within %v", waitFor)
		}
	}
	select {
	case <-stopped:
	case <-timer.C:
		t.Fatalf("GracefulStop did not return within %v", waitFor)
	}
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("Serve: %v, want nil after GracefulStop", err)
		}
	case <-timer.C:
		t.Fatalf("Serve did not return within %v", waitFor)
	}
	if got := e.store.Len(); got != n {
		t.Errorf("store.Len() = %d, want %d", got, n)
	}
}

// checkFromProto turns the proto's failure mode into bucket.FailureMode by
// number: the two enums must list the same modes in the same order.
func TestGRPCFailureModeEnum(t *testing.T) {
	modes := bucket.FailureModes()
	if len(pb.FailureMode_name) != len(modes) {
		t.Fatalf("proto has %d failure modes, bucket %d", len(pb.FailureMode_name), len(modes))
	}
	for _, m := range modes {
		if got, want := pb.FailureMode(m).String(), strings.ToUpper(m.String()); got != want {
			t.Errorf("failure mode %d: proto %s, bucket %s", m, got, want)
		}
		c, err := checkFromProto(&pb.Check{Key: "k", Limit: &pb.Limit{Limit: 1, PerMs: 1000, FailureMode: pb.FailureMode(m)}})
		if err != nil || c.Mode != m {
			t.Errorf("checkFromProto(failure_mode %v) = mode %v, %v want %v", pb.FailureMode(m), c.Mode, err, m)
		}
	}
}
