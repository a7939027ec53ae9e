package rls

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringlimit/ringlimit/clock"
	"github.com/ringlimit/ringlimit/internal/discard"
	"github.com/ringlimit/ringlimit/internal/reload"
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
	w   *reload.Watcher // loads one at a time: the last read is the one swapped in

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
	m.reloads.WithLabelValues("ok").Inc()
	m.w, err = reload.New(reload.Config{What: "rls config", Paths: []string{cfg.Path}, Load: m.load,
		Clock: cfg.Clock, Logger: cfg.Logger, Results: m.reloads, Poll: cfg.PollInterval,
		Refused:      "rls config reload refused; the running config stays",
		RefusedAttrs: func() []any { return []any{"path", cfg.Path, "running", m.Current().Version()} }})
	if err != nil {
		return nil, err
	}
	return m, nil
}

// Current returns the running Config.
func (m *Manager) Current() *Config { return m.cur.Load() }

// Reload reads the files again and swaps the new Config in if its version
// differs, reporting whether it did. A configuration that fails to load is
// refused with an error, a log line and a count; the running one stays.
func (m *Manager) Reload(reason string) (changed bool, err error) {
	return m.w.Reload(reason)
}

// Watcher returns the reload.Watcher of the files: Watch runs it;
// reload.Run runs it with the node's other watchers and SIGHUP.
func (m *Manager) Watcher() *reload.Watcher { return m.w }

// load is the Watcher's load: it reads the files and installs them when
// their version differs from the running one's.
func (m *Manager) load(reason string) (bool, error) {
	files, err := readFiles(m.cfg.Path)
	if err != nil {
		return false, err
	}
	if version(files) == m.Current().Version() {
		return false, nil
	}
	c, err := Parse(files)
	if err != nil {
		return false, err
	}
	m.install(c, reason)
	return true, nil
}

func (m *Manager) install(c *Config, reason string) {
	old := m.cur.Swap(c)
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

// Watch reloads the configuration when it changes, until ctx ends, and
// then returns nil. It watches the file's directory (editors replace a
// file by renaming another over it), or the directory itself when Path is
// one; and it polls every PollInterval in case a change was not notified.
// If the file system cannot be watched it logs why and only polls (see
// reload.Watcher).
func (m *Manager) Watch(ctx context.Context) error {
	m.w.Run(ctx)
	return nil
}
