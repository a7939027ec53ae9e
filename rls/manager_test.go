package rls

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/ringlimit/ringlimit/clock"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
)

const (
	goodV1 = "domain: messaging\ndescriptors:\n  - key: to_number\n    rate_limit: {unit: day, requests_per_unit: 100}\n"
	goodV2 = "domain: messaging\ndescriptors:\n  - key: to_number\n    rate_limit: {unit: day, requests_per_unit: 200}\n"
	bad    = "domain: messaging\ndescriptors:\n  - key: to_number\n    rate_limit: {unit: fortnight}\n"
)

// metrics gathers reg as "name{label=value,...}" → value.
func metrics(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			out[fmt.Sprintf("%s{%s}", f.GetName(), strings.Join(labels, ","))] = v
		}
	}
	return out
}

func newManager(t *testing.T, path string, reg prometheus.Registerer) *Manager {
	t.Helper()
	m, err := NewManager(ManagerConfig{Path: path, Registerer: reg, Clock: clock.System(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func limitOf(t *testing.T, m *Manager) uint32 {
	t.Helper()
	r, ok := m.Current().Match("messaging", desc("to_number", "1"))
	if !ok {
		t.Fatalf("no match in config %s", m.Current().Version())
	}
	return r.RequestsPerUnit
}

func TestNewManagerRefusesBadConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rls.yaml")
	write(t, path, bad)
	if _, err := NewManager(ManagerConfig{Path: path, Clock: clock.System()}); err == nil || !strings.Contains(err.Error(), `rls.yaml:4: invalid rate limit unit "fortnight"`) {
		t.Errorf("NewManager(bad) = %v", err)
	}
	if _, err := NewManager(ManagerConfig{}); err == nil {
		t.Error("NewManager without a Path succeeded")
	}
}

func TestReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rls.yaml")
	write(t, path, goodV1)
	reg := prometheus.NewRegistry()
	m := newManager(t, path, reg)
	v1 := m.Current().Version()

	steps := []struct {
		write   string // "" leaves the file alone
		changed bool
		err     string // a part of the error; "" for none
		limit   uint32
		metrics map[string]float64
	}{
		{"", false, "", 100, map[string]float64{
			"ringlimit_rls_config_reloads_total{result=ok}":    1,
			"ringlimit_rls_config_reloads_total{result=error}": 0, // there from the start
			"ringlimit_rls_config_info{version=" + v1 + "}":    1,
		}},
		{bad, false, `invalid rate limit unit "fortnight"`, 100, map[string]float64{
			"ringlimit_rls_config_reloads_total{result=ok}":    1,
			"ringlimit_rls_config_reloads_total{result=error}": 1,
			"ringlimit_rls_config_info{version=" + v1 + "}":    1,
		}},
		{goodV2, true, "", 200, map[string]float64{
			"ringlimit_rls_config_reloads_total{result=ok}":             2,
			"ringlimit_rls_config_reloads_total{result=error}":          1,
			"ringlimit_rls_config_info{version=" + version2(path) + "}": 1,
		}},
	}
	for i, s := range steps {
		if s.write != "" {
			write(t, path, s.write)
		}
		changed, err := m.Reload("test")
		if changed != s.changed || (err == nil) != (s.err == "") || (err != nil && !strings.Contains(err.Error(), s.err)) {
			t.Errorf("step %d: Reload() = %v, %v; want %v, %q", i, changed, err, s.changed, s.err)
		}
		if got := limitOf(t, m); got != s.limit {
			t.Errorf("step %d: running limit %d, want %d", i, got, s.limit)
		}
		if got := metrics(t, reg); !mapsEqual(got, s.metrics) {
			t.Errorf("step %d: metrics\n\t%v\nwant\n\t%v", i, got, s.metrics)
		}
	}
}

func version2(path string) string { return version([]File{{Name: path, Data: []byte(goodV2)}}) }

func mapsEqual(a, b map[string]float64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestPollRefusesOnce: polling a bad file logs and counts its refusal
// once, not every interval; an explicit Reload reports it again.
func TestPollRefusesOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rls.yaml")
	write(t, path, goodV1)
	reg := prometheus.NewRegistry()
	m := newManager(t, path, reg)
	write(t, path, bad)
	for range 3 {
		if _, err := m.Watcher().Check(); err == nil {
			t.Fatal("bad file accepted")
		}
	}
	if got := metrics(t, reg)["ringlimit_rls_config_reloads_total{result=error}"]; got != 1 {
		t.Errorf("errors counted while polling: %v, want 1", got)
	}
	m.Reload("sighup")
	if got := metrics(t, reg)["ringlimit_rls_config_reloads_total{result=error}"]; got != 2 {
		t.Errorf("errors counted after an explicit reload: %v, want 2", got)
	}
}

// replace writes data beside path and renames it over path, as editors
// and configuration tools do.
func replace(t *testing.T, path, data string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), ".tmp-"+filepath.Base(path))
	write(t, tmp, data)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func TestWatch(t *testing.T) {
	defer goleak.VerifyNone(t)
	for _, tt := range []struct {
		name string
		dir  bool // watch a directory rather than a file
	}{{"file", false}, {"directory", true}} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			file := filepath.Join(dir, "messaging.yaml")
			write(t, file, goodV1)
			path := file
			if tt.dir {
				path = dir
			}
			// A poll interval long enough that only fsnotify can see the
			// change within the test's wait.
			reg := prometheus.NewRegistry()
			m, err := NewManager(ManagerConfig{Path: path, PollInterval: time.Hour, Registerer: reg, Clock: clock.System(),
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- m.Watch(ctx) }()
			defer func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("Watch() = %v", err)
				}
			}()
			// Watch adds its fsnotify watch once running: rewrite until the
			// change is seen, within a bound.
			deadline := time.Now().Add(5 * time.Second)
			for {
				replace(t, file, goodV2)
				if testkit.Poll(200*time.Millisecond, func() bool { return limitOf(t, m) == 200 }) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("rewrite not picked up within 5s; running %s", m.Current().Version())
				}
			}
			// A bad rewrite is refused; the running configuration stays.
			replace(t, file, bad)
			testkit.Eventually(t, 5*time.Second, "the bad rewrite refused", func() bool {
				return metrics(t, reg)["ringlimit_rls_config_reloads_total{result=error}"] == 1
			})
			if got := limitOf(t, m); got != 200 {
				t.Errorf("after a bad rewrite the running limit is %d, want 200", got)
			}
		})
	}
}

// TestWatchPolls: with notifications missed, polling finds the change.
func TestWatchPolls(t *testing.T) {
	defer goleak.VerifyNone(t)
	path := filepath.Join(t.TempDir(), "rls.yaml")
	write(t, path, goodV1)
	m, err := NewManager(ManagerConfig{Path: path, PollInterval: 20 * time.Millisecond, Clock: clock.System(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	// A change made before Watch starts sends no notification: only a
	// poll can see it.
	write(t, path, goodV2)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Watch(ctx) }()
	testkit.Eventually(t, 5*time.Second, "the change polled", func() bool { return limitOf(t, m) == 200 })
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Watch() = %v", err)
	}
}
