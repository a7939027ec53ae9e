package adaptive

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// decode reads an adaptive block as policy does: strict yaml.v3.
func decode(t *testing.T, src string) (Spec, error) {
	t.Helper()
	var y YAML
	dec := yaml.NewDecoder(bytes.NewReader([]byte(src)))
	dec.KnownFields(true)
	if err := dec.Decode(&y); err != nil {
		return Spec{}, err
	}
	return ParseSpec(y)
}

func TestParseSpec(t *testing.T) {
	got, err := decode(t, `
algorithm: aimd
min: 2
max: 50
initial: 10
window: 500ms
min_samples: 20
error_threshold: 0.05
latency_threshold: 250ms
backoff: 0.75
fallback: 5
fallback_after: 30s
`)
	want := Spec{Algorithm: AIMD, Min: 2, Max: 50, Initial: 10, Window: 500 * time.Millisecond, MinSamples: 20,
		ErrorThreshold: 0.05, LatencyThreshold: 250 * time.Millisecond, Backoff: 0.75, Fallback: 5, FallbackAfter: 30 * time.Second}
	if err != nil || got != want {
		t.Fatalf("ParseSpec = %+v, %v; want %+v", got, err, want)
	}
	got, err = decode(t, "{algorithm: gradient2, min: 1, max: 9, tolerance: 2, smoothing: 0.5, long_window: 100}")
	want = Spec{Algorithm: Gradient2, Min: 1, Max: 9, Tolerance: 2, Smoothing: 0.5, LongWindow: 100}
	if err != nil || got != want {
		t.Fatalf("ParseSpec = %+v, %v; want %+v", got, err, want)
	}
	d := got.WithDefaults()
	if d.Initial != 1 || d.Window != time.Second || d.MinSamples != 10 || d.FallbackAfter != 10*time.Second || d.Backoff != 0.9 || d.ErrorThreshold != 0.1 {
		t.Fatalf("WithDefaults = %+v", d)
	}
}

func TestParseSpecErrors(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{"algorithm: vegas\nmin: 1\nmax: 2", `adaptive.algorithm: want aimd or gradient2, got "vegas"`},
		{"algorithm: aimd\nmin: 0\nmax: 2", "adaptive.min: must be at least 1, got 0"},
		{"algorithm: aimd\nmin: 2.5\nmax: 2", "adaptive: min, max, initial, min_samples, long_window and fallback are whole numbers, got 2.5"},
		{"algorithm: aimd\nmin: \"3\"\nmax: 2", "are whole numbers, got 3"},
		{"algorithm: aimd\nmin: 3\nmax: 2", "adaptive.max: must be from min (3) to 1000000000, got 2"},
		{"algorithm: aimd\nmin: 1\nmax: 2000000000", "adaptive.max: must be from min (1) to 1000000000, got 2000000000"},
		{"algorithm: aimd\nmin: 2\nmax: 5\ninitial: 6", "adaptive.initial: must be from min (2) to max (5), got 6"},
		{"algorithm: aimd\nmin: 1\nmax: 5\nwindow: 1", `adaptive.window: want a positive duration such as "1s", got "1"`},
		{"algorithm: aimd\nmin: 1\nmax: 5\nwindow: -1s", `adaptive.window: want a positive duration such as "1s", got "-1s"`},
		{"algorithm: aimd\nmin: 1\nmax: 5\nwindow: 5ms", "adaptive.window: must be from 10ms to 1h, got 5ms"},
		{"algorithm: aimd\nmin: 1\nmax: 5\nmin_samples: -3", "adaptive.min_samples: must be from 1 to 1000000, got -3"},
		{"algorithm: aimd\nmin: 1\nmax: 5\nerror_threshold: 1", "adaptive.error_threshold: must be in (0, 1), got 1"},
		{"algorithm: aimd\nmin: 1\nmax: 5\nerror_threshold: .nan", "adaptive.error_threshold: must be in (0, 1), got NaN"},
		{"algorithm: aimd\nmin: 1\nmax: 5\nbackoff: 0.5", "adaptive.backoff: must be in (0.5, 1), got 0.5"},
		{"algorithm: gradient2\nmin: 1\nmax: 5\ntolerance: 0.9", "adaptive.tolerance: must be from 1 to 100, got 0.9"},
		{"algorithm: gradient2\nmin: 1\nmax: 5\nsmoothing: 1.5", "adaptive.smoothing: must be in (0, 1], got 1.5"},
		{"algorithm: gradient2\nmin: 1\nmax: 5\nlong_window: -1", "adaptive.long_window: must be from 1 to 1000000, got -1"},
		{"algorithm: aimd\nmin: 2\nmax: 5\nfallback: 1", "adaptive.fallback: must be 0 (hold) or from min (2) to max (5), got 1"},
		{"algorithm: aimd\nmin: 2\nmax: 5\nwindow: 2s\nfallback_after: 1s", "adaptive.fallback_after: must be at least the window (2s), got 1s"},
		{"algorithm: aimd\nmin: 2\nmax: 5\ntolerance: 2", "adaptive: tolerance, smoothing and long_window are for gradient2, not aimd"},
		{"algorithm: gradient2\nmin: 2\nmax: 5\nbackoff: 0.8", "adaptive: error_threshold, latency_threshold and backoff are for aimd, not gradient2"},
		{"algorithm: aimd\nmin: 2\nmax: 5\nmaximum: 9", "field maximum not found"},
	} {
		_, err := decode(t, c.src)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want one containing %q", c.src, err, c.want)
		}
	}
}

func TestNewMakesAnySpecUsable(t *testing.T) {
	for _, s := range []Spec{
		{},
		{Algorithm: 9, Min: -5, Max: -9, Initial: 1 << 62, Backoff: 7, Smoothing: -1, Tolerance: 0.1, Window: -time.Second, Fallback: -3},
		{Algorithm: AIMD, Min: 1 << 62, Max: 1 << 62},
	} {
		c := New(s, 0)
		sp := c.Spec()
		if sp.Min < 1 || sp.Max < sp.Min || sp.Max > MaxLimit || c.Limit() < sp.Min || c.Limit() > sp.Max || sp.Window < 10*time.Millisecond {
			t.Fatalf("New(%+v): spec %+v limit %d", s, sp, c.Limit())
		}
		c.Observe(Sample{Outcome: Error}, 0)
		c.Tick(0 + 3600*sec)
	}
}
