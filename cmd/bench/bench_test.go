package main

import (
	"context"
	"encoding"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/api"
	pb "github.com/ringlimit/ringlimit/proto/ringlimitv1"
)

func TestHotGivesOneKey(t *testing.T) {
	p := newKeyPicker(distHot, 10000, 1.1, 1)
	for range 10000 {
		if k := p.next(); k != 0 {
			t.Fatalf("hot picked key %d, want only 0", k)
		}
	}
}

func TestUniformCoversRange(t *testing.T) {
	const n, draws = 100, 100_000
	var count [n]int
	p := newKeyPicker(distUniform, n, 1.1, 7)
	for range draws {
		k := p.next()
		if k < 0 || k >= n {
			t.Fatalf("uniform picked %d, outside [0, %d)", k, n)
		}
		count[k]++
	}
	// Mean 1000 per key, standard deviation ≈ 31: ±20% is over 6 sigma.
	for k, c := range count {
		if c < 800 || c > 1200 {
			t.Errorf("key %d picked %d times in %d draws over %d keys, want 800..1200", k, c, draws, n)
		}
	}
}

func TestZipfSkew(t *testing.T) {
	const n, draws, s = 10000, 200_000, 1.1
	count := make([]int, n)
	p := newKeyPicker(distZipf, n, s, 3)
	for range draws {
		k := p.next()
		if k < 0 || k >= n {
			t.Fatalf("zipf picked %d, outside [0, %d)", k, n)
		}
		count[k]++
	}
	// P(k) = (1+k)^-s / H, H = Σ_{j=1..n} j^-s ≈ 6.7 for n=10000, s=1.1.
	h := 0.0
	for j := 1; j <= n; j++ {
		h += math.Pow(float64(j), -s)
	}
	for _, k := range []int{0, 1, 9, 99} {
		want := math.Pow(float64(k+1), -s) / h
		got := float64(count[k]) / draws
		sd := math.Sqrt(want * (1 - want) / draws)
		if math.Abs(got-want) > 6*sd {
			t.Errorf("key %d: share %.5f, want %.5f ± %.5f", k, got, want, 6*sd)
		}
	}
	if !(count[0] > count[1] && count[1] > count[9] && count[9] > count[99]) {
		t.Errorf("counts not decreasing with rank: key0 %d, key1 %d, key9 %d, key99 %d", count[0], count[1], count[9], count[99])
	}
	if top := float64(count[0]) / draws; top < 0.1 {
		t.Errorf("hottest key has %.3f of draws, want a strong skew (≈0.15)", top)
	}
	if _, err := parseDist("zipf", 1); err == nil {
		t.Error("zipf with s = 1 accepted; rand.NewZipf needs s > 1")
	}
}

func TestMakeKeys(t *testing.T) {
	ks := makeKeys("b:", 12)
	var got []string
	for i := range ks.n() {
		got = append(got, ks.at(i))
	}
	if want := "b:0,b:1,b:2,b:3,b:4,b:5,b:6,b:7,b:8,b:9,b:10,b:11"; strings.Join(got, ",") != want {
		t.Errorf("makeKeys = %q, want %s", got, want)
	}
}

func TestParseProcStat(t *testing.T) {
	// A command name with spaces and parentheses; minflt (field 10) = 1200,
	// utime (field 14) = 250, stime (field 15) = 75.
	const fixture = "4242 (my (odd) node) S 1 4242 4242 0 -1 4194560 1200 0 0 0 250 75 3 4 20 0 12 0 3456 1234567 890 " +
		"18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n"
	ps, err := parseProcStat(fixture)
	if want := (procStat{utime: 250, stime: 75, minflt: 1200}); err != nil || ps != want {
		t.Fatalf("parseProcStat = %+v, %v; want %+v, nil", ps, err, want)
	}
	for _, bad := range []string{"", "4242 (x) S 1 2 3", "4242 (x) S 1 4242 4242 0 -1 4194560 1200 0 0 0 u 75 0", "4242 (x) S 1 4242 4242 0 -1 4194560 f 0 0 0 250 75 0"} {
		if _, err := parseProcStat(bad); err == nil {
			t.Errorf("parseProcStat(%q) succeeded", bad)
		}
	}
	// And on the real file of this process.
	if v, err := cpuSeconds(os.Getpid()); err != nil || v < 0 {
		t.Errorf("cpuSeconds(self) = %v, %v", v, err)
	}
}

