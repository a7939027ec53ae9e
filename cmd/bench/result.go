package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// result is every figure of one run; it is also the JSON line. Figures
// that were not measured (no --pids, no --metrics-urls) are null.
type result struct {
	Name        string  `json:"name"`
	Target      string  `json:"target"`
	Proto       string  `json:"proto"`
	Dist        string  `json:"dist"`
	ZipfS       float64 `json:"zipf_s,omitempty"`
	Keys        int     `json:"keys"`
	Batch       int     `json:"batch"`
	Concurrency int     `json:"concurrency"`
	Algorithm   string  `json:"algorithm"`
	Limit       int64   `json:"limit"`
	PerMs       int64   `json:"per_ms"`
	Burst       int64   `json:"burst"`
	RejectMode  bool    `json:"reject_mode"`
	WarmupS     float64 `json:"warmup_s"`
	WindowS     float64 `json:"window_s"`
	// Op is what each request did (--op): check, peek, reserve-settle or
	// acquire-release. With acquire-release the algorithm is
	// "concurrency", limit the leases in flight allowed per key, per_ms and
	// burst 0, and lease_ttl_ms the TTL each acquire asked for.
	Op         string `json:"op"`
	LeaseTTLMs int64  `json:"lease_ttl_ms,omitempty"`

	Requests  int64   `json:"requests"`
	Checks    int64   `json:"checks"`
	Allowed   int64   `json:"allowed"`
	Rejected  int64   `json:"rejected"`
	Degraded  int64   `json:"degraded"`
	Errors    int64   `json:"errors"`
	ErrorRate float64 `json:"error_rate"`
	// FirstError is the first failure seen in the window, for the reader.
	FirstError string `json:"first_error,omitempty"`

	ChecksPerS   float64 `json:"checks_per_s"`
	RequestsPerS float64 `json:"requests_per_s"`
	// Calls the limiter answered in the window, --op peek, reserve-settle
	// and acquire-release only (for a check they are its checks): a peek's
	// calls are its peeks; a reserve-settle's are its reserves (checks) and
	// settles, an acquire-release's its acquires (checks) and releases, two
	// per operation (one when the reserve or acquire was refused), while
	// requests counts the operations (the pairs) and the latencies are the
	// pairs'.
	Calls        int64    `json:"calls,omitempty"`
	CallsPerS    float64  `json:"calls_per_s,omitempty"`
	CallsPerCPUS *float64 `json:"calls_per_cpu_s,omitempty"` // calls per server CPU-second
	// Latency of one request at the client, successful requests only.
	MeanMs float64 `json:"mean_ms"`
	P50Ms  float64 `json:"p50_ms"`
	P90Ms  float64 `json:"p90_ms"`
	P99Ms  float64 `json:"p99_ms"`
	P999Ms float64 `json:"p999_ms"`
	MaxMs  float64 `json:"max_ms"`

	// CPU seconds (utime+stime) used in the window by the --pids, summed and
	// per pid, and by the bench process itself (it shares the machine).
	ServerCPUS    *float64           `json:"server_cpu_s"`
	ServerCPUPid  map[string]float64 `json:"server_cpu_s_by_pid,omitempty"`
	ChecksPerCPUS *float64           `json:"checks_per_cpu_s"`
	ClientCPUS    float64            `json:"client_cpu_s"`

	// Minor page faults of the --pids in the window: a server whose heap
	// is still growing into fresh memory takes many (a fault is dear on a
	// virtual machine), one in its steady state few.
	ServerMinorFaults *uint64 `json:"server_minor_faults,omitempty"`

	// The whole machine in the window: busy CPU seconds (all processes), the
	// part of it not used by --pids or bench (other processes: noise), and
	// time stolen by the hypervisor. Null when /proc/stat is unreadable.
	MachineCPUS *float64 `json:"machine_cpu_s"`
	OtherCPUS   *float64 `json:"other_cpu_s"`
	StealCPUS   *float64 `json:"steal_cpu_s"`

	// From --metrics-urls, deltas summed over the nodes, from a scrape
	// before the window (in the warm-up: see scrapeLead) to one right after
	// it: CountersS seconds, a little more than the window. The fraction
	// and the factor are ratios of two of them.
	CountersS         *float64 `json:"counters_s"`
	ServerChecks      *float64 `json:"server_checks"`      // ringlimit_checks_total
	ForwardChecks     *float64 `json:"forward_checks"`     // ringlimit_forward_checks_total
	ForwardRPCs       *float64 `json:"forward_rpcs"`       // ringlimit_forward_rpcs_total
	BatchingFactor    *float64 `json:"batching_factor"`    // forwarded checks per batch sent to an owner
	ForwardedFraction *float64 `json:"forwarded_fraction"` // forward checks / checks
	ServerGCs         *float64 `json:"server_gcs"`         // go_gc_duration_seconds_count
	// --op peek and reserve-settle only, when the nodes export them: what
	// the nodes' APIs counted of the operation, every result summed.
	ServerPeeks        *float64 `json:"server_peeks,omitempty"`        // ringlimit_peeks_total
	ServerReservations *float64 `json:"server_reservations,omitempty"` // ringlimit_reservations_total
	ServerSettles      *float64 `json:"server_settles,omitempty"`      // ringlimit_settles_total

	Cores     int    `json:"cores"`
	LoadAvg   string `json:"loadavg_at_start"`
	GoVersion string `json:"go_version"`
	Start     string `json:"start"`
}

func ms(d time.Duration) float64 { return round3(float64(d) / float64(time.Millisecond)) }

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }

func ptr(v float64) *float64 { return &v }

func (r *result) writeJSON(w io.Writer) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

