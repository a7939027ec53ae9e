package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/api"
	"github.com/ringlimit/ringlimit/clock"
	"github.com/ringlimit/ringlimit/internal/reload"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
)

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
	testkit.WaitFor(t, timeout, what, func() error {
		if ok, state := cond(); !ok {
			return errors.New(state)
		}
		return nil
	})
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
	sink := &testkit.LogSink{}
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
		return len(sink.Records("admin token file refused; the running tokens stay")) == 1, strings.Join(sink.Tail(5), "\n")
	})
	poll(t, time.Second, "bob's token kept", want("token-of-bob-00000001", "bob", true))
	os.Remove(path)
	// A missing file is another refusal, with an error of its own: logged
	// again, once.
	poll(t, 2*time.Second, "the missing file seen", func() (bool, string) {
		return len(sink.Records("admin token file refused; the running tokens stay")) == 2, strings.Join(sink.Tail(5), "\n")
	})
	poll(t, time.Second, "bob's token kept while the file is missing", want("token-of-bob-00000001", "bob", true))
	write("carol:token-of-carol-0001\n")
	poll(t, 2*time.Second, "carol's token", want("token-of-carol-0001", "carol", true))
}
