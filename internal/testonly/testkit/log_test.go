package testkit

import (
	"log/slog"
	"slices"
	"testing"
)

func TestLogSink(t *testing.T) {
	s := &LogSink{}
	log := slog.New(slog.NewJSONHandler(s, nil))
	log.Info("a", "n", 1)
	log.Warn("b")
	log.Info("a", "n", 2)
	s.Write([]byte(`{"msg":"c"`)) // no newline yet: not a line
	if got := s.Records("a"); len(got) != 2 || got[0]["n"] != 1.0 || got[1]["n"] != 2.0 {
		t.Fatalf("Records(a) = %v, want n=1 then n=2", got)
	}
	if got := len(s.Records("c")); got != 0 {
		t.Fatalf("a partial line was kept: %d records", got)
	}
	s.Write([]byte("}\nnot json\n"))
	if got := len(s.Records("c")); got != 1 {
		t.Fatalf("Records(c) = %d, want 1 once its line ended", got)
	}
	tail := s.Tail(2)
	if !slices.Equal(tail, []string{`{"msg":"c"}`, "not json"}) {
		t.Fatalf("Tail(2) = %q", tail)
	}
	if got := len(s.Tail(100)); got != 5 {
		t.Fatalf("Tail(100) has %d lines, want all 5", got)
	}

}
