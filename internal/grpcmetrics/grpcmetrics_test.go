package grpcmetrics

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// series returns the registry's samples whose name starts with prefix, as
// "name{labels} value" lines in the text format.
func series(t *testing.T, reg *prometheus.Registry, prefix string) map[string]bool {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
			t.Fatal(err)
		}
	}
	out := map[string]bool{}
	for _, l := range strings.Split(b.String(), "\n") {
		if strings.HasPrefix(l, prefix) {
			out[l] = true
		}
	}
	return out
}

// A real server with the health service: every method's series exists
// after Init, each call is counted once under its code, an unknown
// method is counted nowhere, and a peer server's calls are apart.
func TestServerCounts(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg)
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(m.ServerOptions("public")...)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(s, hs)
	m.Init("public", s)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	t.Cleanup(s.Stop)

	got := series(t, reg, "ringlimit_grpc_server_handled_total")
	for _, want := range []string{
		`ringlimit_grpc_server_handled_total{code="OK",method="Check",server="public",service="grpc.health.v1.Health"} 0`,
		`ringlimit_grpc_server_handled_total{code="OK",method="Watch",server="public",service="grpc.health.v1.Health"} 0`,
		`ringlimit_grpc_server_handled_total{code="OK",method="List",server="public",service="grpc.health.v1.Health"} 0`,
	} {
		if !got[want] {
			t.Errorf("after Init: no %s in %v", want, got)
		}
	}

	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx := context.Background()
	hc := healthpb.NewHealthClient(cc)
	for range 3 {
		if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "nothing"}); status.Code(err) != codes.NotFound {
			t.Fatalf("Check(nothing): %v, want NotFound", err)
		}
	}
	if err := cc.Invoke(ctx, "/no.Such/Method", &healthpb.HealthCheckRequest{}, &healthpb.HealthCheckResponse{}); status.Code(err) != codes.Unimplemented {
		t.Fatalf("unknown method: %v, want Unimplemented", err)
	}
	// A stream: Watch answers at once, then ends when the client cancels.
	wctx, cancel := context.WithCancel(ctx)
	w, err := hc.Watch(wctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recv(); err != nil {
		t.Fatal(err)
	}
	cancel()
	s.GracefulStop() // waits for the handlers, so the stream is recorded

	got = series(t, reg, "ringlimit_grpc_server_")
	for _, want := range []string{
		`ringlimit_grpc_server_handled_total{code="OK",method="Check",server="public",service="grpc.health.v1.Health"} 3`,
		`ringlimit_grpc_server_handled_total{code="NotFound",method="Check",server="public",service="grpc.health.v1.Health"} 2`,
		`ringlimit_grpc_server_handled_total{code="Canceled",method="Watch",server="public",service="grpc.health.v1.Health"} 1`,
		`ringlimit_grpc_server_handling_seconds_count{method="Check",server="public",service="grpc.health.v1.Health"} 5`,
		`ringlimit_grpc_server_handling_seconds_count{method="Watch",server="public",service="grpc.health.v1.Health"} 1`,
		`ringlimit_grpc_server_handling_seconds_count{method="List",server="public",service="grpc.health.v1.Health"} 0`,
	} {
		if !got[want] {
			t.Errorf("no %s in\n%s", want, strings.Join(keys(got), "\n"))
		}
	}
	handled := 0
	for l := range got {
		if strings.HasPrefix(l, "ringlimit_grpc_server_handled_total{") {
			handled++
			if strings.Contains(l, "no.Such") {
				t.Errorf("an unknown method has a series: %s", l)
			}
		}
	}
	if handled != 5 { // Check OK and NotFound, Watch OK and Canceled, List OK
		t.Errorf("%d handled series, want 5", handled)
	}
}

// The interceptors called directly: exact counts per server and code.
func TestInterceptors(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg)
	if err != nil {
		t.Fatal(err)
	}
	unary := m.UnaryInterceptor("peer")
	info := &grpc.UnaryServerInfo{FullMethod: "/ringlimit.peer.v1.Peer/Replicate"}
	for _, e := range []error{nil, nil, status.Error(codes.Unavailable, "x"), context.DeadlineExceeded} {
		if _, err := unary(context.Background(), nil, info, func(context.Context, any) (any, error) { return nil, e }); err != e {
			t.Fatalf("interceptor returned %v, want %v", err, e)
		}
	}
	stream := m.StreamInterceptor("peer")
	sinfo := &grpc.StreamServerInfo{FullMethod: "/ringlimit.peer.v1.Peer/Check"}
	if err := stream(nil, nil, sinfo, func(any, grpc.ServerStream) error { return nil }); err != nil {
		t.Fatal(err)
	}
	got := series(t, reg, "ringlimit_grpc_server_")
	for _, want := range []string{
		`ringlimit_grpc_server_handled_total{code="OK",method="Replicate",server="peer",service="ringlimit.peer.v1.Peer"} 2`,
		`ringlimit_grpc_server_handled_total{code="Unavailable",method="Replicate",server="peer",service="ringlimit.peer.v1.Peer"} 1`,
		`ringlimit_grpc_server_handled_total{code="DeadlineExceeded",method="Replicate",server="peer",service="ringlimit.peer.v1.Peer"} 1`,
		`ringlimit_grpc_server_handled_total{code="OK",method="Check",server="peer",service="ringlimit.peer.v1.Peer"} 1`,
		`ringlimit_grpc_server_handling_seconds_count{method="Replicate",server="peer",service="ringlimit.peer.v1.Peer"} 4`,
	} {
		if !got[want] {
			t.Errorf("no %s in\n%s", want, strings.Join(keys(got), "\n"))
		}
	}
}

func TestSplit(t *testing.T) {
	for _, c := range []struct{ in, service, method string }{
		{"/grpc.health.v1.Health/Check", "grpc.health.v1.Health", "Check"},
		{"/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", "envoy.service.ratelimit.v3.RateLimitService", "ShouldRateLimit"},
		{"odd", "unknown", "odd"},
	} {
		if s, m := split(c.in); s != c.service || m != c.method {
			t.Errorf("split(%q) = %q, %q; want %q, %q", c.in, s, m, c.service, c.method)
		}
	}
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestRecordAllocs: a call of a method Init saw that ends OK records
// without allocating; one Init did not see still counts.
func TestRecordAllocs(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg)
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	healthpb.RegisterHealthServer(s, health.NewServer())
	m.Init("public", s)
	start := time.Now()
	if n := testing.AllocsPerRun(100, func() { m.record("public", "/grpc.health.v1.Health/Check", start, nil) }); n != 0 {
		t.Errorf("record of a known method: %v allocations, want 0", n)
	}
	m.record("public", "/x.Unknown/Call", start, nil)
	if got := counterValue(t, m.handled.WithLabelValues("public", "grpc.health.v1.Health", "Check", "OK")); got != 101 {
		t.Errorf("Health/Check OK = %v, want 101 (100 runs and the warm-up)", got)
	}
	if got := counterValue(t, m.handled.WithLabelValues("public", "x.Unknown", "Call", "OK")); got != 1 {
		t.Errorf("x.Unknown/Call OK = %v, want 1", got)
	}
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var out dto.Metric
	if err := c.Write(&out); err != nil {
		t.Fatal(err)
	}
	return out.GetCounter().GetValue()
}