// A process's minor faults, as procSnapshot reads them, count each page it
// touches for the first time: 1,024 fresh pages touched take at least 1,024.
func TestMinorFaultsCountFreshPages(t *testing.T) {
	const pages = 1024
	size := pages * os.Getpagesize()
	mem, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(mem)
	before, err := procSnapshot([]int{os.Getpid()})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < size; i += os.Getpagesize() {
		mem[i] = 1
	}
	after, err := procSnapshot([]int{os.Getpid()})
	if err != nil {
		t.Fatal(err)
	}
	if n := after[0].minflt - before[0].minflt; n < pages {
		t.Fatalf("%d minor faults after touching %d fresh pages, want at least %d", n, pages, pages)
	}
}

func TestParseMachineStat(t *testing.T) {
	const fixture = "cpu  100 5 30 9000 7 2 3 11 0 0\ncpu0 50 2 15 4500 3 1 1 5 0 0\nintr 1\n"
	busy, steal, err := parseMachineStat(fixture)
	if err != nil || busy != 100+5+30+2+3 || steal != 11 {
		t.Fatalf("parseMachineStat = %d, %d, %v; want 140, 11, nil", busy, steal, err)
	}
	if _, _, err := parseMachineStat("cpu0 1 2 3\n"); err == nil {
		t.Error("a per-CPU line accepted as the total")
	}
}

const metricsFixture = `# HELP ringlimit_forward_checks_total Checks sent to their owners.
# TYPE ringlimit_forward_checks_total counter
ringlimit_forward_checks_total 12345
# HELP ringlimit_forward_rpcs_total Peer Check RPCs sent to owners.
# TYPE ringlimit_forward_rpcs_total counter
ringlimit_forward_rpcs_total 2.5e+03
ringlimit_forward_batch_checks_bucket{le="1"} 99
ringlimit_forward_batch_checks_sum 777
ringlimit_forward_checks_total_extra 1
# TYPE ringlimit_checks_total counter
ringlimit_checks_total{algorithm="token_bucket",result="allowed"} 1000
ringlimit_checks_total{algorithm="token_bucket",result="rejected"} 200 1700000000000
ringlimit_checks_total{algorithm="odd } \"label\" value",result="degraded"} 3
go_gc_duration_seconds{quantile="0.5"} 1.2e-05
go_gc_duration_seconds_sum 0.5
go_gc_duration_seconds_count 42
`

func TestParseMetrics(t *testing.T) {
	got, err := parseMetrics(strings.NewReader(metricsFixture), scrapedMetrics...)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{
		metricForwardChecks: 12345,
		metricForwardRPCs:   2500,
		metricChecks:        1203,
		metricGCs:           42,
	}
	if len(got) != len(want) {
		t.Errorf("parseMetrics = %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if _, err := parseMetrics(strings.NewReader("ringlimit_checks_total{a=\"b\" 3\n"), metricChecks); err == nil {
		t.Error("unterminated labels accepted")
	}
	if _, err := parseMetrics(strings.NewReader("ringlimit_checks_total x\n"), metricChecks); err == nil {
		t.Error("non-numeric value accepted")
	}
}

func TestPercentile(t *testing.T) {
	data := make([]time.Duration, 1000)
	for i := range data {
		data[i] = time.Duration(i+1) * time.Millisecond
	}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{50, 500}, {90, 900}, {99, 990}, {99.9, 999}, {100, 1000}, {0.1, 1}, {0.05, 1}} {
		if got := percentile(data, c.p); got != c.want*time.Millisecond {
			t.Errorf("percentile(1..1000 ms, %v) = %v, want %v", c.p, got, c.want*time.Millisecond)
		}
	}
	four := []time.Duration{10, 20, 30, 40}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{25, 10}, {50, 20}, {50.1, 30}, {75, 30}, {99, 40}, {99.9, 40}} {
		if got := percentile(four, c.p); got != c.want {
			t.Errorf("percentile(10,20,30,40, %v) = %v, want %v", c.p, got, c.want)
		}
	}
	if got := percentile(nil, 50); got != 0 {
		t.Errorf("percentile(nil) = %v, want 0", got)
	}
}

