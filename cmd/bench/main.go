// Command bench drives a running ringlimit cluster and reports checks/s,
// client-side latency percentiles, decision counts, the CPU seconds the
// server processes used in the measured window, and the batching factor of
// the forwarding between nodes.
//
// cmd/bench is its own Go module (its Redis baseline, chart drawing and
// the envoyproxy/ratelimit baseline stay out of the library's go.mod), so
// it is built and run from its directory:
//
//	cd cmd/bench && go run . --name uniform --pids "$(cat /tmp/ringlimit-cluster/node-*.pid | paste -sd,)" \
//	    --metrics-urls http://127.0.0.1:8081/metrics,http://127.0.0.1:8082/metrics,http://127.0.0.1:8083/metrics
//
// envoyproxy/ratelimit, the baseline of the Envoy rate limit service, is
// pinned as a tool by the module in envoyratelimit/ (its own, so that it
// builds with the dependency versions it asks for); its server is built with
//
//	cd cmd/bench/envoyratelimit && go build -o /tmp/envoy-ratelimit github.com/envoyproxy/ratelimit/src/service_cmd
//
// Each of --concurrency goroutines makes one request at a time, round robin
// over the entry nodes, for --warmup (discarded) and then --duration
// (measured). Latency is measured per request at the client; every latency
// is kept and sorted at the end, so the percentiles are exact.
//
// Dev flags: --serve-health ADDR serves the standard gRPC health service
// (a bare unary no-op) until SIGINT/SIGTERM, and --target-health hammers
// --targets with health checks instead of ringlimit checks: the floor of a
// unary gRPC call on this machine, to read ringlimit's figures against.
// --serve-bare-http ADDR is the same for HTTP: a bare net/http server whose
// POST /v1/check decodes the node's request body and whose /v1/authz reads
// X-API-Key, both answering a fixed admitting decision with the headers a
// node writes; --proto http and --proto authz measure it as they measure
// the nodes.
//
// --proto rls speaks Envoy's rate limit service (ShouldRateLimit, one
// descriptor {--rls-key: key} in --rls-domain per request) to --targets:
// ringlimit's nodes started with --rls-config, or envoyproxy/ratelimit.
//
// --op peek and --op reserve-settle (--proto grpc, client and http) send
// the other operations (peek, reserve and settle) instead of plain checks: peek sends the
// workload's checks with peek set (nothing is spent); reserve-settle sends a
// reserve of --reserve-cost and then settles its reservation at a true cost
// drawn uniformly from 0 to --reserve-cost, the pair being one request (its
// latency is the pair's; "calls" counts the reserves and the settles). The
// JSON line carries the op, and for these two the calls, calls/s and calls
// per server CPU-second.
//
// --op acquire-release measures a concurrency limit: each operation is an
// Acquire of an inline CONCURRENCY limit of --concurrency-limit (default
// 64) on the key for --lease-ttl (default 30s), then, when granted, the
// Release of its lease (outcome OK, the latency it covered). --proto grpc
// sends them to the nodes in turn; --proto client sends them through the
// Go client (Client.Acquire, to the key's owner once known, and
// Client.Release); with --target redis://… the same pairs go to the usual
// Redis semaphore: one Lua script (ZREMRANGEBYSCORE of the expired members, ZCARD, ZADD of a
// random member when below the limit) and ZREM on release. Calls, calls/s
// and the pairs' latencies are reported as for reserve-settle.
//
// The exit status is 1 when more than 1% of the requests in the window
// failed, 2 on bad flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// config is everything bench reads from its flags.
type config struct {
	name        string
	proto       string // grpc, client, http, authz or rls
	targets     []string
	httpTargets []string
	concurrency int
	duration    time.Duration
	warmup      time.Duration
	timeout     time.Duration
	keys        int
	dist        string
	zipfS       float64
	batch       int
	limit       int64
	per         time.Duration
	burst       int64
	algorithm   string
	rejectMode  bool
	keyPrefix   string
	pids        []int
	metricsURLs []string
	json        bool
	seed        uint64
	rlsDomain   string // --proto rls: the request's domain
	rlsKey      string // --proto rls: the descriptor entry's key
	op          string // check, peek or reserve-settle (op.go)
	reserveCost int64  // --op reserve-settle: the cost each reserve spends
	reserveTTL  time.Duration
	// --op acquire-release (op_acquire.go): the concurrency limit of every
	// key and the lease TTL each acquire asks for.
	concurrencyLimit int64
	leaseTTL         time.Duration

	// dev
	targetHealth bool
	redis        string // redis://host:port: the Redis baseline instead of ringlimit
	unbatched    bool   // --proto client: one call per check
	lease        bool   // token leases on the limit
	inflight     int    // --proto client: concurrent calls per node
	plotIn       string // --plot: JSON lines to draw
	plotOut      string // --plot-out: the PNG
	serveHealth  string
	serveBare    string // --serve-bare-http: the address of a bare net/http server
	cpuProfile   string
	memProfile   string
	trace        string
}

