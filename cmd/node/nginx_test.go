package main

// examples/nginx.conf with a real nginx in front of three in-process nodes:
// auth_request to /v1/authz, its 403 turned into the client's 429. Needs an
// nginx binary with the auth_request module (Debian's has it); without one
// the test skips, except under CI=true, where it fails (.ci/run installs
// nginx).

import (
	"bytes"
	"context"
	"fmt"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// nginxConf is examples/nginx.conf with the addresses of this test: its
// nodes, its application and a free port for nginx, and with the process
// settings a test needs (foreground, pid, logs and temporary files in dir).
// Each address the example names must be there exactly once: a test of a
// config other than the example's is no test of the example.
func nginxConf(t *testing.T, dir string, nodes []string, app string, port int) string {
	t.Helper()
	b, err := os.ReadFile("../../examples/nginx.conf")
	if err != nil {
		t.Fatal(err)
	}
	conf := string(b)
	replace := func(old, new string) {
		t.Helper()
		if n := strings.Count(conf, old); n != 1 {
			t.Fatalf("examples/nginx.conf: %q appears %d times, want once", old, n)
		}
		conf = strings.Replace(conf, old, new, 1)
	}
	for i, n := range nodes {
		replace(fmt.Sprintf("server 127.0.0.1:%d;", 8081+i), "server "+n+";")
	}
	replace("server 127.0.0.1:3000;", "server "+app+";")
	replace("listen 8000;", fmt.Sprintf("listen 127.0.0.1:%d;", port))
	replace("http {", "http {\n"+
		"    access_log "+filepath.Join(dir, "access.log")+";\n"+
		"    client_body_temp_path "+filepath.Join(dir, "body")+";\n"+
		"    proxy_temp_path "+filepath.Join(dir, "proxy")+";\n"+
		"    fastcgi_temp_path "+filepath.Join(dir, "fastcgi")+";\n"+
		"    uwsgi_temp_path "+filepath.Join(dir, "uwsgi")+";\n"+
		"    scgi_temp_path "+filepath.Join(dir, "scgi")+";\n")
	return "daemon off;\nmaster_process on;\nworker_processes 1;\n" +
		"pid " + filepath.Join(dir, "nginx.pid") + ";\n" +
		"error_log " + filepath.Join(dir, "error.log") + " warn;\n" + conf
}

// startNginx runs nginx on conf in the foreground and stops it (SIGQUIT,
// then SIGKILL after 10s) in t.Cleanup; it returns once nginx accepts
// connections on addr.
func startNginx(t *testing.T, bin, dir, conf, addr string) {
	t.Helper()
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cmd := exec.Command(bin, "-p", dir, "-c", path)
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // its workers in a group of its own
	if err := cmd.Start(); err != nil {
		t.Fatalf("start nginx: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGQUIT) // graceful: workers finish, master exits
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
			t.Errorf("nginx did not stop within 10s of SIGQUIT; killed")
		}
		// The master waits for its workers before it exits: nothing of its
		// process group may be left.
		if err := syscall.Kill(-cmd.Process.Pid, 0); err == nil {
			t.Errorf("a process of nginx's group %d still runs", cmd.Process.Pid)
		}
		if t.Failed() {
			logs, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			t.Logf("nginx output:\n%s\nerror.log:\n%s", out.String(), logs)
		}
	})
	testkit.WaitFor(t, 10*time.Second, "nginx accepting on "+addr, func() error {
		select {
		case err := <-exited:
			exited <- err
			logs, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			t.Fatalf("nginx exited: %v\n%s\n%s", err, out.String(), logs)
		default:
		}
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err == nil {
			c.Close()
		}
		return err
	})
}