func TestParseFlags(t *testing.T) {
	c, err := parseFlags([]string{"--reject-mode", "--burst", "5"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.limit != 1 || c.per != time.Hour || c.burst != 5 {
		t.Errorf("reject mode: limit %d per %v burst %d, want 1 per 1h burst 5 (explicit)", c.limit, c.per, c.burst)
	}
	if len(c.targets) != 3 || c.concurrency != 64 || c.duration != 10*time.Second || c.warmup != 2*time.Second ||
		c.rlsDomain != "bench" || c.rlsKey != "user_id" {
		t.Errorf("defaults: %+v", c)
	}
	for _, bad := range [][]string{
		{"--proto", "http", "--batch", "2"},
		{"--dist", "pareto"},
		{"--batch", "1001"},
		{"--pids", "12,x"},
		{"--algorithm", "gcra"},
		{"--per", "1500us"},
		{"--proto", "rls", "--batch", "2"},
		{"--proto", "authz", "--batch", "2"},
		{"--proto", "rls", "--rls-domain", ""},
		{"--proto", "rls", "--rls-key", ""},
		{"--proto", "authz", "--target-health"},
		{"--proto", "rls", "--target-health"},
		{"--proto", "authz", "--http-targets", ""},
		{"--proto", "gopher"},
	} {
		if _, err := parseFlags(bad, io.Discard); err == nil {
			t.Errorf("parseFlags(%q) accepted", bad)
		}
	}
}

// fakeMetrics serves counters that grow by a fixed step on every scrape:
// 100 forwarded checks in 25 RPCs out of 150 checks per step.
func fakeMetrics(t *testing.T) string {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := n.Add(1)
		fmt.Fprintf(w, "%s %d\n%s %d\n%s{result=\"allowed\"} %d\n", metricForwardChecks, 100*i, metricForwardRPCs, 25*i, metricChecks, 150*i)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/metrics"
}

func shortConfig(t *testing.T, args ...string) config {
	t.Helper()
	base := []string{"--duration", "300ms", "--warmup", "100ms", "--concurrency", "4", "--keys", "50", "--timeout", "2s"}
	c, err := parseFlags(append(base, args...), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func checkCommon(t *testing.T, res *result) {
	t.Helper()
	if res.Requests == 0 || res.Errors != 0 {
		t.Fatalf("requests %d errors %d (%s)", res.Requests, res.Errors, res.FirstError)
	}
	if !(res.P50Ms <= res.P90Ms && res.P90Ms <= res.P99Ms && res.P99Ms <= res.P999Ms && res.P999Ms <= res.MaxMs) || res.P50Ms <= 0 {
		t.Errorf("percentiles out of order: %+v", res)
	}
	var sb strings.Builder
	if err := res.writeSummary(&sb); err != nil || !strings.Contains(sb.String(), "checks/s") {
		t.Errorf("summary: %v\n%s", err, sb.String())
	}
	sb.Reset()
	if err := res.writeJSON(&sb); err != nil || !strings.HasPrefix(sb.String(), "{") || strings.Count(sb.String(), "\n") != 1 {
		t.Errorf("json: %v\n%s", err, sb.String())
	}
}

// startHealth serves the bare health service on a port of its own until
// the test ends, and returns its address.
func startHealth(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serveHealthOn(ctx, lis) }()
	t.Cleanup(func() { cancel(); <-done })
	return lis.Addr().String()
}

// TestRunHealth is the whole loop against an in-process bare health
// server, with this process's pid and fake node metrics.
func TestRunHealth(t *testing.T) {
	cfg := shortConfig(t, "--target-health", "--targets", startHealth(t),
		"--pids", fmt.Sprint(os.Getpid()), "--metrics-urls", fakeMetrics(t))
	start := time.Now()
	res, err := run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("run of 400ms took %v", el)
	}
	checkCommon(t, res)
	if res.Checks != res.Requests || res.Allowed != res.Checks {
		t.Errorf("health: checks %d requests %d allowed %d", res.Checks, res.Requests, res.Allowed)
	}
	if res.ServerCPUS == nil || res.ChecksPerCPUS == nil || res.MachineCPUS == nil || res.OtherCPUS == nil || res.ServerMinorFaults == nil {
		t.Errorf("no server CPU figures with --pids")
	}
	if res.BatchingFactor == nil || *res.BatchingFactor != 4 || res.ForwardedFraction == nil || math.Abs(*res.ForwardedFraction-100.0/150) > 1e-9 {
		t.Errorf("batching %v forwarded %v, want 4 and 2/3", res.BatchingFactor, res.ForwardedFraction)
	}
}

// The nodes' counters are read before the window, in the warm-up, and
// right after it, not at the window's start: a scrape stalls a node for
// milliseconds, which must not weigh on the latencies measured.
func TestCountersReadBeforeTheWindow(t *testing.T) {
	health := startHealth(t)
	var mu sync.Mutex
	var scrapes []time.Time
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		scrapes = append(scrapes, time.Now())
		n := len(scrapes)
		mu.Unlock()
		fmt.Fprintf(w, "%s %d\n%s %d\n%s{result=\"allowed\"} %d\n", metricForwardChecks, 100*n, metricForwardRPCs, 25*n, metricChecks, 150*n)
	}))
	t.Cleanup(srv.Close)

	// A warm-up of 2 s reads the counters 1 s before the window.
	cfg := shortConfig(t, "--target-health", "--targets", health, "--warmup", "2s", "--metrics-urls", srv.URL)
	res, err := run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	// One scrape checks the address before the run, one opens the
	// counters, one closes them.
	if len(scrapes) != 3 {
		t.Fatalf("%d scrapes, want 3", len(scrapes))
	}
	// The window is 300 ms: counters read at its start would span about
	// that; read 1 s before it, 1.3 s, and at least 800 ms however late
	// the timer of the first read runs on a busy machine (a late timer
	// only makes the last read later).
	if span := scrapes[2].Sub(scrapes[1]); span < 800*time.Millisecond {
		t.Errorf("counters read %v apart, want the window of 300ms and the lead of 1s (at least 800ms)", span)
	}
	if res.CountersS == nil {
		t.Error("no counters_s with --metrics-urls")
	} else if *res.CountersS < 0.8 {
		t.Errorf("counters_s = %v, want at least 0.8", *res.CountersS)
	}
	if res.ForwardChecks == nil || *res.ForwardChecks != 100 || *res.ServerChecks != 150 {
		t.Errorf("forward checks %v, server checks %v, want the deltas of one scrape: 100 and 150", res.ForwardChecks, res.ServerChecks)
	}
}

