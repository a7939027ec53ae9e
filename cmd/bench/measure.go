package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

// percentile returns the p-th percentile (0 < p ≤ 100) of sorted by the
// nearest-rank method: the smallest value such that at least p% of the
// values are ≤ it. It returns 0 for no values.
func percentile(sorted []time.Duration, p float64) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	// The epsilon keeps 99.9% of 1000 at rank 999 despite 99.9 being inexact.
	rank := int(math.Ceil(p/100*float64(n) - 1e-9))
	rank = min(max(rank, 1), n)
	return sorted[rank-1]
}

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat:
// `getconf CLK_TCK`, 100 on every mainstream Linux.
var clockTicks = sync.OnceValue(func() float64 {
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	if err == nil {
		if v, err := strconv.Atoi(strings.TrimSpace(string(out))); err == nil && v > 0 {
			return float64(v)
		}
	}
	return 100
})

// procStat is what bench reads of a process in /proc/PID/stat.
type procStat struct {
	utime, stime uint64 // clock ticks
	minflt       uint64 // minor page faults: pages the kernel mapped on first touch
}

// parseProcStat returns utime, stime and minflt from the contents of
// /proc/PID/stat. The command name (field 2) is in parentheses and may
// itself contain spaces and parentheses, so the fields are counted from the
// last ')': after it come state (field 3) … minflt (10) … utime (14),
// stime (15).
func parseProcStat(s string) (procStat, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procStat{}, errors.New("proc stat: no ')' after the command name")
	}
	f := strings.Fields(s[i+1:])
	const minfltIdx, utimeIdx = 10 - 3, 14 - 3 // f[0] is field 3
	if len(f) <= utimeIdx+1 {
		return procStat{}, fmt.Errorf("proc stat: %d fields after the command name, want at least %d", len(f), utimeIdx+2)
	}
	var ps procStat
	for _, v := range []struct {
		name string
		idx  int
		dst  *uint64
	}{{"minflt", minfltIdx, &ps.minflt}, {"utime", utimeIdx, &ps.utime}, {"stime", utimeIdx + 1, &ps.stime}} {
		n, err := strconv.ParseUint(f[v.idx], 10, 64)
		if err != nil {
			return procStat{}, fmt.Errorf("proc stat: %s: %w", v.name, err)
		}
		*v.dst = n
	}
	return ps, nil
}

// readProcStat reads pid's /proc/PID/stat; pid 0 means this process.
func readProcStat(pid int) (procStat, error) {
	path := "/proc/self/stat"
	if pid != 0 {
		path = "/proc/" + strconv.Itoa(pid) + "/stat"
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return procStat{}, err
	}
	ps, err := parseProcStat(string(b))
	if err != nil {
		return procStat{}, fmt.Errorf("pid %d: %w", pid, err)
	}
	return ps, nil
}

// cpuSeconds is the user+system CPU time pid has used so far. pid 0 means
// this process.
func cpuSeconds(pid int) (float64, error) {
	ps, err := readProcStat(pid)
	if err != nil {
		return 0, err
	}
	return ps.cpuSeconds(), nil
}

func (ps procStat) cpuSeconds() float64 { return float64(ps.utime+ps.stime) / clockTicks() }

// parseMachineStat returns, from the contents of /proc/stat, the clock
// ticks all CPUs spent busy (user + nice + system + irq + softirq; guest
// time is already in user) and stolen by the hypervisor (steal).
func parseMachineStat(s string) (busy, steal uint64, err error) {
	line, _, _ := strings.Cut(s, "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0, fmt.Errorf("proc stat: first line %q is not the cpu total", line)
	}
	var v [8]uint64 // user nice system idle iowait irq softirq steal
	for i := range v {
		if v[i], err = strconv.ParseUint(f[i+1], 10, 64); err != nil {
			return 0, 0, fmt.Errorf("proc stat: cpu field %d: %w", i+1, err)
		}
	}
	return v[0] + v[1] + v[2] + v[5] + v[6], v[7], nil
}

