package cluster

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
)

// TestMemberlistErrorLinesLimited: a flood of refused packets logs at most
// errorLogBurst lines at once and errorLogRate a second, counts every line
// by kind, and says how many it dropped; info lines are never dropped.
func TestMemberlistErrorLinesLimited(t *testing.T) {
	clk := testkit.NewClock(1)
	h := &recordLog{}
	w := newLogWriter(slog.New(h), nil, clk)
	reg := prometheus.NewRegistry()
	reg.MustRegister(w.collectors()...)
	l := newMemberlistLogger(w)

	const label = "[ERR] memberlist: discarding packet with unacceptable label \"\": from=127.0.0.1:9"
	type step struct {
		advance     time.Duration
		errs, infos int     // lines written
		logged      int     // lines logged in total after the step
		counted     float64 // ringlimit_gossip_errors_total{kind="label"}
		suppressed  float64
	}
	steps := []step{
		{errs: 100, infos: 3, logged: 13, counted: 100, suppressed: 90},
		{advance: 999 * time.Millisecond, errs: 5, logged: 17, counted: 105, suppressed: 91},
		{advance: time.Second, errs: 20, logged: 22, counted: 125, suppressed: 106},
		{advance: time.Hour, errs: 1, infos: 1000, logged: 1023, counted: 126, suppressed: 106},
	}
	for i, s := range steps {
		clk.Advance(s.advance)
		for range s.infos {
			l.Printf("[INFO] memberlist: Marking node-2 as failed")
		}
		for range s.errs {
			l.Printf(label)
		}
		if got := len(h.records); got != s.logged {
			t.Fatalf("step %d: %d lines logged, want %d", i, got, s.logged)
		}
		if got := testkit.Metric(t, reg, "ringlimit_gossip_errors_total", "kind", "label"); got != s.counted {
			t.Errorf("step %d: label errors counted = %v, want %v", i, got, s.counted)
		}
		if got := testkit.Metric(t, reg, "ringlimit_gossip_log_suppressed_total"); got != s.suppressed {
			t.Errorf("step %d: suppressed = %v, want %v", i, got, s.suppressed)
		}
	}
	// The first error line logged after drops says how many went before it.
	want := map[int]int64{13: 90, 17: 1, 1022: 15}
	if len(h.suppressed) != len(want) {
		t.Errorf("lines carrying suppressed: %v, want %v", h.suppressed, want)
	}
	for i, n := range want {
		if h.suppressed[i] != n {
			t.Errorf("line %d: suppressed = %d, want %d", i, h.suppressed[i], n)
		}
	}
}

// recordLog keeps the messages logged and, by line index, the value of
// the lines' "suppressed" attribute. Not safe for concurrent use.
type recordLog struct {
	records    []string
	suppressed map[int]int64
}

func (l *recordLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *recordLog) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *recordLog) WithGroup(string) slog.Handler            { return l }
func (l *recordLog) Handle(_ context.Context, r slog.Record) error {
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "suppressed" {
			if l.suppressed == nil {
				l.suppressed = map[int]int64{}
			}
			l.suppressed[len(l.records)] = a.Value.Int64()
		}
		return true
	})
	l.records = append(l.records, r.Message)
	return nil
}

func TestErrorKinds(t *testing.T) {
	for _, tt := range []struct{ msg, kind string }{
		{`memberlist: discarding packet with unacceptable label "": from=1.2.3.4:5`, "label"},
		{"memberlist: failed to receive and remove the stream label header: EOF from=1.2.3.4:5", "label"},
		{"memberlist: Decrypt packet failed: no installed keys could decrypt the message from=1.2.3.4:5", "decrypt"},
		{"memberlist: Got invalid checksum for UDP packet: 1, 2", "checksum"},
		{"memberlist: msg type (255) not supported from=1.2.3.4:5", "decode"},
		{"memberlist: Failed to decode ping request: EOF from=1.2.3.4:5", "decode"},
		{"memberlist: UDP packet too short (0 bytes) from=1.2.3.4:5", "decode"},
		{"memberlist: failed to receive: EOF from=1.2.3.4:5", "stream"},
		{"memberlist: Failed fallback TCP ping: timeout", "other"},
	} {
		if got := errorKind(tt.msg); got != tt.kind {
			t.Errorf("errorKind(%q) = %q, want %q", tt.msg, got, tt.kind)
		}
	}
}
