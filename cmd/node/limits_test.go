package main

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ringlimit/ringlimit/node"
)

// startLimited starts an in-process node with short HTTP timeouts and
// closes it when the test ends.
func startLimited(t *testing.T, extra ...string) *node.Node {
	t.Helper()
	args := append([]string{"--name", "n1", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--peer", "127.0.0.1:0", "--gossip", "127.0.0.1:0"}, extra...)
	cfg, err := parseConfig(args, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	n, err := startNode(t.Context(), cfg, newJSONLogger(io.Discard, cfg.logLevel))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if err := n.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return n
}

// 200 clients that send a request's headers and then trickle its body a
// byte at a time are each disconnected by the server within the read
// timeout (plus slack), and none holds the node past it.
func TestSlowBodiesDisconnected(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	const (
		conns   = 200
		read    = 500 * time.Millisecond
		slack   = 1500 * time.Millisecond // -race, 200 connections on a busy machine
		trickle = 20 * time.Millisecond
		giveUp  = 10 * time.Second // bounds each client's loop
	)
	n := startLimited(t, "--http-read-timeout", read.String(), "--http-write-timeout", "1s", "--check-timeout", "300ms")
	addr := httpAddr(n)
	head := "POST /v1/check HTTP/1.1\r\nHost: ringlimit\r\nContent-Type: application/json\r\nContent-Length: 4096\r\n\r\n"
	var (
		mu     sync.Mutex
		closed []time.Duration
		errs   []error
		wg     sync.WaitGroup
	)
	for range conns {
		wg.Go(func() {
			took, err := trickleBody(addr, head, trickle, giveUp)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			closed = append(closed, took)
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d of %d clients: first error %v", len(errs), conns, errs[0])
	}
	var longest time.Duration
	for _, d := range closed {
		longest = max(longest, d)
	}
	t.Logf("%d connections closed by the server; the longest lasted %v (read timeout %v)", len(closed), longest, read)
	if len(closed) != conns {
		t.Fatalf("%d connections closed, want %d", len(closed), conns)
	}
	if longest > read+slack {
		t.Fatalf("a connection lasted %v, want at most the read timeout %v + %v", longest, read, slack)
	}
}

// trickleBody dials addr, writes head, then writes one body byte every
// interval until the server closes the connection; it returns how long the
// connection lasted. It fails if the server has not closed it by giveUp.
func trickleBody(addr, head string, interval, giveUp time.Duration) (time.Duration, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	start := time.Now()
	if _, err := io.WriteString(c, head); err != nil {
		return 0, err
	}
	done := make(chan time.Duration, 1)
	go func() { // the server's answer, if any, then its close
		_, _ = io.Copy(io.Discard, c)
		done <- time.Since(start)
	}()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	deadline := time.After(giveUp)
	for {
		select {
		case took := <-done:
			return took, nil
		case <-deadline:
			c.Close()
			<-done
			return 0, errors.New("connection still open after " + giveUp.String())
		case <-tick.C:
			_, _ = c.Write([]byte{'{'}) // fails once the server has closed: the reader says when
		}
	}
}

// The new flags are read from the command line and the environment, and
// out-of-range values are refused.
func TestTimeoutFlags(t *testing.T) {
	env := map[string]string{"RINGLIMIT_HTTP_IDLE_TIMEOUT": "90s", "RINGLIMIT_CHECK_TIMEOUT": "1s"}
	cfg, err := parseConfig([]string{"--http-read-timeout", "3s"}, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.HTTPReadTimeout != 3*time.Second || cfg.HTTPWriteTimeout != 10*time.Second || cfg.HTTPIdleTimeout != 90*time.Second || cfg.CheckTimeout != time.Second {
		t.Fatalf("read %v write %v idle %v check %v, want 3s 10s 1m30s 1s", cfg.HTTPReadTimeout, cfg.HTTPWriteTimeout, cfg.HTTPIdleTimeout, cfg.CheckTimeout)
	}
	for _, args := range [][]string{
		{"--http-read-timeout", "0s"},
		{"--http-write-timeout", "-1s"},
		{"--check-timeout", "0s"},
		{"--check-timeout", "10s"}, // not under the write timeout
	} {
		if _, err := parseConfig(args, func(string) string { return "" }, io.Discard); err == nil || !strings.Contains(err.Error(), strings.TrimPrefix(args[0], "--")) {
			t.Errorf("parseConfig(%q) = %v, want an error naming the flag", args, err)
		}
	}
}
