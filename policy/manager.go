package policy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringlimit/ringlimit/clock"
	"github.com/ringlimit/ringlimit/internal/discard"
	"github.com/ringlimit/ringlimit/internal/reload"
)

// ManagerConfig configures a Manager.
type ManagerConfig struct {
	// Path is the policy file. Required.
	Path string
	// AuditLog receives one JSON line per accepted change. Nil discards.
	AuditLog io.Writer
	// Logger receives reload results. Nil discards them.
	Logger *slog.Logger
	// Registerer receives the policy metrics. Nil means none.
	Registerer prometheus.Registerer
	// Clock stamps overrides (created, and the expiry they are compared
	// with) and audit lines, and times Watch's debounce. Required: a node
	// passes its one clock to every package. Whoever computes an
	// override's Expires should read this clock too (Manager.Now), so that
	// the expiry and the comparison use one timeline.
	Clock clock.Clock
}

// Manager holds the running policy: it reloads the file (on Reload, or on
// change with Watch), keeps incident overrides and writes the audit log. It
// is safe for concurrent use.
type Manager struct {
	cfg ManagerConfig
	log *slog.Logger
	set atomic.Pointer[Set]

	w         *reload.Watcher // loads one at a time: the last read is the one swapped in
	mu        sync.Mutex      // guards overrides and audit writes
	overrides map[string]*Override
	nextID    int

	reloads      *prometheus.CounterVec
	dryRun       *prometheus.CounterVec
	versionGauge *prometheus.GaugeVec
	refused      *prometheus.CounterVec // overrides from other members not installed, by reason
}

// NewManager loads the policy file; it fails if the file is missing or bad.
func NewManager(cfg ManagerConfig) (*Manager, error) {
	if cfg.Path == "" {
		return nil, errors.New("policy: Path is required")
	}
	if cfg.AuditLog == nil {
		cfg.AuditLog = io.Discard
	}
	if cfg.Clock == nil {
		return nil, errors.New("policy: ManagerConfig.Clock is required")
	}
	cfg.Logger = discard.Logger(cfg.Logger)
	m := &Manager{
		cfg:       cfg,
		log:       cfg.Logger,
		overrides: map[string]*Override{},
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ringlimit_policy_reloads_total",
			Help: "Policy file loads, by result (ok, error: the old policy kept running).",
		}, []string{"result"}),
		dryRun: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ringlimit_policy_dry_run_rejections_total",
			Help: "Requests a dry-run layer would have rejected, by scope.",
		}, []string{"scope"}),
		versionGauge: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ringlimit_policy_info",
			Help: "The running policy version (value 1).",
		}, []string{"version"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ringlimit_policy_overrides_refused_total",
			Help: "Overrides received from other members and not installed, by reason (too_long: beyond the expiry cap; too_many: the cap on overrides in force; invalid).",
		}, []string{"reason"}),
	}
	m.reloads.WithLabelValues("error") // at 0 from the start, for alerts on increase()
	set, err := m.read()
	if err != nil {
		return nil, err
	}
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{m.reloads, m.dryRun, m.versionGauge, m.refused} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, err
			}
		}
	}
	m.swap(set, "startup")
	m.reloads.WithLabelValues("ok").Inc()
	m.w, err = reload.New(reload.Config{What: "policy", Paths: []string{cfg.Path}, Load: m.load,
		Clock: cfg.Clock, Logger: cfg.Logger, Results: m.reloads,
		Refused:      "policy reload refused; the running policy stays",
		RefusedAttrs: func() []any { return []any{"source", cfg.Path, "running", m.Current().Version} }})
	if err != nil {
		return nil, err
	}
	return m, nil
}

func (m *Manager) read() (*Set, error) {
	f, err := os.Open(m.cfg.Path)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("policy: %s: %w", m.cfg.Path, err)
	}
	return Parse(data, m.cfg.Path)
}