// fakeLimiter admits keys ending in an even digit and marks keys ending
// in 0 degraded.
type fakeLimiter struct {
	pb.UnimplementedRateLimiterServer
}

func (fakeLimiter) Check(_ context.Context, req *pb.CheckRequest) (*pb.CheckResponse, error) {
	resp := &pb.CheckResponse{}
	for _, c := range req.GetChecks() {
		last := c.GetKey()[len(c.GetKey())-1]
		if c.GetLimit().GetLimit() != 1_000_000_000 || c.GetLimit().GetPerMs() != 1000 {
			return nil, fmt.Errorf("limit %v", c.GetLimit())
		}
		resp.Decisions = append(resp.Decisions, &pb.Decision{Allowed: (last-'0')%2 == 0, Degraded: last == '0'})
	}
	return resp, nil
}

func TestRunGRPCBatch(t *testing.T) {
	var addrs []string
	for range 2 {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		s := grpc.NewServer()
		pb.RegisterRateLimiterServer(s, fakeLimiter{})
		go s.Serve(lis)
		t.Cleanup(s.Stop)
		addrs = append(addrs, lis.Addr().String())
	}
	res, err := run(context.Background(), shortConfig(t, "--targets", strings.Join(addrs, ","), "--batch", "4"))
	if err != nil {
		t.Fatal(err)
	}
	checkCommon(t, res)
	if res.Checks != 4*res.Requests || res.Allowed+res.Rejected != res.Checks {
		t.Errorf("checks %d requests %d allowed %d rejected %d", res.Checks, res.Requests, res.Allowed, res.Rejected)
	}
	// 50 uniform keys: half end in an even digit, a tenth in 0.
	if f := float64(res.Allowed) / float64(res.Checks); f < 0.4 || f > 0.6 {
		t.Errorf("allowed fraction %.2f, want ≈ 0.5", f)
	}
	if res.Degraded == 0 || res.Degraded > res.Allowed {
		t.Errorf("degraded %d of allowed %d", res.Degraded, res.Allowed)
	}
	if res.ServerCPUS != nil || res.ServerMinorFaults != nil || res.BatchingFactor != nil {
		t.Errorf("figures reported without --pids / --metrics-urls")
	}
}

