package main

// The commands that talk to a node run against a real cluster: TestMain
// builds cmd/node and starts three node processes on 127.0.0.1:0 (the
// addresses read from each "node started" log line), joined by gossip,
// running examples/policy.yaml with an admin token file; it waits until
// every node is ready and sees the three on its ring, and stops them all
// when the tests are done.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ringlimit/ringlimit/api"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
)

// testToken is the admin token of the test cluster, named "cli-test".
const testToken = "cli-test-token-0123456789"

// cluster is the test cluster, started by TestMain.
var cluster struct {
	dir       string // binaries, token file
	nodes     []*nodeProc
	tokenFile string
	cliBin    string // the built ringlimit binary
}

// nodeProc is a node running as a child process.
type nodeProc struct {
	name                     string
	cmd                      *exec.Cmd
	out                      *lineBuffer
	exited                   chan struct{}
	http, grpc, peer, gossip string
}

func TestMain(m *testing.M) {
	code, err := runTests(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "cmd/ringlimit tests:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// runTests starts the cluster, runs the tests and stops every process it
// started, whatever happened; then it checks that no goroutine is left.
func runTests(m *testing.M) (int, error) {
	dir, err := os.MkdirTemp("", "ringlimit-cli-test-")
	if err != nil {
		return 1, err
	}
	defer os.RemoveAll(dir)
	defer testkit.RemoveBuilds()
	cluster.dir = dir
	flag.Parse()
	if testing.Short() { // the offline tests only
		return m.Run(), nil
	}
	code := 1
	err = startCluster(dir)
	if err != nil {
		for _, p := range cluster.nodes {
			fmt.Fprintf(os.Stderr, "--- %s's log:\n%s\n", p.name, p.out.tail(30))
		}
	} else {
		code = m.Run()
	}
	if stopErr := stopCluster(); stopErr != nil {
		return 1, errors.Join(err, stopErr)
	}
	if err != nil {
		return 1, err
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			return 1, err
		}
	}
	return code, nil
}

func startCluster(dir string) error {
	nodeBin, err := testkit.BuildBinary("../node")
	if err != nil {
		return err
	}
	if cluster.cliBin, err = testkit.BuildBinary("."); err != nil {
		return err
	}
	cluster.tokenFile = filepath.Join(dir, "admin.tokens")
	if err := os.WriteFile(cluster.tokenFile, []byte("cli-test:"+testToken+"\n"), 0o600); err != nil {
		return err
	}
	policyFile, err := filepath.Abs("../../examples/policy.yaml")
	if err != nil {
		return err
	}
	var seed string
	for i := 1; i <= 3; i++ {
		p, err := startNode(nodeBin, fmt.Sprintf("node-%d", i), seed,
			"--policy", policyFile, "--admin-token-file", cluster.tokenFile)
		if err != nil {
			return err
		}
		if seed == "" {
			seed = p.gossip
		}
	}
	return waitConverged(20 * time.Second)
}

// startNode starts bin as node name on 127.0.0.1:0, joining seed unless
// empty, and waits up to 20 s for its "node started" line.
func startNode(bin, name, seed string, extra ...string) (*nodeProc, error) {
	args := []string{"--name", name, "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--peer", "127.0.0.1:0", "--gossip", "127.0.0.1:0"}
	if seed != "" {
		args = append(args, "--join", seed)
	}
	p := &nodeProc{name: name, cmd: exec.Command(bin, append(args, extra...)...), out: &lineBuffer{}, exited: make(chan struct{})}
	for _, kv := range os.Environ() { // only the flags configure the node
		if !strings.HasPrefix(kv, "RINGLIMIT_") {
			p.cmd.Env = append(p.cmd.Env, kv)
		}
	}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	cluster.nodes = append(cluster.nodes, p)
	go func() { p.cmd.Wait(); close(p.exited) }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if rec := p.out.record("node started"); rec != nil {
			p.http, _ = rec["http"].(string)
			p.grpc, _ = rec["grpc"].(string)
			p.peer, _ = rec["peer"].(string)
			p.gossip, _ = rec["gossip"].(string)
			if p.http == "" || p.gossip == "" {
				return nil, fmt.Errorf("%s started without addresses: %v", name, rec)
			}
			return p, nil
		}
		select {
		case <-p.exited:
			return nil, fmt.Errorf("%s exited before it started", name)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s did not start within 20s", name)
		}
	}
}

