package reload

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringlimit/ringlimit/clock"
)

// Defaults of Config's durations.
const (
	// DefaultPoll is how often the files are read again when Config.Poll
	// is zero.
	DefaultPoll = 2 * time.Second
	// DefaultDebounce is how long a Watcher waits after the last event it
	// sees before it loads, when Config.Debounce is zero: an editor's save
	// is several events.
	DefaultDebounce = 100 * time.Millisecond
)

// Reasons a Watcher gives its Load function for the loads it starts by
// itself; an explicit Reload passes its caller's reason ("sighup", an
// actor's name, ...).
const (
	ReasonWatch = "file-watch" // a file event, or a poll
)

// LoadFunc reads the files, validates them and installs the result, or
// refuses it with an error and leaves what runs untouched. It reports
// whether it installed something new: false when the content is what
// already runs. reason says why it runs (ReasonWatch, or Reload's
// argument). A Watcher never calls it concurrently.
type LoadFunc func(reason string) (changed bool, err error)

// Config configures a Watcher.
type Config struct {
	// What names what is reloaded in log lines ("policy", "certificates").
	// Required.
	What string
	// Paths are the files and directories to watch. A file is watched
	// through its directory: an event on the file itself, or on a name
	// starting with ".." beside it (a ConfigMap swaps a symbolic link
	// named ..data), triggers a load. A directory (one when New runs):
	// any event on a name directly in it. Empty strings are skipped; at
	// least one path is required.
	Paths []string
	// Load reads, validates and installs. Required.
	Load LoadFunc
	// Clock times the debounce and the polls. Required (tests pass a fake).
	Clock clock.Clock
	// Logger receives refusals and watch errors. Nil discards.
	Logger *slog.Logger
	// Results counts loads by result ("ok": something new installed;
	// "error": refused). Its one variable label must be "result" (curry
	// the others, e.g. NewCounter's "what"). Nil counts nothing.
	Results *prometheus.CounterVec
	// Poll is how often Run loads again whether or not an event came: the
	// fallback where fsnotify does not work and a safety net where it
	// misses events. A load of unchanged files should cost one read.
	// Zero means DefaultPoll; it must not be negative.
	Poll time.Duration
	// Debounce is how long Run waits after the last event before it
	// loads. Zero means DefaultDebounce; it must not be negative.
	Debounce time.Duration
	// DisableNotify makes Run poll only, without fsnotify.
	DisableNotify bool
	// Refused is the message of the log line of a refusal. Zero means
	// What + " reload refused; the running one stays".
	Refused string
	// RefusedAttrs, when set, gives attributes added to every refusal's
	// log line (such as the version still running).
	RefusedAttrs func() []any
	// Changed, when set, is called after every load that installed
	// something new, before the next load can start.
	//
	// Load, RefusedAttrs and Changed run one at a time, under the
	// Watcher's lock: they must not call its Reload or Check.
	Changed func()
}

// Watcher runs a Config's Load when its files change, every Poll, and on
// Reload. It is safe for concurrent use; Run may run once at a time.
type Watcher struct {
	cfg  Config
	log  *slog.Logger
	dirs map[string]bool // Paths that are directories, cleaned

	mu      sync.Mutex // serialises loads; guards lastErr
	lastErr string     // the last refusal logged, "" after a success
}

