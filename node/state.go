package node

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringlimit/ringlimit/clock"
	"github.com/ringlimit/ringlimit/forward"
	"github.com/ringlimit/ringlimit/internal/statefile"
	"github.com/ringlimit/ringlimit/peer"
)

// Durable state (Config.DataDir): the node writes what it holds to its
// state file every Config.SnapshotInterval and when it stops, and puts it
// back when it starts, before it joins. A file that cannot be used (cut
// short, changed, of another version, node or cluster) is refused with a
// log line, set aside as ringlimit.state.refused, and the node starts
// empty.

// stateSaver writes the node's state file.
type stateSaver struct {
	dir, node, cluster string
	router             *forward.Router
	clock              clock.Clock
	log                *slog.Logger
	written            *prometheus.CounterVec
	seconds, bytes     prometheus.Gauge
	keys               prometheus.Gauge

	mu      sync.Mutex    // one write at a time: the loop's and the last one at shutdown
	failing bool          // the last write failed (logged once a streak)
	took    time.Duration // the last write's duration

	stop context.CancelFunc // ends run; the node's Close does too
}

func newStateSaver(cfg *Config, router *forward.Router, log *slog.Logger, reg prometheus.Registerer) (*stateSaver, error) {
	s := &stateSaver{dir: cfg.DataDir, node: cfg.Name, cluster: cfg.ClusterName, router: router, clock: cfg.Clock, log: log,
		written: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ringlimit_state_writes_total",
			Help: "State files written to --data-dir, by result (ok, error)."}, []string{"result"}),
		seconds: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ringlimit_state_write_seconds",
			Help: "How long the last state file took to read from the store, encode and write."}),
		bytes: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ringlimit_state_bytes", Help: "The last state file's size in bytes."}),
		keys: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ringlimit_state_keys",
			Help: "States (keys, lease sets and replicas) in the last state file."}),
	}
	for _, c := range []prometheus.Collector{s.written, s.seconds, s.bytes, s.keys} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	s.written.WithLabelValues("ok")
	s.written.WithLabelValues("error")
	return s, nil
}

// startState checks cfg.DataDir and puts its state file back into router
// (before the node joins: its keys are back when it owns them).
func startState(cfg *Config, router *forward.Router, log *slog.Logger, reg prometheus.Registerer) (*stateSaver, error) {
	if fi, err := os.Stat(cfg.DataDir); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("--data-dir: %q is not a directory (create it; the node writes its state file there)", cfg.DataDir)
	}
	s, err := newStateSaver(cfg, router, log, reg)
	if err != nil {
		return nil, err
	}
	s.restore()
	return s, nil
}

// loop runs the write loop in wg until ctx ends or stop is called; on a
// nil saver (no DataDir), nothing.
func (s *stateSaver) loop(ctx context.Context, wg *sync.WaitGroup, every time.Duration) {
	if s == nil {
		return
	}
	ctx, s.stop = context.WithCancel(ctx)
	wg.Go(func() { s.run(ctx, every) })
}

// encodeSaved is the state file's payload: the number of sections, then
// each (its length, then peer.EncodeStates of it): the keys first (from
// ""), tombstones among them (a state with nothing spent and ResetAt
// set), then the replicas of each member (from the member).
func encodeSaved(s *forward.Saved) []byte {
	b := binary.AppendUvarint(nil, uint64(1+len(s.Replicas)))
	section := func(from string, states []peer.State) {
		enc := peer.EncodeStates(nil, from, states)
		b = binary.AppendUvarint(b, uint64(len(enc)))
		b = append(b, enc...)
	}
	section("", s.Own)
	for member, states := range s.Replicas {
		section(member, states)
	}
	return b
}

// decodeSaved reads encodeSaved's payload; dropped counts the states left
// out as invalid.
func decodeSaved(b []byte, at clock.Instant) (s forward.Saved, dropped int, err error) {
	s = forward.Saved{At: at, Replicas: map[string][]peer.State{}}
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)) {
		return s, 0, errors.New("bad section count")
	}
	b = b[k:]
	for i := range n {
		l, k := binary.Uvarint(b)
		if k <= 0 || l > uint64(len(b)-k) {
			return s, dropped, fmt.Errorf("section %d: bad length", i)
		}
		from, states, bad, err := peer.DecodeStates(b[k : k+int(l)])
		if err != nil {
			return s, dropped, fmt.Errorf("section %d: %w", i, err)
		}
		dropped += bad
		if i == 0 {
			s.Own = states
		} else {
			s.Replicas[from] = states
		}
		b = b[k+int(l):]
	}
	return s, dropped, nil
}

// restore puts back the state file, if there is one the node can use.
func (s *stateSaver) restore() {
	h, payload, err := statefile.Read(s.dir, s.node, s.cluster)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		s.log.Info("no state file: starting empty", "data_dir", s.dir)
		return
	case err != nil:
		s.refuse(err)
		return
	}
	saved, dropped, err := decodeSaved(payload, clock.Instant(h.At))
	if err != nil {
		s.refuse(fmt.Errorf("%w: %w", statefile.ErrCorrupt, err))
		return
	}
	keys, leaseSets, replicas, tombstones := s.router.Restore(saved)
	s.log.Info("state restored", "data_dir", s.dir, "written", time.Unix(0, h.At).UTC().Format(time.RFC3339Nano),
		"age", s.clock.Now().Sub(clock.Instant(h.At)).Round(time.Millisecond).String(), "keys", keys, "lease_sets", leaseSets,
		"replicas", replicas, "tombstones", tombstones, "invalid", dropped)
}

// refuse logs why the state file cannot be used and sets it aside.
func (s *stateSaver) refuse(err error) {
	path := filepath.Join(s.dir, statefile.Name)
	aside := path + ".refused"
	if rerr := os.Rename(path, aside); rerr != nil {
		aside = ""
	}
	s.log.Error("state file refused: starting empty", "file", path, "err", err, "set_aside", aside)
}

// write writes the state file now.
func (s *stateSaver) write() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	start := time.Now()
	saved := s.router.Export()
	n := len(saved.Own)
	for _, r := range saved.Replicas {
		n += len(r)
	}
	size, err := statefile.Write(s.dir, statefile.Header{Node: s.node, Cluster: s.cluster, At: int64(saved.At)}, encodeSaved(&saved))
	if err != nil {
		s.written.WithLabelValues("error").Inc()
		if !s.failing {
			s.log.Error("state file not written", "data_dir", s.dir, "err", err)
		}
		s.failing = true
		return err
	}
	if s.failing {
		s.log.Info("state file written again", "data_dir", s.dir)
	}
	s.failing = false
	s.took = time.Since(start)
	s.written.WithLabelValues("ok").Inc()
	s.seconds.Set(s.took.Seconds())
	s.bytes.Set(float64(size))
	s.keys.Set(float64(n))
	return nil
}

// spacing is how many times a write's own duration the loop waits, at
// least, before the next one: writing takes at most a fifth of the time
// (of one core) however many keys the node holds.
const spacing = 4

// run writes the state file every interval, or spacing times the last
// write's duration when that is longer, until ctx ends.
func (s *stateSaver) run(ctx context.Context, every time.Duration) {
	for {
		t := s.clock.NewTimer(max(every, spacing*s.lastWrite()))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
			s.write()
		}
	}
}

// lastWrite is how long the last write took.
func (s *stateSaver) lastWrite() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.took
}
