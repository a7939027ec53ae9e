package rls

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringlimit/ringlimit/clock"
	"github.com/ringlimit/ringlimit/internal/discard"
)

// ManagerConfig configures a Manager.
type ManagerConfig struct {
	// Path is the configuration: a YAML file or a directory of them (see
	// Load). Required.
	Path string
	// Logger receives reload results and warnings. Nil discards them.
	Logger *slog.Logger
	// Registerer receives the metrics. Nil means none.
	Registerer prometheus.Registerer
	// Clock times Watch's debounce and polling. Required: a node passes its
	// one clock to every package.
	Clock clock.Clock
	// PollInterval is how often Watch reads the files again in case a
	// change was not notified (network file systems, a replaced
	// directory). Reading is cheap: an unchanged version is not parsed.
	// Zero means 2 s.
	PollInterval time.Duration
}

// Manager holds the running Config and replaces it when the files change.
// It is safe for concurrent use.
type Manager struct {
	cfg ManagerConfig
	log *slog.Logger
	cur atomic.Pointer[Config]

	reloadMu sync.Mutex // one reload at a time: the last read is the one swapped in
	refused  string     // guarded by reloadMu: the last refusal, so that polling does not repeat it

	reloads *prometheus.CounterVec
	info    *prometheus.GaugeVec
}

// NewManager loads the configuration; it fails if it is missing or bad.
func NewManager(cfg ManagerConfig) (*Manager, error) {
	if cfg.Path == "" {
		return nil, errors.New("rls: Path is required")
	}
	if cfg.Clock == nil {
		return nil, errors.New("rls: ManagerConfig.Clock is required")
	}
	cfg.Logger = discard.Logger(cfg.Logger)
	if cfg.PollInterval < 0 {
		return nil, fmt.Errorf("rls: PollInterval must be ≥ 0, got %v", cfg.PollInterval)
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 2 * time.Second
	}
	m := &Manager{
		cfg: cfg,
		log: cfg.Logger,
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ringlimit_rls_config_reloads_total",
			Help: "Rate limit service configuration loads, by result (ok; error: the running configuration stayed).",
		}, []string{"result"}),
		info: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ringlimit_rls_config_info",
			Help: "The running rate limit service configuration version (value 1).",
		}, []string{"version"}),
	}
	m.reloads.WithLabelValues("error") // at 0 from the start, for alerts on increase()
	c, err := Load(cfg.Path)
	if err != nil {
		return nil, err
	}
	if cfg.Registerer != nil {
		for _, col := range []prometheus.Collector{m.reloads, m.info} {
			if err := cfg.Registerer.Register(col); err != nil {
				return nil, err
			}
		}
	}
	m.install(c, "startup")
	return m, nil
}

// Current returns the running Config.
func (m *Manager) Current() *Config { return m.cur.Load() }

// Reload reads the files again and swaps the new Config in if its version
// differs, reporting whether it did. A configuration that fails to load is
// refused with an error, a log line and a count; the running one stays.
func (m *Manager) Reload(reason string) (changed bool, err error) {
	return m.reload(reason, false)
}

// reload is Reload; quiet neither logs nor counts a refusal identical to
// the previous one (polling a bad file every few seconds).
func (m *Manager) reload(reason string, quiet bool) (bool, error) {
	m.reloadMu.Lock()
	defer m.reloadMu.Unlock()
	running := m.Current()
	files, err := readFiles(m.cfg.Path)
	var c *Config
	if err == nil {
		if version(files) == running.Version() {
			m.refused = ""
			return false, nil
		}
		c, err = Parse(files)
	}
	if err != nil {
		if quiet && err.Error() == m.refused {
			return false, err
		}
		m.refused = err.Error()
		m.reloads.WithLabelValues("error").Inc()
		m.log.Error("rls config reload refused; the running config stays", "path", m.cfg.Path,
			"running", running.Version(), "reason", reason, "err", err)
		return false, err
	}
	m.refused = ""
	m.install(c, reason)
	return true, nil
}

func (m *Manager) install(c *Config, reason string) {
	old := m.cur.Swap(c)
	m.reloads.WithLabelValues("ok").Inc()
	m.info.Reset()
	m.info.WithLabelValues(c.Version()).Set(1)
	previous := ""
	if old != nil {
		previous = old.Version()
	}
	m.log.Info("rls config loaded", "path", m.cfg.Path, "version", c.Version(), "previous", previous,
		"domains", len(c.names), "reason", reason)
	for _, w := range c.warnings {
		m.log.Warn("rls config", "warning", w)
	}
}

// watchDebounce is how long Watch waits after the last change it sees
// before it reloads: an editor's save is several events.
const watchDebounce = 100 * time.Millisecond

// Watch reloads the configuration when it changes, until ctx ends, and
// then returns nil. It watches the file's directory (editors replace a
// file by renaming another over it), or the directory itself when Path is
// one; and it polls every PollInterval in case a change was not notified.
// If the file system cannot be watched it logs why and only polls.
func (m *Manager) Watch(ctx context.Context) error {
	events, errs, stop := m.notify()
	defer stop()
	poll := m.cfg.Clock.NewTicker(m.cfg.PollInterval)
	defer poll.Stop()
	debounce := m.cfg.Clock.NewTimer(time.Hour)
	debounce.Stop()
	defer debounce.Stop()
	var due <-chan time.Time // debounce.C() while a reload is due
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			if m.relevant(ev) {
				debounce.Reset(watchDebounce)
				due = debounce.C()
			}
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			m.log.Warn("rls config watch error", "err", err)
		case <-due:
			due = nil
			m.reload("file-watch", false)
		case <-poll.C():
			m.reload("poll", true)
		}
	}
}

// notify starts an fsnotify watch on Path (a directory) or its directory.
// On failure the channels are nil: Watch only polls.
func (m *Manager) notify() (<-chan fsnotify.Event, <-chan error, func()) {
	dir := m.cfg.Path
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		dir = filepath.Dir(dir)
	}
	w, err := fsnotify.NewWatcher()
	if err == nil {
		if err = w.Add(dir); err != nil {
			w.Close()
		}
	}
	if err != nil {
		m.log.Warn("rls config not watched; polling only", "dir", dir, "every", m.cfg.PollInterval, "err", err)
		return nil, nil, func() {}
	}
	return w.Events, w.Errors, func() { w.Close() }
}

// relevant tells whether an event may change the configuration: any
// change in a watched configuration directory; for a file, the file
// itself, or a ConfigMap's symbolic link swap (names starting with "..")
// beside it. Reload compares versions, so a false alarm costs one read.
func (m *Manager) relevant(ev fsnotify.Event) bool {
	if !ev.Op.Has(fsnotify.Write) && !ev.Op.Has(fsnotify.Create) && !ev.Op.Has(fsnotify.Rename) && !ev.Op.Has(fsnotify.Remove) {
		return false
	}
	path := filepath.Clean(m.cfg.Path)
	name := filepath.Clean(ev.Name)
	return filepath.Dir(name) == path || name == path || strings.HasPrefix(filepath.Base(name), "..")
}