// New checks cfg and returns a Watcher; it does not load (the caller
// loads at startup as it needs: failing there is usually fatal).
func New(cfg Config) (*Watcher, error) {
	cfg.Paths = slices.DeleteFunc(slices.Clone(cfg.Paths), func(p string) bool { return p == "" })
	switch {
	case cfg.What == "":
		return nil, errors.New("reload: What is required")
	case len(cfg.Paths) == 0:
		return nil, fmt.Errorf("reload: %s: no path to watch", cfg.What)
	case cfg.Load == nil:
		return nil, fmt.Errorf("reload: %s: Load is required", cfg.What)
	case cfg.Clock == nil:
		return nil, fmt.Errorf("reload: %s: Clock is required", cfg.What)
	case cfg.Poll < 0:
		return nil, fmt.Errorf("reload: %s: Poll must be ≥ 0, got %v", cfg.What, cfg.Poll)
	case cfg.Debounce < 0:
		return nil, fmt.Errorf("reload: %s: Debounce must be ≥ 0, got %v", cfg.What, cfg.Debounce)
	}
	if cfg.Poll == 0 {
		cfg.Poll = DefaultPoll
	}
	if cfg.Debounce == 0 {
		cfg.Debounce = DefaultDebounce
	}
	if cfg.Refused == "" {
		cfg.Refused = cfg.What + " reload refused; the running one stays"
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w := &Watcher{cfg: cfg, log: log, dirs: map[string]bool{}}
	for _, p := range cfg.Paths {
		if st, err := os.Stat(p); err == nil && st.IsDir() {
			w.dirs[filepath.Clean(p)] = true
		}
	}
	if cfg.Results != nil {
		cfg.Results.WithLabelValues("error") // at 0 from the start, for alerts on increase()
	}
	return w, nil
}

// What returns Config.What.
func (w *Watcher) What() string { return w.cfg.What }

// Reload loads now, for reason (e.g. "sighup"): a refusal is logged and
// counted even when it repeats the previous one. It returns Load's results.
func (w *Watcher) Reload(reason string) (changed bool, err error) {
	return w.load(reason, false)
}

// Check loads as a file event or a poll does: a refusal identical to the
// previous one is neither logged nor counted.
func (w *Watcher) Check() (changed bool, err error) {
	return w.load(ReasonWatch, true)
}

func (w *Watcher) load(reason string, quiet bool) (bool, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	changed, err := w.cfg.Load(reason)
	if err != nil {
		if quiet && err.Error() == w.lastErr {
			return false, err
		}
		w.lastErr = err.Error()
		w.count("error")
		attrs := []any{"reason", reason}
		if w.cfg.RefusedAttrs != nil {
			attrs = append(attrs, w.cfg.RefusedAttrs()...)
		}
		w.log.Error(w.cfg.Refused, append(attrs, "err", err)...)
		return false, err
	}
	w.lastErr = ""
	if changed {
		w.count("ok")
		if w.cfg.Changed != nil {
			w.cfg.Changed()
		}
	}
	return changed, nil
}

func (w *Watcher) count(result string) {
	if w.cfg.Results != nil {
		w.cfg.Results.WithLabelValues(result).Inc()
	}
}

// Run loads on file events (debounced) and every Poll until ctx ends. If
// the files cannot be watched it logs why and only polls.
func (w *Watcher) Run(ctx context.Context) {
	events, errs, stop := w.notify()
	defer stop()
	w.loop(ctx, events, errs)
}

// loop is Run on the given event channels (nil: none).
func (w *Watcher) loop(ctx context.Context, events <-chan fsnotify.Event, errs <-chan error) {
	debounce := w.cfg.Clock.NewTimer(time.Hour)
	debounce.Stop()
	defer debounce.Stop()
	poll := w.cfg.Clock.NewTicker(w.cfg.Poll)
	defer poll.Stop()
	var due <-chan time.Time // debounce.C() while a load is due
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			if w.relevant(ev) {
				debounce.Reset(w.cfg.Debounce)
				due = debounce.C()
			}
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			w.log.Warn(w.cfg.What+" watch error", "err", err)
		case <-due:
			due = nil
			w.Check()
		case <-poll.C():
			w.Check()
		}
	}
}

// watched returns the directories to watch: the directories among Paths,
// and the directory of each file.
func (w *Watcher) watched() []string {
	var dirs []string
	for _, p := range w.cfg.Paths {
		d := filepath.Clean(p)
		if !w.dirs[d] {
			d = filepath.Dir(d)
		}
		if !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// notify starts an fsnotify watch on the watched directories. On failure,
// or with DisableNotify, the channels are nil: Run only polls.
func (w *Watcher) notify() (<-chan fsnotify.Event, <-chan error, func()) {
	if w.cfg.DisableNotify {
		return nil, nil, func() {}
	}
	dirs := w.watched()
	n, err := fsnotify.NewWatcher()
	if err == nil {
		for _, d := range dirs {
			if err = n.Add(d); err != nil {
				n.Close()
				break
			}
		}
	}
	if err != nil {
		w.log.Warn(w.cfg.What+" not watched; polling only", "dirs", dirs, "every", w.cfg.Poll, "err", err)
		return nil, nil, func() {}
	}
	return n.Events, n.Errors, func() { n.Close() }
}

// relevant tells whether an event may change what is loaded: a change of
// a watched file, of a name directly in a watched directory, or of a name
// starting with ".." beside a watched file. Load compares with what runs,
// so a false alarm costs one read.
func (w *Watcher) relevant(ev fsnotify.Event) bool {
	if !ev.Op.Has(fsnotify.Write) && !ev.Op.Has(fsnotify.Create) && !ev.Op.Has(fsnotify.Rename) && !ev.Op.Has(fsnotify.Remove) {
		return false
	}
	name := filepath.Clean(ev.Name)
	dir := filepath.Dir(name)
	for _, p := range w.cfg.Paths {
		p = filepath.Clean(p)
		switch {
		case w.dirs[p]:
			if dir == p || name == p {
				return true
			}
		case name == p:
			return true
		case dir == filepath.Dir(p) && strings.HasPrefix(filepath.Base(name), ".."):
			return true
		}
	}
	return false
}

// NewCounter returns ringlimit_reload_total, loads by what and result,
// for Config.Results (curried with "what") of the files that have no
// counter of their own; the caller registers it.
func NewCounter() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ringlimit_reload_total",
		Help: "Loads of a reloaded file, by what is reloaded and result (ok: something new installed; error: refused, what ran before stays).",
	}, []string{"what", "result"})
}
