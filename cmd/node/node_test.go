package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"log/slog"

	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
)

func TestParseConfig(t *testing.T) {
	env := map[string]string{
		"RINGLIMIT_NAME":             "from-env",
		"RINGLIMIT_HTTP":             "127.0.0.1:1111",
		"RINGLIMIT_MAX_KEYS":         "500",
		"RINGLIMIT_LOG_LEVEL":        "debug",
		"RINGLIMIT_GC_HEADROOM":      "0",
		"RINGLIMIT_ADMIN_TOKEN_FILE": "/etc/ringlimit/admin-tokens",
	}
	c, err := parseConfig([]string{"--http", "127.0.0.1:2222"}, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	// A flag on the command line wins over the environment, which wins over
	// the default.
	if c.Name != "from-env" || c.HTTPAddr != "127.0.0.1:2222" || c.GRPCAddr != "127.0.0.1:9090" ||
		c.MaxKeys != 500 || c.logLevel != slog.LevelDebug || c.gcHeadroomMiB != 0 || c.AdminTokenFile != "/etc/ringlimit/admin-tokens" {
		t.Fatalf("config = %+v", c)
	}
	for _, bad := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--max-keys", "0"}, nil, "--max-keys"},
		{[]string{"--log-level", "loud"}, nil, "--log-level"},
		{[]string{"--gc-headroom", "-1"}, nil, "--gc-headroom"},
		{[]string{"--replication-max-loss", "-1"}, nil, "--replication-max-loss"},
		{[]string{"--name", ""}, nil, "--name"},
		{[]string{"extra"}, nil, "unexpected arguments"},
		{nil, map[string]string{"RINGLIMIT_MAX_KEYS": "many"}, "RINGLIMIT_MAX_KEYS"},
	} {
		_, err := parseConfig(bad.args, func(k string) string { return bad.env[k] }, io.Discard)
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("parseConfig(%q, %v) = %v, want an error naming %s", bad.args, bad.env, err, bad.want)
		}
	}
}

// startedLine is the "node started" log line, which carries the bound
// addresses when the node listens on port 0.
type startedLine struct {
	Msg  string `json:"msg"`
	HTTP string `json:"http"`
	GRPC string `json:"grpc"`
}

// waitStarted reads JSON log lines from r until the node reports its
// addresses, and keeps draining r afterwards.
func waitStarted(t *testing.T, r io.Reader) startedLine {
	t.Helper()
	lines := make(chan startedLine, 1)
	go func() {
		sc := bufio.NewScanner(r)
		found := false
		for sc.Scan() {
			var l startedLine
			if !found && json.Unmarshal(sc.Bytes(), &l) == nil && l.Msg == "node started" {
				found = true
				lines <- l
			}
		}
		close(lines)
	}()
	select {
	case l, ok := <-lines:
		if !ok {
			t.Fatal("node exited before it started")
		}
		return l
	case <-time.After(20 * time.Second):
		t.Fatal("node did not start within 20s")
	}
	return startedLine{}
}

func postCheck(t *testing.T, addr, body string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Post("http://"+addr+"/v1/check", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, m
}

func TestRunServesAndStopsOnCancel(t *testing.T) {
	var tunedFor atomic.Uint64
	var tuneStopped atomic.Bool
	tune := func(headroom uint64) func() {
		tunedFor.Store(headroom)
		return func() { tuneStopped.Store(true) }
	}
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--name", "n1", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--peer", "127.0.0.1:0", "--gossip", "127.0.0.1:0", "--gc-headroom", "16"},
			func(string) string { return "" }, pw, tune)
		pw.Close()
	}()
	addr := waitStarted(t, pr)
	body := `{"key":"k","limit":{"limit":1,"per":"1h"}}`
	if code, m := postCheck(t, addr.HTTP, body); code != 200 || m["owner"] != "n1" {
		t.Fatalf("first check: %d %v", code, m)
	}
	if code, m := postCheck(t, addr.HTTP, body); code != 429 || m["code"] != "RATE_LIMITED" {
		t.Fatalf("second check: %d %v", code, m)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run returned %v after cancel", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return within 10s of cancel")
	}
	if _, err := http.Get("http://" + addr.HTTP + "/healthz"); err == nil {
		t.Fatal("still serving after shutdown")
	}
	if got := tunedFor.Load(); got != 16<<20 || !tuneStopped.Load() {
		t.Fatalf("GC tuned for %d bytes, stopped %v; want %d bytes, stopped", got, tuneStopped.Load(), 16<<20)
	}
}

func TestRunRefusesTakenAddress(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--name", "a", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--peer", "127.0.0.1:0", "--gossip", "127.0.0.1:0"}, func(string) string { return "" }, pw, nil)
		pw.Close()
	}()
	addr := waitStarted(t, pr)
	err := run(ctx, []string{"--name", "b", "--http", addr.HTTP, "--grpc", "127.0.0.1:0", "--peer", "127.0.0.1:0", "--gossip", "127.0.0.1:0"}, func(string) string { return "" }, io.Discard, nil)
	if err == nil || !strings.Contains(err.Error(), "--http") {
		t.Fatalf("second node on a taken address: %v, want an error naming --http", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestBinarySIGTERM builds cmd/node, runs it as a process, checks it over
// HTTP, sends SIGTERM and expects exit status 0.
func TestBinarySIGTERM(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary")
	}
	bin := testkit.Build(t, ".")
	cmd := exec.Command(bin, "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--peer", "127.0.0.1:0", "--gossip", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "RINGLIMIT_NAME=proc-node")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	t.Cleanup(func() {
		cmd.Process.Kill()
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
		}
	})
	addr := waitStarted(t, stderr)
	go func() { exited <- cmd.Wait() }()
	for i, want := range []int{200, 200, 200, 429} {
		code, m := postCheck(t, addr.HTTP, `{"key":"user:42","cost":1,"limit":{"limit":3,"per":"1m"}}`)
		if code != want || m["owner"] != "proc-node" || m["remaining"] != float64(max(2-i, 0)) {
			t.Fatalf("check %d: %d %v, want %d from proc-node", i, code, m, want)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v, want status 0", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("no exit within 15s of SIGTERM")
	}
	if code := cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatal(fmt.Sprintf("exit code %d", code))
	}
}