// freePort is a port, free a moment ago on every address for TCP and UDP,
// for a process the test starts to bind. It is drawn from 20000-31999,
// below the kernel's ephemeral range: a port 0 listener's port comes from
// that range, and any outgoing connection of a test running beside this
// one can take it between the pick and the process's bind (a deploy test
// failed with "bind: address already in use" on one).
func freePort(t *testing.T) int {
	t.Helper()
	handedMu.Lock()
	defer handedMu.Unlock()
	for range 200 {
		p := 20000 + rand.IntN(12000)
		if handed[p] {
			continue
		}
		tl, err := net.Listen("tcp", ":"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		ul, err := net.ListenPacket("udp", ":"+strconv.Itoa(p))
		tl.Close()
		if err != nil {
			continue
		}
		ul.Close()
		handed[p] = true
		return p
	}
	t.Fatal("no free port in 20000-31999 after 200 tries")
	return 0
}

// handed are the ports freePort gave out in this process: none twice.
var (
	handedMu sync.Mutex
	handed   = map[int]bool{}
)

// Through nginx with examples/nginx.conf: per API key, per client address
// and per route, exactly the policy's numbers reach the application (200),
// and the rest get 429 with Retry-After and the rate-limit headers, the
// application never seeing them.
func TestNginxAuthRequest(t *testing.T) {
	bin := findBin("nginx")
	if bin == "" {
		skipOrFail(t, "nginx not found on PATH or in /usr/sbin")
	}
	h := newHarness(t)
	dir := t.TempDir()
	c := startPolicyCluster(h, dir, gatewayPolicy)
	var served atomic.Int64
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		fmt.Fprintf(w, "app: %s %s\n", r.Method, r.URL.RequestURI())
	}))
	t.Cleanup(app.Close)
	ngxDir := filepath.Join(dir, "nginx")
	if err := os.Mkdir(ngxDir, 0o755); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	startNginx(t, bin, ngxDir, nginxConf(t, ngxDir, c.addrs, app.Listener.Addr().String(), port), addr)

	type tally struct {
		ok, limited int
		remaining   []string // X-RateLimit-Remaining of each 200
		retryAfter  []string // Retry-After of each 429
		start, end  time.Time
	}
	send := func(n int, method, uri string, header ...string) tally {
		t.Helper()
		got := tally{start: time.Now()}
		for range n {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			req, err := http.NewRequestWithContext(ctx, method, "http://"+addr+uri, strings.NewReader("a body nginx does not pass to ringlimit"))
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i+1 < len(header); i += 2 {
				req.Header.Set(header[i], header[i+1])
			}
			resp, err := h.client.Do(req)
			if err != nil {
				cancel()
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			switch resp.StatusCode {
			case http.StatusOK:
				got.ok++
				got.remaining = append(got.remaining, resp.Header.Get("X-RateLimit-Remaining"))
				if !strings.HasPrefix(string(body), "app: "+method+" "+uri) || resp.Header.Get("Retry-After") != "" {
					t.Errorf("%s %s: 200, Retry-After %q, body %q", method, uri, resp.Header.Get("Retry-After"), body)
				}
			case http.StatusTooManyRequests:
				got.limited++
				got.retryAfter = append(got.retryAfter, resp.Header.Get("Retry-After"))
				if resp.Header.Get("X-RateLimit-Remaining") != "0" || resp.Header.Get("RateLimit-Policy") == "" ||
					!strings.HasPrefix(resp.Header.Get("RateLimit"), `"`) || !strings.Contains(string(body), "RATE_LIMITED") {
					t.Errorf("%s %s: 429 with headers %v, body %q", method, uri, resp.Header, body)
				}
			default:
				t.Fatalf("%s %s: %d %v %s", method, uri, resp.StatusCode, resp.Header, body)
			}
		}
		got.end = time.Now()
		return got
	}
	// check compares a tally with what the limit allows. A refusal's
	// Retry-After is the time to the next token, whole seconds rounded up:
	// token seconds (3600 / the hourly limit) less the time since the
	// bucket was emptied, which lies between since (before the first
	// spend) and the tally's end.
	check := func(what string, got tally, ok, limited int, remaining []string, token int, since time.Time) {
		t.Helper()
		if got.ok != ok || got.limited != limited || !slices.Equal(got.remaining, remaining) {
			t.Errorf("%s: %d × 200 (remaining %v), %d × 429; want %d (%v), %d", what, got.ok, got.remaining, got.limited, ok, remaining, limited)
		}
		lo := token - int(math.Ceil(got.end.Sub(since).Seconds()))
		for _, ra := range got.retryAfter {
			if n, err := strconv.Atoi(ra); err != nil || n < lo || n > token {
				t.Errorf("%s: Retry-After %q, want %d to %d (%v since the first spend)", what, ra, lo, token, got.end.Sub(since).Round(time.Millisecond))
			}
		}
	}
	// One API key, 12 requests: the free tier's 5 reach the application;
	// 7 are refused, a token being 3600s/5 = 720s away.
	keyA := send(12, "POST", "/orders?id=7", "X-API-Key", "key-A")
	check("key-A", keyA, 5, 7, []string{"4", "3", "2", "1", "0"}, 720, keyA.start)
	// No key: the anonymous tier (3 an hour), by the client's address,
	// which nginx sends as X-Real-IP and X-Forwarded-For.
	anon := send(5, "GET", "/")
	check("anonymous", anon, 3, 2, []string{"2", "1", "0"}, 1200, anon.start)
	// /login: 2 an hour by address and route, whatever the key; the
	// query string and a percent-encoded path do not escape it.
	login := send(2, "POST", "/login?next=%2F", "X-API-Key", "key-B")
	check("login", login, 2, 0, []string{"1", "0"}, 1800, login.start)
	check("login, encoded", send(2, "POST", "/log%69n", "X-API-Key", "key-C"), 0, 2, nil, 1800, login.start)
	if got := served.Load(); got != 5+3+2 {
		t.Errorf("the application served %d requests, want %d: only admitted ones reach it", got, 5+3+2)
	}
}