// maxErrorRate is the failed fraction of requests above which bench exits 1.
const maxErrorRate = 0.01

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.name, "name", "", "label of this run, repeated in the output")
	fs.StringVar(&c.proto, "proto", "grpc", "grpc (one unary call per request), client (the project's Go client, coalescing concurrent checks), "+
		"http (POST /v1/check), authz (GET /v1/authz with X-API-Key: <key>) or rls (Envoy's RateLimitService/ShouldRateLimit, one descriptor)")
	fs.StringVar(&c.redis, "target", "", "redis://HOST:PORT: drive Redis with go-redis + redis_rate (GCRA) instead of ringlimit, same workload")
	fs.BoolVar(&c.unbatched, "unbatched", false, "--proto client: one call per check (no coalescing)")
	fs.BoolVar(&c.lease, "lease", false, "ask for token leases on the limit (token_bucket)")
	fs.StringVar(&c.plotIn, "plot", "", "draw the JSON lines in this file (from --json runs) as a PNG bar chart of checks/s and p99, and exit")
	fs.StringVar(&c.plotOut, "plot-out", "bench.png", "--plot: the PNG to write")
	fs.IntVar(&c.inflight, "client-inflight", 0, "--proto client: concurrent calls per node (0: the client's default)")
	targets := fs.String("targets", "127.0.0.1:9091,127.0.0.1:9092,127.0.0.1:9093", "comma-separated gRPC addresses of the entry nodes, used round robin")
	httpTargets := fs.String("http-targets", "127.0.0.1:8081,127.0.0.1:8082,127.0.0.1:8083", "comma-separated HTTP addresses of the entry nodes (--proto http and authz), used round robin")
	fs.StringVar(&c.rlsDomain, "rls-domain", "bench", "--proto rls: the domain of every request")
	fs.StringVar(&c.rlsKey, "rls-key", "user_id", "--proto rls: the key of the one descriptor entry; its value is the workload's key")
	fs.StringVar(&c.op, "op", opCheck, "what each request does (--proto grpc, client and http): check, peek (the same checks with peek: nothing spent) "+
		"reserve-settle (a reserve of --reserve-cost, then a settle of its reservation at a random true cost from 0 to --reserve-cost: one operation is the pair) "+
		"or acquire-release (--proto grpc or client, or --target redis://…: an acquire of a --concurrency-limit slot, then the release of its lease: one operation is the pair)")
	fs.Int64Var(&c.reserveCost, "reserve-cost", 10, "--op reserve-settle: the cost each reserve spends (at most the burst)")
	fs.DurationVar(&c.reserveTTL, "reserve-ttl", 0, "--op reserve-settle: how long a reservation can be settled (0: the cluster's default; else 1s to 24h)")
	c.acquireFlags(fs)
	fs.IntVar(&c.concurrency, "concurrency", 64, "goroutines, each making one request at a time")
	fs.DurationVar(&c.duration, "duration", 10*time.Second, "measured window")
	fs.DurationVar(&c.warmup, "warmup", 2*time.Second, "load before the measured window, discarded from every figure")
	fs.DurationVar(&c.timeout, "timeout", 5*time.Second, "deadline of each request")
	fs.IntVar(&c.keys, "keys", 10000, "number of distinct keys")
	fs.StringVar(&c.dist, "dist", "uniform", "key distribution: uniform, hot (one key) or zipf")
	fs.Float64Var(&c.zipfS, "zipf-s", 1.1, "Zipf exponent s (> 1) for --dist zipf")
	fs.IntVar(&c.batch, "batch", 1, "checks per request (--proto grpc and client only; the others carry one)")
	fs.Int64Var(&c.limit, "limit", 1_000_000_000, "limit per --per; the default is so high that nothing is rejected")
	fs.DurationVar(&c.per, "per", time.Second, "period of --limit")
	fs.Int64Var(&c.burst, "burst", 0, "bucket capacity / queue size; 0 means --limit")
	fs.StringVar(&c.algorithm, "algorithm", "token_bucket", "token_bucket, leaky_bucket, fixed_window, sliding_window_log or sliding_window_counter")
	fs.BoolVar(&c.rejectMode, "reject-mode", false, "use a limit so low that almost every check is rejected (1 per hour unless --limit/--per/--burst are given)")
	fs.StringVar(&c.keyPrefix, "key-prefix", "bench:", "prefix of every key")
	pids := fs.String("pids", "", "comma-separated pids of the server processes whose CPU time in the window is reported")
	metrics := fs.String("metrics-urls", "", "comma-separated http://…/metrics of the nodes, read in the warm-up (half of it before the window, at most 1s) and after the window, for the batching factor")
	fs.BoolVar(&c.json, "json", false, "print one JSON line with every figure instead of the summary")
	fs.Uint64Var(&c.seed, "seed", 1, "seed of the key choice (goroutine i uses seed+i)")
	fs.BoolVar(&c.targetHealth, "target-health", false, "dev: call the gRPC health service of --targets instead of ringlimit (the bare unary floor)")
	fs.StringVar(&c.serveHealth, "serve-health", "", "dev: serve the gRPC health service on this address until SIGINT/SIGTERM, and nothing else")
	fs.StringVar(&c.serveBare, "serve-bare-http", "", "dev: serve a bare net/http POST /v1/check and /v1/authz with a fixed admitting answer on this address until SIGINT/SIGTERM, and nothing else")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "dev: write a CPU profile of the bench client to this file")
	fs.StringVar(&c.trace, "trace", "", "dev: write an execution trace of the bench client's run to this file")
	fs.StringVar(&c.memProfile, "memprofile", "", "dev: write an allocation profile of the bench client to this file, after the run")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if c.rejectMode {
		if !given["limit"] {
			c.limit = 1
		}
		if !given["per"] {
			c.per = time.Hour
		}
		if !given["burst"] {
			c.burst = 0
		}
	}
	c.targets = splitList(*targets)
	c.httpTargets = splitList(*httpTargets)
	c.metricsURLs = splitList(*metrics)
	for _, s := range splitList(*pids) {
		p, err := strconv.Atoi(s)
		if err != nil || p <= 0 {
			return c, fmt.Errorf("--pids: %q is not a pid", s)
		}
		c.pids = append(c.pids, p)
	}
	if c.serveHealth != "" || c.serveBare != "" {
		return c, nil
	}
	return c, c.validate()
}