func TestRunHTTP(t *testing.T) {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/check" {
			http.Error(w, "wrong route", http.StatusNotFound)
			return
		}
		body, _ := io.ReadAll(r.Body)
		if !strings.Contains(string(body), `"key":"bench:`) || !strings.Contains(string(body), `"per":"1s"`) {
			http.Error(w, string(body), http.StatusBadRequest)
			return
		}
		if calls.Add(1)%2 == 0 {
			w.WriteHeader(http.StatusTooManyRequests)
			io.WriteString(w, `{"allowed":false,"degraded":true}`)
			return
		}
		io.WriteString(w, `{"allowed":true}`)
	}))
	t.Cleanup(srv.Close)
	res, err := run(context.Background(), shortConfig(t, "--proto", "http", "--http-targets", strings.TrimPrefix(srv.URL, "http://")))
	if err != nil {
		t.Fatal(err)
	}
	checkCommon(t, res)
	if res.Allowed == 0 || res.Rejected == 0 || res.Degraded != res.Rejected {
		t.Errorf("allowed %d rejected %d degraded %d", res.Allowed, res.Rejected, res.Degraded)
	}
}

func TestRealMainExitsNonZeroOnErrors(t *testing.T) {
	// Nothing listens on port 1: every request fails.
	var out, errOut strings.Builder
	code := realMain([]string{"--targets", "127.0.0.1:1", "--duration", "200ms", "--warmup", "0s", "--concurrency", "2", "--timeout", "100ms"}, &out, &errOut)
	if code != 1 || !strings.Contains(errOut.String(), "failed") {
		t.Errorf("exit %d, stderr %q", code, errOut.String())
	}
	if code := realMain([]string{"--proto", "ftp"}, &out, io.Discard); code != 2 {
		t.Errorf("bad flag: exit %d, want 2", code)
	}
}

func TestPlotResults(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "r.jsonl")
	lines := `{"name":"ringlimit-uniform","checks_per_s":50000,"p99_ms":4}
{"name":"ringlimit-uniform","checks_per_s":60000,"p99_ms":6}
{"name":"redis-uniform","checks_per_s":40000,"p99_ms":5}
{"name":"base-uniform","checks_per_s":30000,"p99_ms":7}
not json
`
	if err := os.WriteFile(in, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "p.png")
	if err := plotResults(in, out); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != 1200 || b.Dy() != 520 {
		t.Fatalf("image %v, want 1200x520", b)
	}
	// The ringlimit bar of the checks/s chart is the longest: the median of
	// 50,000 and 60,000 (55,000) against 40,000, so it reaches further right
	// than any grey bar; the base build's bar (30,000) is light blue and the
	// shortest.
	blue, grey, light := 0, 0, 0
	for x := 0; x < 600; x++ {
		for y := 40; y < 500; y++ {
			r, g, b, _ := img.At(x, y).RGBA()
			switch {
			case r>>8 == 40 && g>>8 == 100 && b>>8 == 200:
				blue = max(blue, x)
			case r>>8 == 150 && g>>8 == 150 && b>>8 == 150:
				grey = max(grey, x)
			case r>>8 == 140 && g>>8 == 180 && b>>8 == 230:
				light = max(light, x)
			}
		}
	}
	if blue <= grey || grey == 0 {
		t.Fatalf("rightmost blue pixel %d, grey %d: want a longer blue bar", blue, grey)
	}
	if light == 0 || light >= grey {
		t.Fatalf("rightmost light blue pixel %d, grey %d: want a shorter light blue bar for the base build", light, grey)
	}
	if err := plotResults(filepath.Join(dir, "missing"), out); err == nil {
		t.Fatal("plotting a missing file succeeded")
	}
}

