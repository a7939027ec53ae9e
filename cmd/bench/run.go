package main

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"time"
)

// workerStats is one goroutine's tally; only that goroutine writes it.
type workerStats struct {
	lat                                                          []time.Duration
	requests, checks, allowed, rejected, degraded, errors, calls int64
	firstErr                                                     error
}

// run drives the target for cfg.warmup + cfg.duration and measures the
// second part. A request counts in the window when it completes inside it.
func run(ctx context.Context, cfg config) (*result, error) {
	kind, err := parseDist(cfg.dist, cfg.zipfS)
	if err != nil {
		return nil, err
	}
	if _, err := procSnapshot(cfg.pids); err != nil {
		return nil, fmt.Errorf("--pids: %w", err)
	}
	metricsClient := &http.Client{Transport: &http.Transport{Proxy: nil}}
	defer metricsClient.CloseIdleConnections()
	if len(cfg.metricsURLs) > 0 {
		if _, err := scrapeAll(ctx, metricsClient, cfg.metricsURLs); err != nil {
			return nil, fmt.Errorf("--metrics-urls: %w", err)
		}
	}
	var tgt target
	var pairs multiCallTarget // --op reserve-settle, acquire-release: each request is a pair of calls
	if cfg.op == opAcquireRelease {
		pairs, err = newPairTarget(&cfg)
		tgt = pairs
	} else {
		tgt, err = newTarget(&cfg)
	}
	if err != nil {
		return nil, err
	}
	defer tgt.Close()
	if cfg.op == opReserveSettle {
		var ok bool
		if pairs, ok = tgt.(multiCallTarget); !ok {
			return nil, fmt.Errorf("--op %s: not with %s", cfg.op, tgt.Describe())
		}
	}
	keys := makeKeys(cfg.keyPrefix, cfg.keys)

	res := &result{
		Name: cfg.name, Target: tgt.Describe(), Proto: cfg.proto, Dist: cfg.dist, Keys: cfg.keys,
		Batch: cfg.batch, Concurrency: cfg.concurrency, Algorithm: cfg.algorithm, Limit: cfg.limit,
		PerMs: cfg.per.Milliseconds(), Burst: cfg.burst, RejectMode: cfg.rejectMode,
		WarmupS: cfg.warmup.Seconds(), WindowS: cfg.duration.Seconds(), Op: cfg.op,
		Cores: runtime.NumCPU(), LoadAvg: loadAverage(), GoVersion: runtime.Version(),
	}
	if cfg.targetHealth {
		res.Proto = "grpc-health"
		res.Dist, res.Keys, res.Batch, res.Algorithm = "", 0, 1, ""
	}
	if cfg.redis != "" {
		res.Proto = "redis"
	}
	if cfg.op == opAcquireRelease {
		acquireFigures(res, &cfg)
	}
	if kind == distZipf {
		res.ZipfS = cfg.zipfS
	}

	start := time.Now()
	res.Start = start.UTC().Format(time.RFC3339)
	measureStart := start.Add(cfg.warmup)
	end := measureStart.Add(cfg.duration)
	runCtx, cancel := context.WithDeadline(ctx, end)
	defer cancel()

	// Room for every latency without growing, at up to ~100k requests/s in
	// all (the slices grow past that).
	capHint := min(int(cfg.duration.Seconds()*100_000)/cfg.concurrency+1024, 1<<22)
	stats := make([]workerStats, cfg.concurrency)
	var wg sync.WaitGroup
	for i := range stats {
		w := &stats[i]
		w.lat = make([]time.Duration, 0, capHint)
		picker := newKeyPicker(kind, cfg.keys, cfg.zipfS, cfg.seed+uint64(i))
		wg.Go(func() {
			w.loop(runCtx, tgt, pairs, picker, keys, cfg.batch, cfg.timeout, measureStart, end)
		})
	}
	stopWorkers := func() { cancel(); wg.Wait() }

	// The nodes' counters are read before the window, in the warm-up, not
	// at its start: a scrape of /metrics costs a node milliseconds of CPU
	// (6 ms for each of three nodes on one CPU), and a node of one CPU
	// answers nothing meanwhile, so a scrape in the window would weigh on
	// the latencies of the side measured with --metrics-urls only.
	var m0 map[string]float64
	var m0At time.Time
	if len(cfg.metricsURLs) > 0 {
		if !sleepUntil(runCtx, measureStart.Add(-scrapeLead(cfg.warmup))) && ctx.Err() != nil {
			stopWorkers()
			return nil, ctx.Err()
		}
		var err error
		if m0, err = scrapeAll(ctx, metricsClient, cfg.metricsURLs); err != nil {
			stopWorkers()
			return nil, fmt.Errorf("--metrics-urls: %w", err)
		}
		m0At = time.Now()
	}
	if !sleepUntil(runCtx, measureStart) && ctx.Err() != nil {
		stopWorkers()
		return nil, ctx.Err()
	}
	cpu0, err := procSnapshot(cfg.pids)
	if err != nil {
		stopWorkers()
		return nil, fmt.Errorf("--pids: %w", err)
	}
	self0, _ := cpuSeconds(0)
	busy0, steal0, machErr := machineCPU()

	sleepUntil(runCtx, end)
	if ctx.Err() != nil {
		stopWorkers()
		return nil, ctx.Err()
	}
	cpu1, err := procSnapshot(cfg.pids)
	if err != nil {
		stopWorkers()
		return nil, fmt.Errorf("--pids (after the window; did a server exit?): %w", err)
	}
	self1, _ := cpuSeconds(0)
	busy1, steal1, machErr1 := machineCPU()
	var m1 map[string]float64
	if len(cfg.metricsURLs) > 0 {
		if m1, err = scrapeAll(ctx, metricsClient, cfg.metricsURLs); err != nil {
			stopWorkers()
			return nil, fmt.Errorf("--metrics-urls: %w", err)
		}
		res.CountersS = ptr(round3(time.Since(m0At).Seconds()))
	}
	wg.Wait()

	// Tally.
	n := 0
	for i := range stats {
		n += len(stats[i].lat)
	}
	lat := make([]time.Duration, 0, n)
	var sum time.Duration
	for i := range stats {
		w := &stats[i]
		lat = append(lat, w.lat...)
		res.Requests += w.requests
		res.Checks += w.checks
		res.Allowed += w.allowed
		res.Rejected += w.rejected
		res.Degraded += w.degraded
		res.Errors += w.errors
		res.Calls += w.calls
		if w.firstErr != nil && res.FirstError == "" {
			res.FirstError = w.firstErr.Error()
		}
	}
	slices.Sort(lat)
	for _, d := range lat {
		sum += d
	}
	window := cfg.duration.Seconds()
	res.ChecksPerS = float64(res.Checks) / window
	res.RequestsPerS = float64(res.Requests) / window
	if total := res.Requests + res.Errors; total > 0 {
		res.ErrorRate = float64(res.Errors) / float64(total)
	}
	if cfg.op != opCheck {
		res.CallsPerS = float64(res.Calls) / window
	} else {
		res.Calls = 0 // a check's calls are its checks: the figures above
	}
	if len(lat) > 0 {
		res.MeanMs = ms(sum / time.Duration(len(lat)))
		res.P50Ms = ms(percentile(lat, 50))
		res.P90Ms = ms(percentile(lat, 90))
		res.P99Ms = ms(percentile(lat, 99))
		res.P999Ms = ms(percentile(lat, 99.9))
		res.MaxMs = ms(lat[len(lat)-1])
	}
	res.ClientCPUS = round3(self1 - self0)
	if len(cfg.pids) > 0 {
		total := 0.0
		var faults uint64
		res.ServerCPUPid = map[string]float64{}
		for i, p := range cfg.pids {
			d := cpu1[i].cpuSeconds() - cpu0[i].cpuSeconds()
			total += d
			res.ServerCPUPid[strconv.Itoa(p)] = round3(d)
			faults += cpu1[i].minflt - cpu0[i].minflt
		}
		res.ServerCPUS = ptr(round3(total))
		res.ServerMinorFaults = &faults
		if total > 0 {
			res.ChecksPerCPUS = ptr(float64(res.Checks) / total)
			if res.Calls > 0 {
				res.CallsPerCPUS = ptr(float64(res.Calls) / total)
			}
		}
	}
	if machErr == nil && machErr1 == nil {
		mine := res.ClientCPUS
		if res.ServerCPUS != nil {
			mine += *res.ServerCPUS
		}
		res.MachineCPUS = ptr(round3(busy1 - busy0))
		res.OtherCPUS = ptr(round3(max(busy1-busy0-mine, 0)))
		res.StealCPUS = ptr(round3(steal1 - steal0))
	}
	if m0 != nil && m1 != nil {
		delta := func(name string) float64 { return m1[name] - m0[name] }
		fc, fr, sc := delta(metricForwardChecks), delta(metricForwardRPCs), delta(metricChecks)
		res.ForwardChecks, res.ForwardRPCs, res.ServerChecks = ptr(fc), ptr(fr), ptr(sc)
		if _, ok := m1[metricGCs]; ok {
			res.ServerGCs = ptr(delta(metricGCs))
		}
		if cfg.op != opCheck {
			for _, m := range []struct {
				name string
				dst  **float64
			}{{metricPeeks, &res.ServerPeeks}, {metricReservations, &res.ServerReservations}, {metricSettles, &res.ServerSettles}} {
				if _, ok := m1[m.name]; ok {
					*m.dst = ptr(delta(m.name))
				}
			}
		}
		if fr > 0 {
			res.BatchingFactor = ptr(fc / fr)
		}
		// The nodes' own count of checks is the better denominator (the
		// scrapes and the client's window are not exactly aligned).
		if den := sc; den > 0 {
			res.ForwardedFraction = ptr(fc / den)
		} else if res.Checks > 0 {
			res.ForwardedFraction = ptr(fc / float64(res.Checks))
		}
	}
	return res, nil
}

