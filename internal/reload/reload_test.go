package reload

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
)

const wait = 5 * time.Second // bound of every wait on a real event

// syncBuffer is a log sink the watcher's goroutine writes while the test
// reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) count(s string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Count(b.b.String(), s)
}

// number is what the tests reload: a file holding an integer. A file that
// does not hold one is refused and the running number stays.
type number struct {
	path string

	mu      sync.Mutex
	running int
	reasons []string // of every Load call
}

func (n *number) load(reason string) (bool, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.reasons = append(n.reasons, reason)
	data, err := os.ReadFile(n.path)
	if err != nil {
		return false, err
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		return false, fmt.Errorf("%s: not a number: %w", n.path, err)
	}
	if v == n.running {
		return false, nil
	}
	n.running = v
	return true, nil
}

func (n *number) state() (running, loads int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.running, len(n.reasons)
}

// fixture is a Watcher of a number file on a fake clock, its log and its
// counter.
type fixture struct {
	n    *number
	w    *Watcher
	clk  *testkit.Clock
	logs *syncBuffer
	reg  *prometheus.Registry
}

func newFixture(t *testing.T, edit func(*Config)) *fixture {
	t.Helper()
	path := filepath.Join(t.TempDir(), "n")
	write(t, path, "1")
	f := &fixture{n: &number{path: path, running: 1}, clk: testkit.NewClock(0), logs: &syncBuffer{}, reg: prometheus.NewRegistry()}
	results := NewCounter()
	f.reg.MustRegister(results)
	cfg := Config{What: "number", Paths: []string{path}, Load: f.n.load, Clock: f.clk,
		Logger:  slog.New(slog.NewTextHandler(f.logs, nil)),
		Results: results.MustCurryWith(prometheus.Labels{"what": "number"}),
		Poll:    time.Hour, Debounce: 100 * time.Millisecond}
	if edit != nil {
		edit(&cfg)
	}
	w, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.w = w
	return f
}

// run runs the watcher until the test ends, and returns once it is
// watching: its poll ticker waits on the clock.
func (f *fixture) run(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	f.waitTimers(t, 1)
}

// waitTimers waits until n timers wait on the fake clock: 1 once Run
// polls, 2 while a debounced load is due.
func (f *fixture) waitTimers(t *testing.T, n int) {
	t.Helper()
	testkit.WaitFor(t, wait, fmt.Sprintf("%d timers on the clock", n), func() error {
		if got := f.clk.Timers(); got != n {
			return fmt.Errorf("%d timers", got)
		}
		return nil
	})
}

func (f *fixture) waitRunning(t *testing.T, want int) {
	t.Helper()
	testkit.WaitFor(t, wait, fmt.Sprintf("number %d running", want), func() error {
		if got, _ := f.n.state(); got != want {
			return fmt.Errorf("running %d", got)
		}
		return nil
	})
}

func (f *fixture) wantLoads(t *testing.T, step string, want int) {
	t.Helper()
	if _, got := f.n.state(); got != want {
		t.Errorf("%s: %d loads, want %d", step, got, want)
	}
}

func (f *fixture) wantResults(t *testing.T, step string, ok, errs float64) {
	t.Helper()
	gotOK := testkit.Metric(t, f.reg, "ringlimit_reload_total", "what", "number", "result", "ok")
	gotErr := testkit.Metric(t, f.reg, "ringlimit_reload_total", "what", "number", "result", "error")
	if gotOK != ok || gotErr != errs {
		t.Errorf("%s: ringlimit_reload_total ok=%v error=%v, want %v and %v", step, gotOK, gotErr, ok, errs)
	}
}

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// replace renames a new file over path, as editors and tools do.
func replace(t *testing.T, path, data string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), ".tmp-"+filepath.Base(path))
	write(t, tmp, data)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TestChangeLoadsOnce: a file renamed over the watched one is loaded once,