// machineCPU is the busy and stolen CPU seconds of the whole machine so
// far, to tell how much of the window went to other processes.
func machineCPU() (busy, steal float64, err error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, err
	}
	bt, st, err := parseMachineStat(string(b))
	if err != nil {
		return 0, 0, err
	}
	return float64(bt) / clockTicks(), float64(st) / clockTicks(), nil
}

// procSnapshot reads /proc/PID/stat of every pid.
func procSnapshot(pids []int) ([]procStat, error) {
	out := make([]procStat, len(pids))
	for i, p := range pids {
		ps, err := readProcStat(p)
		if err != nil {
			return nil, err
		}
		out[i] = ps
	}
	return out, nil
}

// parseMetrics sums, over every label set, the samples of the named metrics
// in a Prometheus text exposition. Names absent from the text are absent
// from the map.
func parseMetrics(r io.Reader, names ...string) (map[string]float64, error) {
	want := make(map[string]bool, len(names))
	for _, n := range names {
		want[n] = true
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		end := strings.IndexAny(line, "{ \t")
		if end < 0 {
			continue
		}
		name := line[:end]
		if !want[name] {
			continue
		}
		rest := line[end:]
		if rest[0] == '{' {
			j := labelsEnd(rest)
			if j < 0 {
				return nil, fmt.Errorf("metrics: unterminated labels: %q", line)
			}
			rest = rest[j+1:]
		}
		fields := strings.Fields(rest) // value [timestamp]
		if len(fields) == 0 {
			return nil, fmt.Errorf("metrics: no value: %q", line)
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return nil, fmt.Errorf("metrics: %q: %w", line, err)
		}
		out[name] += v
	}
	return out, sc.Err()
}

// labelsEnd returns the index of the '}' closing the label set that s
// starts with, skipping quoted label values (which may hold '}' and
// escaped quotes), or -1.
func labelsEnd(s string) int {
	inQuote := false
	for i := 1; i < len(s); i++ {
		switch c := s[i]; {
		case inQuote && c == '\\':
			i++
		case c == '"':
			inQuote = !inQuote
		case !inQuote && c == '}':
			return i
		}
	}
	return -1
}

// The node metrics bench reads.
const (
	metricForwardChecks = "ringlimit_forward_checks_total"
	metricForwardRPCs   = "ringlimit_forward_rpcs_total"
	metricChecks        = "ringlimit_checks_total"
	metricPeerChecks    = "ringlimit_peer_checks_total"
	metricGCs           = "go_gc_duration_seconds_count" // garbage collections (summed over the nodes)
	// Issue 32's operations, counted by the entry node's API (--op peek and
	// reserve-settle; every result summed).
	metricPeeks        = "ringlimit_peeks_total"
	metricReservations = "ringlimit_reservations_total"
	metricSettles      = "ringlimit_settles_total"
)

var scrapedMetrics = []string{metricForwardChecks, metricForwardRPCs, metricChecks, metricPeerChecks, metricGCs,
	metricPeeks, metricReservations, metricSettles}

// scrapeAll reads scrapedMetrics from every URL, in parallel, and sums them.
func scrapeAll(ctx context.Context, client *http.Client, urls []string) (map[string]float64, error) {
	type answer struct {
		m   map[string]float64
		err error
	}
	answers := make([]answer, len(urls))
	var wg sync.WaitGroup
	for i, u := range urls {
		wg.Go(func() {
			answers[i].m, answers[i].err = scrape(ctx, client, u)
		})
	}
	wg.Wait()
	sum := map[string]float64{}
	for i, a := range answers {
		if a.err != nil {
			return nil, fmt.Errorf("%s: %w", urls[i], a.err)
		}
		for k, v := range a.m {
			sum[k] += v
		}
	}
	return sum, nil
}

func scrape(ctx context.Context, client *http.Client, url string) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %d", resp.StatusCode)
	}
	return parseMetrics(resp.Body, scrapedMetrics...)
}

// loadAverage is the first three fields of /proc/loadavg, or "" when it
// cannot be read.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}
