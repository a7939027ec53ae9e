package cluster

import (
	"context"
	"log"
	"log/slog"
	"strings"
)

// newMemberlistLogger returns the *log.Logger handed to memberlist. Each of
// memberlist's lines ("[WARN] memberlist: ...") becomes one slog record at
// the matching level, and lines reporting this member's own failed probes
// are passed to onSuspect (memberlist has no event for suspicion).
func newMemberlistLogger(l *slog.Logger, onSuspect func(name string)) *log.Logger {
	return log.New(&logWriter{log: l, onSuspect: onSuspect}, "", 0)
}

// logWriter receives one memberlist log line per Write (log.Logger
// serialises Writes and calls Write once per Printf). It is called from
// memberlist's goroutines, sometimes with memberlist's internal locks held,
// so it must not call back into memberlist.
type logWriter struct {
	log       *slog.Logger
	onSuspect func(name string)
}

func (w *logWriter) Write(p []byte) (int, error) {
	level, msg := parseMemberlistLine(string(p))
	if name, ok := suspectedName(msg); ok && w.onSuspect != nil {
		w.onSuspect(name)
	}
	if w.log.Enabled(context.Background(), level) {
		w.log.Log(context.Background(), level, msg, "component", "memberlist")
	}
	return len(p), nil
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