// when the debounce has passed and not before.
func TestChangeLoadsOnce(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // after the watchers stop
	f := newFixture(t, nil)
	f.run(t)
	replace(t, f.n.path, "2")
	f.waitTimers(t, 2) // the event came: a load is due
	f.clk.Advance(99 * time.Millisecond)
	f.wantLoads(t, "before the debounce", 0)
	f.clk.Advance(time.Millisecond)
	f.waitRunning(t, 2)
	f.wantLoads(t, "after the debounce", 1)
	f.wantResults(t, "after the change", 1, 0)
	if f.n.reasons[0] != ReasonWatch {
		t.Errorf("loaded for %q, want %q", f.n.reasons[0], ReasonWatch)
	}
}

// TestBurstLoadsOnce: events closer together than the debounce are one
// load, Debounce after the last.
func TestBurstLoadsOnce(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // after the watchers stop
	f := newFixture(t, nil)
	events := make(chan fsnotify.Event)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.w.loop(ctx, events, nil) }()
	defer func() { cancel(); <-done }()
	f.waitTimers(t, 1)
	// send hands the loop an event, then one it ignores: once that one is
	// taken, the first has been handled.
	send := func(ev fsnotify.Event) {
		events <- ev
		events <- fsnotify.Event{Name: f.n.path, Op: fsnotify.Chmod}
	}
	write(t, f.n.path, "5")
	for range 5 {
		send(fsnotify.Event{Name: f.n.path, Op: fsnotify.Write})
		f.clk.Advance(60 * time.Millisecond) // less than the debounce
	}
	f.wantLoads(t, "during the burst", 0)
	f.clk.Advance(40 * time.Millisecond) // 100 ms after the last event
	f.waitRunning(t, 5)
	f.wantLoads(t, "after the burst", 1)
	// An event that concerns none of the paths loads nothing.
	send(fsnotify.Event{Name: filepath.Join(filepath.Dir(f.n.path), "other"), Op: fsnotify.Write})
	f.clk.Advance(time.Second)
	f.wantLoads(t, "after another file's event", 1)
}

// TestRefusalLoggedOnce: a bad file keeps what runs; three identical
// refusals are logged and counted once, a different one again, and after
// a success the same one again. An explicit Reload logs every refusal.
func TestRefusalLoggedOnce(t *testing.T) {
	f := newFixture(t, nil)
	const refused = "number reload refused; the running one stays"
	write(t, f.n.path, "x")
	for i := range 3 {
		if _, err := f.w.Check(); err == nil {
			t.Fatalf("check %d: bad file accepted", i+1)
		}
	}
	if got, _ := f.n.state(); got != 1 {
		t.Errorf("after a bad file: running %d, want 1 kept", got)
	}
	if n := f.logs.count(refused); n != 1 {
		t.Errorf("three identical refusals logged %d times, want 1", n)
	}
	f.wantResults(t, "three identical refusals", 0, 1)

	write(t, f.n.path, "y") // another error
	f.w.Check()
	f.w.Check()
	if n := f.logs.count(refused); n != 2 {
		t.Errorf("after another error: %d refusals logged, want 2", n)
	}
	f.wantResults(t, "another error", 0, 2)

	if _, err := f.w.Reload("sighup"); err == nil {
		t.Fatal("Reload: bad file accepted")
	}
	if n := f.logs.count(refused); n != 3 {
		t.Errorf("after an explicit Reload: %d refusals logged, want 3", n)
	}
	if n := f.logs.count("reason=sighup"); n != 1 {
		t.Errorf("the explicit refusal's reason logged %d times, want 1", n)
	}
	f.wantResults(t, "explicit reload", 0, 3)

	write(t, f.n.path, "3")
	if changed, err := f.w.Check(); !changed || err != nil {
		t.Fatalf("good file: Check() = %v, %v, want true, nil", changed, err)
	}
	f.wantResults(t, "good file", 1, 3)
	write(t, f.n.path, "y")
	f.w.Check()
	if n := f.logs.count(refused); n != 4 {
		t.Errorf("the same error after a success: %d refusals logged, want 4", n)
	}
	f.wantResults(t, "the same error after a success", 1, 4)

	// Back to what runs: no change, no count, and the refusal forgotten.
	write(t, f.n.path, "3")
	if changed, err := f.w.Check(); changed || err != nil {
		t.Fatalf("unchanged file: Check() = %v, %v, want false, nil", changed, err)
	}
	f.wantResults(t, "unchanged", 1, 4)
	write(t, f.n.path, "y")
	f.w.Check()
	if n := f.logs.count(refused); n != 5 {
		t.Errorf("the same error after an unchanged file: %d refusals logged, want 5", n)
	}
}