func (m *Manager) swap(set *Set, actor string) {
	old := m.set.Swap(set)
	m.versionGauge.Reset()
	m.versionGauge.WithLabelValues(set.Version).Set(1)
	oldVersion := ""
	if old != nil {
		oldVersion = old.Version
	}
	m.log.Info("policy loaded", "version", set.Version, "source", set.Source, "previous", oldVersion)
	m.audit(auditEntry{Actor: actor, Action: "policy_reload", What: set.Source, Old: oldVersion, New: set.Version})
}

// Now returns the time on the Manager's clock, the one override expiries
// are compared with: an override meant to last d expires at Now().Add(d).
func (m *Manager) Now() clock.Instant { return m.cfg.Clock.Now() }

// wallNow returns Now as a time.Time, the type of an Override's times.
func (m *Manager) wallNow() time.Time { return m.cfg.Clock.Now().Time() }

// Current returns the running policy set.
func (m *Manager) Current() *Set { return m.set.Load() }

// Reload reads the file again. A file that fails validation is refused with
// an error and a log line, and the running policy stays. A file whose
// version did not change is not reloaded.
func (m *Manager) Reload(actor string) error {
	_, err := m.w.Reload(actor)
	return err
}

// Watcher returns the reload.Watcher of the policy file: Watch runs it;
// reload.Run runs it with the node's other watchers and SIGHUP.
func (m *Manager) Watcher() *reload.Watcher { return m.w }

// load is the Watcher's load: it reads the file and swaps it in when its
// version differs from the running one's.
func (m *Manager) load(actor string) (bool, error) {
	set, err := m.read()
	if err != nil {
		return false, err
	}
	if cur := m.Current(); cur != nil && cur.Version == set.Version {
		return false, nil
	}
	m.swap(set, actor)
	return true, nil
}

// Watch reloads the file whenever it changes, until ctx ends, and then
// returns nil. It watches the file's directory, so that editors that
// replace the file by renaming, and a mounted ConfigMap's symbolic link
// swap, are seen too; and it reads the file every reload.DefaultPoll in
// case a change was not notified (see reload.Watcher).
func (m *Manager) Watch(ctx context.Context) error {
	m.w.Run(ctx)
	return nil
}

// Resolve picks the request's policy, applies an active override for its
// caller, and lists the checks that apply (see Policy.Resolve).
func (m *Manager) Resolve(req Request) ([]Check, error) {
	set := m.Current()
	name := req.Policy
	if name == "" {
		name = set.Default
	}
	p := set.Policies[name]
	if p == nil {
		if req.Policy == "" {
			return nil, fmt.Errorf("%w: policy: the file has several policies and no \"default\"; name one", ErrRequest)
		}
		return nil, fmt.Errorf("%w: policy: no policy named %q", ErrRequest, req.Policy)
	}
	var layer *Layer
	if req.APIKey != "" || req.User != "" {
		m.mu.Lock()
		if o := m.overrides[overrideKey(name, req.APIKey, req.User)]; o != nil && m.wallNow().Before(o.Expires) {
			layer = o.layer
		}
		m.mu.Unlock()
	}
	return p.Resolve(req, layer)
}

// CountDryRun records the dry-run layers that would have rejected.
func (m *Manager) CountDryRun(scopes []string) {
	for _, s := range scopes {
		m.dryRun.WithLabelValues(s).Inc()
	}
}

type auditEntry struct {
	Time    time.Time  `json:"time"`
	Actor   string     `json:"actor"`
	Action  string     `json:"action"`
	What    string     `json:"what"`
	Reason  string     `json:"reason,omitempty"`
	Old     string     `json:"old,omitempty"`
	New     string     `json:"new,omitempty"`
	Expires *time.Time `json:"expires,omitempty"`
}

// Audit appends a line to the audit log: actor did action on what (a
// reset of a key, by the API). Safe for concurrent use.
func (m *Manager) Audit(actor, action, what string) {
	m.audit(auditEntry{Actor: actor, Action: action, What: what})
}

func (m *Manager) audit(e auditEntry) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.auditLocked(e)
}

func (m *Manager) auditLocked(e auditEntry) {
	e.Time = m.wallNow()
	line, _ := json.Marshal(e)
	if _, err := m.cfg.AuditLog.Write(append(line, '\n')); err != nil {
		m.log.Error("audit log write failed", "err", err)
	}
}
