package testkit

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric reads a counter or gauge, or a histogram's sample count, from reg
// by its exposed name and label pairs (name, value, name, value...). It
// returns 0 when no sample matches: a counter never incremented.
func Metric(t testing.TB, reg prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					found = found || lp.GetName() == labels[i] && lp.GetValue() == labels[i+1]
				}
				if !found {
					continue metrics
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				return float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return 0
}

// HistogramAbove returns how many observations of histogram name in reg
// were larger than le (one of its bucket bounds).
func HistogramAbove(t testing.TB, reg prometheus.Gatherer, name string, le float64) uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		h := mf.GetMetric()[0].GetHistogram()
		for _, b := range h.GetBucket() {
			if b.GetUpperBound() == le {
				return h.GetSampleCount() - b.GetCumulativeCount()
			}
		}
		t.Fatalf("histogram %s has no bucket le=%v", name, le)
	}
	t.Fatalf("histogram %s not found", name)
	return 0
}

// Scrape returns the value of every sample on the /metrics page at
// http://addr whose line starts with name followed by a space or "{",
// keyed by its labels ("" for none).
func Scrape(client *http.Client, addr, name string) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return ParseMetrics(string(b), name)
}

// ParseMetrics reads the samples of name from a Prometheus text page.
func ParseMetrics(page, name string) (map[string]float64, error) {
	out := map[string]float64{}
	for line := range strings.Lines(page) {
		line = strings.TrimSpace(line)
		rest, ok := strings.CutPrefix(line, name)
		if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		labels := ""
		if rest[0] == '{' {
			end := strings.IndexByte(rest, '}')
			if end < 0 {
				return nil, fmt.Errorf("bad metric line %q", line)
			}
			labels, rest = rest[:end+1], rest[end+1:]
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
		if err != nil {
			return nil, fmt.Errorf("bad metric line %q: %w", line, err)
		}
		out[labels] = v
	}
	return out, nil
}