// TestDirectoryGainsFile: a watched directory loads when a file appears in
// it.
func TestDirectoryGainsFile(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // after the watchers stop
	dir := t.TempDir()
	write(t, filepath.Join(dir, "a.yaml"), "a")
	var mu sync.Mutex
	var names []string
	load := func(string) (bool, error) {
		es, err := os.ReadDir(dir)
		if err != nil {
			return false, err
		}
		var got []string
		for _, e := range es {
			got = append(got, e.Name())
		}
		mu.Lock()
		defer mu.Unlock()
		changed := !slices.Equal(got, names)
		names = got
		return changed, nil
	}
	f := newFixture(t, func(c *Config) { c.Paths, c.Load = []string{dir}, load })
	f.run(t)
	// Moved in whole from elsewhere: one event (a file written in place
	// is two, and the second could come after the clock moved).
	tmp := filepath.Join(t.TempDir(), "b.yaml")
	write(t, tmp, "b")
	if err := os.Rename(tmp, filepath.Join(dir, "b.yaml")); err != nil {
		t.Fatal(err)
	}
	f.waitTimers(t, 2)
	f.clk.Advance(100 * time.Millisecond)
	testkit.WaitFor(t, wait, "b.yaml loaded", func() error {
		mu.Lock()
		defer mu.Unlock()
		if !slices.Equal(names, []string{"a.yaml", "b.yaml"}) {
			return fmt.Errorf("loaded %v", names)
		}
		return nil
	})
	f.wantResults(t, "a file added", 1, 0)
}

// TestPollsWithoutNotify: with fsnotify disabled, a change is loaded at
// the next poll, and only then.
func TestPollsWithoutNotify(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // after the watchers stop
	f := newFixture(t, func(c *Config) { c.DisableNotify, c.Poll = true, 2*time.Second })
	f.run(t)
	write(t, f.n.path, "7")
	f.clk.Advance(time.Second)
	f.wantLoads(t, "before the poll", 0)
	f.clk.Advance(time.Second)
	f.waitRunning(t, 7)
	f.wantResults(t, "after the poll", 1, 0)
	// A bad file found by every poll: one refusal.
	write(t, f.n.path, "bad")
	for i := range 3 {
		f.clk.Advance(2 * time.Second)
		testkit.WaitFor(t, wait, fmt.Sprintf("poll %d", i+1), func() error {
			if _, loads := f.n.state(); loads != 2+i {
				return fmt.Errorf("%d loads", loads)
			}
			return nil
		})
	}
	f.wantResults(t, "three polls of a bad file", 1, 1)
	if n := f.logs.count("number reload refused"); n != 1 {
		t.Errorf("three polls of a bad file logged %d refusals, want 1", n)
	}
	if got, _ := f.n.state(); got != 7 {
		t.Errorf("running %d after a bad file, want 7 kept", got)
	}
}