func TestClientTargetDescribe(t *testing.T) {
	addrs := []string{"127.0.0.1:1"}
	for _, c := range []struct {
		unbatched, lease bool
		want             string
	}{
		{false, false, "go client (coalescing) [127.0.0.1:1]"},
		{false, true, "go client (coalescing, leases) [127.0.0.1:1]"},
		{true, false, "go client (one call per check, routed to owners) [127.0.0.1:1]"},
	} {
		tgt := &clientTarget{addrs: addrs, limit: &pb.Limit{Lease: c.lease}, unbatched: c.unbatched}
		if got := tgt.Describe(); got != c.want {
			t.Errorf("unbatched=%v lease=%v: %q, want %q", c.unbatched, c.lease, got, c.want)
		}
	}
}

// fakeRLS answers ShouldRateLimit: OK for a value ending in an even digit,
// OVER_LIMIT for an odd one, and fails a request that is not the one
// descriptor {user_id: bench:N} in domain bench.
type fakeRLS struct {
	rlsv3.UnimplementedRateLimitServiceServer
	calls atomic.Int64
	code  rlsv3.RateLimitResponse_Code // if set, every answer's code
}

func (f *fakeRLS) ShouldRateLimit(_ context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	f.calls.Add(1)
	ds := req.GetDescriptors()
	if req.GetDomain() != "bench" || len(ds) != 1 || len(ds[0].GetEntries()) != 1 || ds[0].GetEntries()[0].GetKey() != "user_id" ||
		!strings.HasPrefix(ds[0].GetEntries()[0].GetValue(), "bench:") || req.GetHitsAddend() > 1 {
		return nil, status.Errorf(codes.InvalidArgument, "unexpected request %v", req)
	}
	if f.code != rlsv3.RateLimitResponse_UNKNOWN {
		return &rlsv3.RateLimitResponse{OverallCode: f.code}, nil
	}
	v := ds[0].GetEntries()[0].GetValue()
	code := rlsv3.RateLimitResponse_OK
	if (v[len(v)-1]-'0')%2 == 1 {
		code = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	return &rlsv3.RateLimitResponse{OverallCode: code,
		Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{Code: code}}}, nil
}

// startRLS serves each fake on its own loopback port and returns the
// addresses.
func startRLS(t *testing.T, fakes ...*fakeRLS) []string {
	t.Helper()
	var addrs []string
	for _, f := range fakes {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		s := grpc.NewServer()
		rlsv3.RegisterRateLimitServiceServer(s, f)
		go s.Serve(lis)
		t.Cleanup(s.Stop)
		addrs = append(addrs, lis.Addr().String())
	}
	return addrs
}

func TestRunRLS(t *testing.T) {
	a, b := new(fakeRLS), new(fakeRLS)
	addrs := startRLS(t, a, b)
	res, err := run(context.Background(), shortConfig(t, "--proto", "rls", "--targets", strings.Join(addrs, ",")))
	if err != nil {
		t.Fatal(err)
	}
	checkCommon(t, res)
	if res.Checks != res.Requests || res.Allowed+res.Rejected != res.Checks || res.Degraded != 0 {
		t.Errorf("checks %d requests %d allowed %d rejected %d degraded %d", res.Checks, res.Requests, res.Allowed, res.Rejected, res.Degraded)
	}
	// 50 uniform keys: half end in an even digit.
	if f := float64(res.Allowed) / float64(res.Checks); f < 0.4 || f > 0.6 {
		t.Errorf("allowed fraction %.2f, want ≈ 0.5", f)
	}
	// Round robin: each server had about half of the calls (warm-up included).
	ca, cb := a.calls.Load(), b.calls.Load()
	if ca == 0 || cb == 0 || ca > 2*cb+10 || cb > 2*ca+10 {
		t.Errorf("calls per server %d and %d, want about even", ca, cb)
	}
	if res.Proto != "rls" || !strings.Contains(res.Target, `domain "bench" descriptor user_id=<key>`) {
		t.Errorf("proto %q target %q", res.Proto, res.Target)
	}
}