// waitConverged polls until every node answers /readyz 200 and its
// /v1/cluster shows the three nodes alive on its ring at one ring version.
func waitConverged(timeout time.Duration) error {
	var err error
	if testkit.Poll(timeout, func() bool { err = converged(); return err == nil }) {
		return nil
	}
	return fmt.Errorf("cluster not converged within %v: %v", timeout, err)
}

func converged() error {
	var version uint64
	for i, p := range cluster.nodes {
		if status, _, err := httpGet("http://" + p.http + "/readyz"); err != nil || status != http.StatusOK {
			return fmt.Errorf("%s /readyz: %d %v", p.name, status, err)
		}
		var st api.ClusterStatus
		if err := getJSON("http://"+p.http+"/v1/cluster", &st); err != nil {
			return err
		}
		alive := 0
		for _, m := range st.Members {
			if m.OnRing && m.State == "alive" {
				alive++
			}
		}
		if i == 0 {
			version = st.RingVersion
		}
		if alive != len(cluster.nodes) || len(st.Members) != len(cluster.nodes) || st.RingVersion != version {
			return fmt.Errorf("%s sees %d alive on its ring among %d members at version %d", p.name, alive, len(st.Members), st.RingVersion)
		}
	}
	return nil
}

// stopCluster stops the nodes one after the other, last started first:
// SIGTERM (a graceful leave), and SIGKILL for one still running after 10 s.
func stopCluster() error {
	var errs []error
	for i := len(cluster.nodes) - 1; i >= 0; i-- {
		p := cluster.nodes[i]
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
			continue
		case <-time.After(10 * time.Second):
		}
		errs = append(errs, fmt.Errorf("%s did not exit within 10s of SIGTERM", p.name))
		p.cmd.Process.Kill()
		select {
		case <-p.exited:
		case <-time.After(5 * time.Second):
			errs = append(errs, fmt.Errorf("%s (pid %d) still running 5s after SIGKILL", p.name, p.cmd.Process.Pid))
		}
	}
	return errors.Join(errs...)
}

// lineBuffer collects a process's output. Safe for concurrent use.
type lineBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lineBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.buf.Len() > 4<<20 {
		return len(p), nil // enough to diagnose
	}
	return b.buf.Write(p)
}

// record returns the first JSON log line whose msg is msg.
func (b *lineBuffer) record(msg string) map[string]any {
	b.mu.Lock()
	data := bytes.Clone(b.buf.Bytes())
	b.mu.Unlock()
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil && m["msg"] == msg {
			return m
		}
	}
	return nil
}

func (b *lineBuffer) tail(n int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	lines := strings.Split(b.buf.String(), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}

// needCluster skips a test that needs the cluster in -short mode.
func needCluster(t *testing.T) {
	if len(cluster.nodes) == 0 {
		t.Skip("-short: no cluster started")
	}
}

// httpGet GETs url with a 5 s deadline.
func httpGet(url string) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, err
	}
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}

func getJSON(url string, v any) error {
	status, body, err := httpGet(url)
	if err != nil {
		return err
	}
	if status != http.StatusOK {
		return fmt.Errorf("GET %s: %d %s", url, status, body)
	}
	return json.Unmarshal(body, v)
}

// result is what one run of the command printed and returned.
type result struct {
	code           int
	stdout, stderr string
}

// cli runs the command with args and environment env (nothing else of
// the process's environment).
func cli(t *testing.T, env map[string]string, args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(args, func(k string) string { return env[k] }, &stdout, &stderr)
	return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// at runs the command against node i (0-based) with --addr.
func at(t *testing.T, i int, args ...string) result {
	t.Helper()
	return cli(t, nil, append([]string{"--addr", cluster.nodes[i].http}, args...)...)
}

// want fails the test unless r has the exit status and outputs given.
func (r result) want(t *testing.T, code int, stdout, stderr string) {
	t.Helper()
	if r.code != code || r.stdout != stdout || r.stderr != stderr {
		t.Fatalf("exit %d, stdout:\n%s\nstderr:\n%s\nwant exit %d, stdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr, code, stdout, stderr)
	}
}
