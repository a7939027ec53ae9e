package cluster

import (
	"context"
	"log"
	"log/slog"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringlimit/ringlimit/clock"
)

// Memberlist logs every gossip packet or stream it refuses (a wrong label,
// a failed decryption, bytes that do not decode) at error level, one line
// each: anyone who reaches the gossip port could write thousands of lines a
// second. Its warning and error lines are therefore logged at most
// errorLogBurst at once and errorLogRate a second after that; the line
// logged after some were dropped says how many ("suppressed"). Every such
// line, logged or not, is counted by kind (ringlimit_gossip_errors_total).
// Debug and info lines (joins, leaves, suspicions) are not limited.
const (
	errorLogBurst = 10
	errorLogRate  = 5 // lines a second
)

// newMemberlistLogger returns the *log.Logger handed to memberlist, which
// writes to w.
func newMemberlistLogger(w *logWriter) *log.Logger {
	return log.New(w, "", 0)
}

// logWriter receives one memberlist log line per Write (log.Logger calls
// Write once per Printf). Each line becomes one slog record at the
// matching level, subject to the error-line limit above; lines reporting
// this member's own failed probes are passed to onSuspect (memberlist has
// no event for suspicion). It is called from memberlist's goroutines,
// sometimes with memberlist's internal locks held, so it must not call
// back into memberlist. Safe for concurrent use.
type logWriter struct {
	log       *slog.Logger
	onSuspect func(name string)
	clock     clock.Clock

	errors     *prometheus.CounterVec // warning and error lines by kind
	suppressed prometheus.Counter     // warning and error lines not logged

	mu      sync.Mutex // guards the limiter
	tokens  float64    // lines that may be logged now, up to errorLogBurst
	last    clock.Instant
	dropped int // lines dropped since the last one logged
}

func newLogWriter(l *slog.Logger, onSuspect func(name string), clk clock.Clock) *logWriter {
	w := &logWriter{log: l, onSuspect: onSuspect, clock: clk, tokens: errorLogBurst, last: clk.Now(),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ringlimit_gossip_errors_total",
			Help: "memberlist's warning and error lines, logged or not, by kind: label, decrypt, checksum and decode are gossip packets or streams refused (a stranger's or a misconfigured member's), stream a TCP exchange that failed, other the rest."},
			[]string{"kind"}),
		suppressed: prometheus.NewCounter(prometheus.CounterOpts{Name: "ringlimit_gossip_log_suppressed_total",
			Help: "memberlist's warning and error lines not logged: over 10 at once or 5 a second."}),
	}
	for _, k := range errorKinds {
		w.errors.WithLabelValues(k.kind)
	}
	w.errors.WithLabelValues("other")
	return w
}

// collectors are w's metrics, for a Registerer.
func (w *logWriter) collectors() []prometheus.Collector {
	return []prometheus.Collector{w.errors, w.suppressed}
}

func (w *logWriter) Write(p []byte) (int, error) {
	level, msg := parseMemberlistLine(string(p))
	if name, ok := suspectedName(msg); ok && w.onSuspect != nil {
		w.onSuspect(name)
	}
	ctx := context.Background()
	if level < slog.LevelWarn {
		if w.log.Enabled(ctx, level) {
			w.log.Log(ctx, level, msg, "component", "memberlist")
		}
		return len(p), nil
	}
	w.errors.WithLabelValues(errorKind(msg)).Inc()
	dropped, ok := w.allow()
	switch {
	case !ok:
		w.suppressed.Inc()
	case dropped > 0:
		w.log.Log(ctx, level, msg, "component", "memberlist", "suppressed", dropped)
	default:
		w.log.Log(ctx, level, msg, "component", "memberlist")
	}
	return len(p), nil
}

// allow takes a token for one warning or error line; when it may be
// logged it returns how many lines were dropped before it.
func (w *logWriter) allow() (dropped int, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.clock.Now()
	if elapsed := now.Sub(w.last); elapsed > 0 {
		w.tokens = min(errorLogBurst, w.tokens+elapsed.Seconds()*errorLogRate)
		w.last = now
	}
	if w.tokens < 1 {
		w.dropped++
		return 0, false
	}
	w.tokens--
	dropped, w.dropped = w.dropped, 0
	return dropped, true
}

// errorKinds classify memberlist v0.7.0's warning and error lines (net.go,
// net_transport.go) by a piece of their text, first match wins.
var errorKinds = []struct{ kind, text string }{
	{"label", "label"},                       // unacceptable or malformed label header, packet or stream
	{"decrypt", "ecrypt"},                    // "Decrypt packet failed", stream decryption
	{"checksum", "invalid checksum"},         // UDP packet whose CRC does not match
	{"decode", "ailed to decode"},            // a message that does not decode
	{"decode", "not supported"},              // unknown message type
	{"decode", "invalid msgType"},            // unknown stream message type
	{"decode", "missing message type"},       // empty packet
	{"decode", "packet too short"},           // empty UDP read
	{"decode", "decompress"},                 // compressed payload that does not inflate
	{"decode", "truncated messages"},         // compound message cut short
	{"stream", "ailed to receive"},           // TCP stream read failed
	{"stream", "ailed to read remote state"}, // push/pull read failed
	{"stream", "Too many pending push/pull"}, // push/pull refused under load
}

func errorKind(msg string) string {
	for _, k := range errorKinds {
		if strings.Contains(msg, k.text) {
			return k.kind
		}
	}
	return "other"
}

// parseMemberlistLine splits "[LEVEL] text\n" into a slog level and the text.
// A line without a known prefix is logged at info.
func parseMemberlistLine(line string) (slog.Level, string) {
	line = strings.TrimRight(line, "\r\n")
	prefixes := []struct {
		p string
		l slog.Level
	}{
		{"[DEBUG] ", slog.LevelDebug},
		{"[INFO] ", slog.LevelInfo},
		{"[WARN] ", slog.LevelWarn},
		{"[ERR] ", slog.LevelError},
		{"[ERROR] ", slog.LevelError},
	}
	for _, x := range prefixes {
		if rest, ok := strings.CutPrefix(line, x.p); ok {
			return x.l, rest
		}
	}
	return slog.LevelInfo, line
}

// suspectedName recognises the line memberlist v0.7.0 logs (state.go,
// probeNode) right before it marks a member suspect after this member's own
// probe of it failed: "memberlist: Suspect NAME has failed, no acks received".
// If a later memberlist rewords it, suspicion simply stops being reported
// (TestAbruptDeath notices).
func suspectedName(msg string) (string, bool) {
	rest, ok := strings.CutPrefix(msg, "memberlist: Suspect ")
	if !ok {
		return "", false
	}
	name, ok := strings.CutSuffix(rest, " has failed, no acks received")
	if !ok || name == "" {
		return "", false
	}
	return name, true
}