func (c *config) validate() error {
	switch {
	case c.proto != "grpc" && c.proto != "http" && c.proto != "client" && c.proto != "authz" && c.proto != "rls":
		return fmt.Errorf("--proto: grpc, client, http, authz or rls, got %q", c.proto)
	case !c.overHTTP() && c.redis == "" && len(c.targets) == 0:
		return errors.New("--targets: at least one address")
	case c.overHTTP() && len(c.httpTargets) == 0:
		return errors.New("--http-targets: at least one address")
	case c.batch != 1 && (c.overHTTP() || c.proto == "rls"):
		return fmt.Errorf("--batch: --proto %s carries one check per request; use --proto grpc", c.proto)
	case c.targetHealth && (c.overHTTP() || c.proto == "rls"):
		return errors.New("--target-health: gRPC only")
	case c.proto == "rls" && (c.rlsDomain == "" || c.rlsKey == ""):
		return errors.New("--rls-domain, --rls-key: must not be empty")
	case c.concurrency < 1:
		return fmt.Errorf("--concurrency: at least 1, got %d", c.concurrency)
	case c.duration <= 0:
		return fmt.Errorf("--duration: must be positive, got %v", c.duration)
	case c.warmup < 0:
		return fmt.Errorf("--warmup: must not be negative, got %v", c.warmup)
	case c.timeout <= 0:
		return fmt.Errorf("--timeout: must be positive, got %v", c.timeout)
	case c.keys < 1:
		return fmt.Errorf("--keys: at least 1, got %d", c.keys)
	case c.batch < 1 || c.batch > 1000:
		return fmt.Errorf("--batch: between 1 and 1000 (the API's MaxBatch), got %d", c.batch)
	case c.limit < 1:
		return fmt.Errorf("--limit: at least 1, got %d", c.limit)
	case c.per <= 0 || c.per%time.Millisecond != 0:
		return fmt.Errorf("--per: a positive whole number of milliseconds, got %v", c.per)
	case c.burst < 0:
		return fmt.Errorf("--burst: must not be negative, got %d", c.burst)
	}
	if _, err := parseDist(c.dist, c.zipfS); err != nil {
		return err
	}
	if _, err := algorithmFromName(c.algorithm); err != nil {
		return err
	}
	return c.validateOp()
}