// TestSignalReloadsAll: a SIGHUP reloads every watcher once, with reason
// "sighup", and Changed runs after each change.
func TestSignalReloadsAll(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // after the watchers stop
	changed := make(chan struct{}, 2)
	note := func() { changed <- struct{}{} }
	a := newFixture(t, func(c *Config) { c.Changed = note })
	b := newFixture(t, func(c *Config) { c.Changed = note })
	hup := make(chan os.Signal)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); run(ctx, hup, []*Watcher{a.w, b.w}) }()
	defer func() { cancel(); <-done }()
	write(t, a.n.path, "10")
	write(t, b.n.path, "20")
	hup <- syscall.SIGHUP
	for i := range 2 {
		select {
		case <-changed:
		case <-time.After(wait):
			t.Fatalf("%d of 2 watchers changed within %v of SIGHUP", i, wait)
		}
	}
	for _, f := range []*fixture{a, b} {
		f.mu().Lock()
		reasons := slices.Clone(f.n.reasons)
		f.mu().Unlock()
		if !slices.Equal(reasons, []string{"sighup"}) {
			t.Errorf("%s: loads for %q, want one for sighup", f.n.path, reasons)
		}
		f.wantResults(t, "sighup", 1, 0)
	}
	if got, _ := a.n.state(); got != 10 {
		t.Errorf("a runs %d, want 10", got)
	}
	if got, _ := b.n.state(); got != 20 {
		t.Errorf("b runs %d, want 20", got)
	}
}

func (f *fixture) mu() *sync.Mutex { return &f.n.mu }

// TestRelevant: which events trigger a load.
func TestRelevant(t *testing.T) {
	dir := t.TempDir()
	sub := filepath.Join(dir, "conf.d")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "policy.yaml")
	w, err := New(Config{What: "x", Paths: []string{file, sub}, Load: func(string) (bool, error) { return false, nil }, Clock: testkit.NewClock(0)})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := w.watched(), []string{dir, sub}; !slices.Equal(got, want) {
		t.Errorf("watched %v, want %v", got, want)
	}
	for _, c := range []struct {
		name string
		op   fsnotify.Op
		want bool
	}{
		{file, fsnotify.Write, true},
		{file, fsnotify.Create, true},
		{file, fsnotify.Rename, true},
		{file, fsnotify.Remove, true},
		{file, fsnotify.Chmod, false},
		{filepath.Join(dir, "other.yaml"), fsnotify.Write, false},
		{filepath.Join(dir, "..data"), fsnotify.Create, true}, // a ConfigMap's swap
		{filepath.Join(dir, "..2026_01_01"), fsnotify.Remove, true},
		{filepath.Join(sub, "a.yaml"), fsnotify.Create, true},
		{filepath.Join(sub, "a.yaml"), fsnotify.Remove, true},
		{filepath.Join(sub, "deeper", "a.yaml"), fsnotify.Write, false},
	} {
		if got := w.relevant(fsnotify.Event{Name: c.name, Op: c.op}); got != c.want {
			t.Errorf("relevant(%s %s) = %v, want %v", c.op, c.name, got, c.want)
		}
	}
}

func TestNewRefuses(t *testing.T) {
	load := func(string) (bool, error) { return false, nil }
	clk := testkit.NewClock(0)
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Paths: []string{"p"}, Load: load, Clock: clk}, "What is required"},
		{Config{What: "x", Paths: []string{""}, Load: load, Clock: clk}, "no path"},
		{Config{What: "x", Paths: []string{"p"}, Clock: clk}, "Load is required"},
		{Config{What: "x", Paths: []string{"p"}, Load: load}, "Clock is required"},
		{Config{What: "x", Paths: []string{"p"}, Load: load, Clock: clk, Poll: -1}, "Poll must be ≥ 0"},
		{Config{What: "x", Paths: []string{"p"}, Load: load, Clock: clk, Debounce: -1}, "Debounce must be ≥ 0"},
	} {
		_, err := New(c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%+v) = %v, want an error containing %q", c.cfg, err, c.want)
		}
	}
	if _, err := New(Config{What: "x", Paths: []string{"p"}, Load: load, Clock: clk}); err != nil {
		t.Errorf("New with the required fields: %v", err)
	}
}