func TestRunRLSDomainAndKey(t *testing.T) {
	addrs := startRLS(t, new(fakeRLS))
	// The fake wants domain bench and key user_id: other values are refused.
	for _, flags := range [][]string{{"--rls-domain", "other"}, {"--rls-key", "api_key"}} {
		cfg := shortConfig(t, append([]string{"--proto", "rls", "--targets", addrs[0]}, flags...)...)
		res, err := run(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if res.Errors == 0 || res.Requests != 0 || !strings.Contains(res.FirstError, "InvalidArgument") {
			t.Errorf("%q: requests %d errors %d first error %q, want every request refused", flags, res.Requests, res.Errors, res.FirstError)
		}
	}
}

func TestRunRLSCodes(t *testing.T) {
	for _, c := range []struct {
		code                     rlsv3.RateLimitResponse_Code
		allowed, rejected, error bool
	}{
		{rlsv3.RateLimitResponse_OK, true, false, false},
		{rlsv3.RateLimitResponse_OVER_LIMIT, false, true, false},
		{rlsv3.RateLimitResponse_UNKNOWN + 7, false, false, true},
	} {
		f := &fakeRLS{code: c.code}
		addrs := startRLS(t, f)
		res, err := run(context.Background(), shortConfig(t, "--proto", "rls", "--targets", addrs[0]))
		if err != nil {
			t.Fatal(err)
		}
		if (res.Allowed > 0) != c.allowed || (res.Rejected > 0) != c.rejected || (res.Errors > 0) != c.error {
			t.Errorf("code %v: allowed %d rejected %d errors %d (%s)", c.code, res.Allowed, res.Rejected, res.Errors, res.FirstError)
		}
	}
}

func TestRunAuthz(t *testing.T) {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Method != http.MethodGet || r.URL.Path != "/v1/authz" || len(body) != 0 || !strings.HasPrefix(r.Header.Get("X-API-Key"), "bench:") {
			http.Error(w, fmt.Sprintf("%s %s X-API-Key %q body %q", r.Method, r.URL.Path, r.Header.Get("X-API-Key"), body), http.StatusBadRequest)
			return
		}
		if calls.Add(1)%2 == 0 {
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	t.Cleanup(srv.Close)
	res, err := run(context.Background(), shortConfig(t, "--proto", "authz", "--http-targets", strings.TrimPrefix(srv.URL, "http://")))
	if err != nil {
		t.Fatal(err)
	}
	checkCommon(t, res)
	if res.Allowed == 0 || res.Rejected == 0 || res.Degraded != 0 || res.Proto != "authz" {
		t.Errorf("proto %s allowed %d rejected %d degraded %d", res.Proto, res.Allowed, res.Rejected, res.Degraded)
	}
}

// startBare serves n bare HTTP servers on loopback ports and returns their
// addresses.
func startBare(t *testing.T, n int) []string {
	t.Helper()
	var addrs []string
	for range n {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- serveBareHTTPOn(ctx, lis) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("serveBareHTTPOn: %v", err)
			}
		})
		addrs = append(addrs, lis.Addr().String())
	}
	return addrs
}

// TestRunBareHTTP drives three bare servers as the script does: POST
// /v1/check and GET /v1/authz, round robin.
func TestRunBareHTTP(t *testing.T) {
	addrs := strings.Join(startBare(t, 3), ",")
	for _, proto := range []string{"http", "authz"} {
		res, err := run(context.Background(), shortConfig(t, "--proto", proto, "--http-targets", addrs))
		if err != nil {
			t.Fatal(err)
		}
		checkCommon(t, res)
		if res.Allowed != res.Checks || res.Rejected != 0 {
			t.Errorf("%s: checks %d allowed %d rejected %d", proto, res.Checks, res.Allowed, res.Rejected)
		}
	}
}