// overHTTP says whether the load goes to --http-targets.
func (c *config) overHTTP() bool { return c.proto == "http" || c.proto == "authz" }

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func main() {
	os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr))
}

func realMain(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stderr, "bench:", err)
		}
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if cfg.plotIn != "" {
		if err := plotResults(cfg.plotIn, cfg.plotOut); err != nil {
			fmt.Fprintln(stderr, "bench:", err)
			return 1
		}
		fmt.Fprintln(stdout, "wrote", cfg.plotOut)
		return 0
	}
	if cfg.serveHealth != "" {
		if err := serveHealth(ctx, cfg.serveHealth, stderr); err != nil {
			fmt.Fprintln(stderr, "bench:", err)
			return 1
		}
		return 0
	}
	if cfg.serveBare != "" {
		if err := serveBareHTTP(ctx, cfg.serveBare, stderr); err != nil {
			fmt.Fprintln(stderr, "bench:", err)
			return 1
		}
		return 0
	}
	for _, p := range []struct {
		path  string
		start func(io.Writer) error
		stop  func()
	}{{cfg.cpuProfile, pprof.StartCPUProfile, pprof.StopCPUProfile}, {cfg.trace, trace.Start, trace.Stop}} {
		if p.path == "" {
			continue
		}
		stop, err := recordTo(p.path, p.start, p.stop)
		if err != nil {
			fmt.Fprintln(stderr, "bench:", err)
			return 1
		}
		defer stop()
	}

	res, err := run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 1
	}
	if cfg.memProfile != "" {
		if err := writeAllocs(cfg.memProfile); err != nil {
			fmt.Fprintln(stderr, "bench:", err)
			return 1
		}
	}
	if cfg.json {
		err = res.writeJSON(stdout)
	} else {
		err = res.writeSummary(stdout)
	}
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 1
	}
	if rate := res.ErrorRate; rate > maxErrorRate {
		fmt.Fprintf(stderr, "bench: %.2f%% of requests failed (more than %.0f%%); first error: %s\n",
			100*rate, 100*maxErrorRate, res.FirstError)
		return 1
	}
	return 0
}

// recordTo creates path and starts a recording (a CPU profile, an
// execution trace) into it; the function it returns stops the recording
// and closes the file.
func recordTo(path string, start func(io.Writer) error, stop func()) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := start(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		stop()
		f.Close()
	}, nil
}

// writeAllocs writes the allocation profile of the run so far to path.
func writeAllocs(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