// loop makes requests until ctx ends or end passes; with pairs set (--op
// reserve-settle, acquire-release) each request is pairs.CheckCalls, else tgt.Check (one
// call per check).
func (w *workerStats) loop(ctx context.Context, tgt target, pairs multiCallTarget, picker *keyPicker, keys keySet, batch int,
	timeout time.Duration, measureStart, end time.Time) {
	buf := make([]string, batch)
	// A run's context ends when its timer fires, which a loaded machine
	// may run late: the clock says when to stop starting requests.
	for ctx.Err() == nil && time.Now().Before(end) {
		for i := range buf {
			buf[i] = keys.at(picker.next())
		}
		parent := ctx
		if pairs != nil {
			// A pair begun is finished, within its timeout: a reserve cut
			// by the end of the run would hold its spend on the cluster
			// until its TTL, unsettled, and an acquire its slot.
			parent = context.WithoutCancel(ctx)
		}
		rctx, cancel := context.WithTimeout(parent, timeout)
		var a, r, d, calls int
		var err error
		t0 := time.Now()
		if pairs != nil {
			a, r, d, calls, err = pairs.CheckCalls(rctx, buf)
		} else {
			a, r, d, err = tgt.Check(rctx, buf)
			calls = a + r
		}
		t1 := time.Now()
		cancel()
		if t1.Before(measureStart) || t1.After(end) {
			continue // warm-up, or completed after the window
		}
		if err != nil {
			if ctx.Err() != nil {
				continue // the run ended under it: not the target's failure
			}
			w.errors++
			if w.firstErr == nil {
				w.firstErr = err
			}
			continue
		}
		w.requests++
		w.checks += int64(a + r)
		w.allowed += int64(a)
		w.rejected += int64(r)
		w.degraded += int64(d)
		w.calls += int64(calls)
		w.lat = append(w.lat, t1.Sub(t0))
	}
}

// scrapeLead is how long before the window the nodes' counters are read:
// half the warm-up, at most a second, so that the scrape and the requests
// it held up are over when the window begins.
func scrapeLead(warmup time.Duration) time.Duration { return min(warmup/2, time.Second) }

// sleepUntil waits until t or until ctx ends, and says whether t came.
func sleepUntil(ctx context.Context, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return !time.Now().Before(t)
	}
}