func TestBareHandler(t *testing.T) {
	h := bareHandler()
	for i, c := range []struct {
		method, path, body, apiKey string
		status                     int
		headers                    []string
	}{
		{"POST", "/v1/check", `{"key":"bench:1","limit":{"algorithm":"token_bucket","limit":1000000000,"per":"1s","burst":0}}`, "", 200,
			[]string{"Content-Type", "X-Ratelimit-Limit", "X-Ratelimit-Remaining", "Ratelimit-Policy", "Ratelimit"}},
		{"POST", "/v1/check", `{"key":"bench:1","limit":{"limit":1,"per":"1s"},"surprise":1}`, "", 400, nil},
		{"POST", "/v1/check", `{"key":"bench:1","limit":{"limit":1,"per":"1s"}} {}`, "", 400, nil},
		{"POST", "/v1/check", `{"key":"bench:1"}`, "", 400, nil},
		{"POST", "/v1/check", `{"key":`, "", 400, nil},
		{"GET", "/v1/check", "", "", 405, nil},
		{"GET", "/v1/authz", "", "bench:1", 200, []string{"X-Ratelimit-Limit", "X-Ratelimit-Remaining", "Ratelimit-Policy", "Ratelimit"}},
		{"POST", "/v1/authz", "", "bench:1", 200, nil},
		{"GET", "/v1/authz", "", "", 400, nil},
	} {
		req := httptest.NewRequest(c.method, c.path, strings.NewReader(c.body))
		if c.apiKey != "" {
			req.Header.Set("X-API-Key", c.apiKey)
			req.Header.Set("X-Original-URI", "/items")
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != c.status {
			t.Errorf("step %d: %s %s %s = %d, want %d (%s)", i, c.method, c.path, c.body, rec.Code, c.status, rec.Body)
		}
		for _, name := range c.headers {
			if rec.Header().Get(name) == "" {
				t.Errorf("step %d: no %s header in %v", i, name, rec.Header())
			}
		}
		if c.status == 200 && c.path == "/v1/check" {
			var got api.CheckResponse
			if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || !got.Allowed || got.Scope != "inline" {
				t.Errorf("step %d: body %s: %+v, %v", i, rec.Body, got, err)
			}
		}
	}
}

// TestBareCheckRequestMatchesAPI keeps the bare server's request body in
// step with the node's: the same JSON names, the same Go kinds.
func TestBareCheckRequestMatchesAPI(t *testing.T) {
	var walk func(prefix string, a, b reflect.Type)
	walk = func(prefix string, a, b reflect.Type) {
		t.Helper()
		if a.NumField() != b.NumField() {
			t.Errorf("%s: api has %d fields, bare %d", prefix, a.NumField(), b.NumField())
			return
		}
		for i := range a.NumField() {
			fa, fb := a.Field(i), b.Field(i)
			name := prefix + fa.Name
			if fa.Name != fb.Name || fa.Tag.Get("json") != fb.Tag.Get("json") {
				t.Errorf("%s: api %s %q, bare %s %q", name, fa.Name, fa.Tag.Get("json"), fb.Name, fb.Tag.Get("json"))
				continue
			}
			ta, tb := fa.Type, fb.Type
			if ta.Kind() == reflect.Pointer && tb.Kind() == reflect.Pointer {
				ta, tb = ta.Elem(), tb.Elem()
			}
			switch {
			case ta.Kind() == reflect.Struct && tb.Kind() == reflect.Struct:
				walk(name+".", ta, tb)
			case ta.Implements(reflect.TypeFor[encoding.TextUnmarshaler]()) || reflect.PointerTo(ta).Implements(reflect.TypeFor[encoding.TextUnmarshaler]()):
				if tb.Kind() != reflect.String {
					t.Errorf("%s: api decodes it from text, bare as %v", name, tb)
				}
			case ta.Kind() != tb.Kind():
				t.Errorf("%s: api %v, bare %v", name, ta, tb)
			}
		}
	}
	walk("", reflect.TypeFor[api.CheckRequest](), reflect.TypeFor[bareCheckRequest]())
}
