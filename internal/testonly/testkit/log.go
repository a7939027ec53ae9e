package testkit

import (
	"encoding/json"
	"slices"
	"sync"
)

// LogSink collects the lines of a JSON log (slog.NewJSONHandler writing to
// it) so that a test can look for records by message. Safe for concurrent
// use.
type LogSink struct {
	mu      sync.Mutex
	partial []byte
	lines   []string
}

// Write takes log output; a line is kept once its newline arrives.
func (s *LogSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.partial = append(s.partial, p...)
	for {
		i := slices.Index(s.partial, '\n')
		if i < 0 {
			return len(p), nil
		}
		s.lines = append(s.lines, string(s.partial[:i]))
		s.partial = s.partial[i+1:]
	}
}

// Records returns the lines that decode as JSON objects whose msg is msg.
func (s *LogSink) Records(msg string) []map[string]any {
	s.mu.Lock()
	lines := slices.Clone(s.lines)
	s.mu.Unlock()
	var out []map[string]any
	for _, l := range lines {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// Lines returns every line written so far.
func (s *LogSink) Lines() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.lines)
}

// Tail returns the last n lines (fewer when fewer were written).
func (s *LogSink) Tail(n int) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.lines[max(len(s.lines)-n, 0):])
}