func (r *result) writeSummary(w io.Writer) error {
	var b strings.Builder
	name := r.Name
	if name == "" {
		name = "run"
	}
	what := fmt.Sprintf("%s keys %s", commas(int64(r.Keys)), r.Dist)
	if r.Proto == "grpc-health" {
		what = "no-op health calls"
	}
	fmt.Fprintf(&b, "%s: %s, %d goroutines, batch %d, %s, %gs measured after %gs warm-up (cores %d, load %s)\n",
		name, r.Target, r.Concurrency, r.Batch, what, r.WindowS, r.WarmupS, r.Cores, r.LoadAvg)
	if r.Op == opAcquireRelease {
		fmt.Fprintf(&b, "  limit        concurrency %d in flight per key, lease ttl %dms\n", r.Limit, r.LeaseTTLMs)
	} else if r.Proto != "grpc-health" {
		fmt.Fprintf(&b, "  limit        %s %d per %dms burst %d%s\n", r.Algorithm, r.Limit, r.PerMs, r.Burst,
			map[bool]string{true: " (reject mode)", false: ""}[r.RejectMode])
	}
	fmt.Fprintf(&b, "  throughput   %s checks/s, %s requests/s\n", commas(int64(r.ChecksPerS+0.5)), commas(int64(r.RequestsPerS+0.5)))
	switch r.Op {
	case opPeek:
		fmt.Fprintf(&b, "  op           peek: every check a peek (nothing spent), %s calls/s\n", commas(int64(r.CallsPerS+0.5)))
	case opReserveSettle:
		fmt.Fprintf(&b, "  op           reserve-settle: %s pairs/s (the requests: latencies are per pair), %s calls/s (reserves and settles)\n",
			commas(int64(r.RequestsPerS+0.5)), commas(int64(r.CallsPerS+0.5)))
	case opAcquireRelease:
		fmt.Fprintf(&b, "  op           acquire-release: %s pairs/s (the requests: latencies are per pair), %s calls/s (acquires and releases)\n",
			commas(int64(r.RequestsPerS+0.5)), commas(int64(r.CallsPerS+0.5)))
	}
	fmt.Fprintf(&b, "  latency      mean %.3f ms  p50 %.3f  p90 %.3f  p99 %.3f  p99.9 %.3f  max %.3f ms\n",
		r.MeanMs, r.P50Ms, r.P90Ms, r.P99Ms, r.P999Ms, r.MaxMs)
	fmt.Fprintf(&b, "  decisions    allowed %s  rejected %s  degraded %s  errors %s (%.3f%%)\n",
		commas(r.Allowed), commas(r.Rejected), commas(r.Degraded), commas(r.Errors), 100*r.ErrorRate)
	if r.FirstError != "" {
		fmt.Fprintf(&b, "  first error  %s\n", r.FirstError)
	}
	if r.ServerCPUS != nil {
		pids := make([]string, 0, len(r.ServerCPUPid))
		for p := range r.ServerCPUPid {
			pids = append(pids, p)
		}
		slices.Sort(pids)
		parts := make([]string, len(pids))
		for i, p := range pids {
			parts[i] = fmt.Sprintf("pid %s %.2f", p, r.ServerCPUPid[p])
		}
		per := "n/a"
		if r.ChecksPerCPUS != nil {
			per = commas(int64(*r.ChecksPerCPUS + 0.5))
		}
		fmt.Fprintf(&b, "  server CPU   %.2f s (%s) → %s checks per server CPU-second\n", *r.ServerCPUS, strings.Join(parts, ", "), per)
		if r.CallsPerCPUS != nil {
			fmt.Fprintf(&b, "               %s calls per server CPU-second\n", commas(int64(*r.CallsPerCPUS+0.5)))
		}
		if r.ServerMinorFaults != nil {
			fmt.Fprintf(&b, "               %s minor page faults\n", commas(int64(*r.ServerMinorFaults)))
		}
	}
	fmt.Fprintf(&b, "  client CPU   %.2f s (this process)\n", r.ClientCPUS)
	if r.MachineCPUS != nil {
		fmt.Fprintf(&b, "  machine CPU  %.2f s busy of %.0f available, %.2f s by other processes, %.2f s stolen\n",
			*r.MachineCPUS, r.WindowS*float64(r.Cores), *r.OtherCPUS, *r.StealCPUS)
	}
	if r.ForwardChecks != nil {
		bf, ff := "n/a", "n/a"
		if r.BatchingFactor != nil {
			bf = fmt.Sprintf("%.2f", *r.BatchingFactor)
		}
		if r.ForwardedFraction != nil {
			ff = fmt.Sprintf("%.1f%%", 100**r.ForwardedFraction)
		}
		fmt.Fprintf(&b, "  forwarding   %s checks forwarded in %s batches: batching factor %s checks/batch, forwarded %s of %s checks the nodes counted in %.1f s around the window\n",
			commas(int64(*r.ForwardChecks)), commas(int64(*r.ForwardRPCs)), bf, ff, commas(int64(*r.ServerChecks)), *r.CountersS)
		if r.ServerGCs != nil {
			fmt.Fprintf(&b, "  server GC    %s collections in %.1f s around the window, all nodes\n", commas(int64(*r.ServerGCs)), *r.CountersS)
		}
		if r.ServerPeeks != nil || r.ServerReservations != nil || r.ServerSettles != nil {
			n := func(v *float64) string {
				if v == nil {
					return "n/a"
				}
				return commas(int64(*v))
			}
			fmt.Fprintf(&b, "  server ops   %s peeks, %s reservations, %s settles counted by the nodes in the window\n",
				n(r.ServerPeeks), n(r.ServerReservations), n(r.ServerSettles))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// commas formats n with thousands separators.
func commas(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}
