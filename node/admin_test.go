package node

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/api"
	"github.com/ringlimit/ringlimit/clock"
	"github.com/ringlimit/ringlimit/internal/reload"
)

// logSink collects JSON log lines. Safe for concurrent use.
type logSink struct {
	mu      sync.Mutex
	partial []byte
	lines   []string
}

func (s *logSink) Write(p []byte) (int, error) {
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

// records returns the lines that decode as JSON objects with the given msg.
func (s *logSink) records(msg string) []map[string]any {
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

func (s *logSink) tail(n int) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.lines[max(len(s.lines)-n, 0):])
}

// writePolicy replaces the file at path with content, atomically.
func writePolicy(t *testing.T, path, content string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// poll waits until cond holds, failing the test with its state after
// timeout.
func poll(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %s", what, timeout, state)
		}
		<-tick.C
	}
}

// TestTokenFileWatch: a token file that stops parsing keeps the running
// tokens (and is logged); a good one replaces them.
func TestTokenFileWatch(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	write := func(s string) {
		t.Helper()
		writePolicy(t, path, s)
	}
	write("alice:token-of-alice-0001\n")
	sink := &logSink{}
	f := &tokenFile{path: path, tokens: &api.Tokens{}, log: slog.New(slog.NewJSONHandler(sink, nil))}
	if err := f.load(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	w, err := f.watcher(reload.Config{Clock: clock.System(), Logger: f.log, Poll: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	go func() { defer close(done); w.Run(ctx) }()
	defer func() { cancel(); <-done }()
	want := func(token, name string, ok bool) func() (bool, string) {
		return func() (bool, string) {
			got, gotOK := f.tokens.Authenticate(token)
			return got == name && gotOK == ok, fmt.Sprintf("Authenticate(%s) = %q, %v", token, got, gotOK)
		}
	}
	write("bob:token-of-bob-00000001\n")
	poll(t, 2*time.Second, "bob's token", want("token-of-bob-00000001", "bob", true))
	poll(t, time.Second, "alice's token gone", want("token-of-alice-0001", "", false))
	write("bob:short\n")
	poll(t, 2*time.Second, "the refusal logged", func() (bool, string) {
		return len(sink.records("admin token file refused; the running tokens stay")) == 1, strings.Join(sink.tail(5), "\n")
	})
	poll(t, time.Second, "bob's token kept", want("token-of-bob-00000001", "bob", true))
	os.Remove(path)
	// A missing file is another refusal, with an error of its own: logged
	// again, once.
	poll(t, 2*time.Second, "the missing file seen", func() (bool, string) {
		return len(sink.records("admin token file refused; the running tokens stay")) == 2, strings.Join(sink.tail(5), "\n")
	})
	poll(t, time.Second, "bob's token kept while the file is missing", want("token-of-bob-00000001", "bob", true))
	write("carol:token-of-carol-0001\n")
	poll(t, 2*time.Second, "carol's token", want("token-of-carol-0001", "carol", true))
}
