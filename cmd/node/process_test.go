package main

// Multi-node tests with the real binary: every node is a child process
// listening on 127.0.0.1:0, whose addresses are read from its "node
// started" log line. Only a process can crash for real (SIGKILL): an
// in-process node has no way to stop without leaving the cluster.

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/api"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
)

// TestProcesses builds cmd/node once and runs the multi-process scenarios
// on it.
func TestProcesses(t *testing.T) {
	bin := buildNode(t)
	t.Run("CrashOfOwner", func(t *testing.T) { testCrashOfOwner(t, bin) })
	t.Run("DeadSeed", func(t *testing.T) { testDeadSeed(t, bin) })
}

// proc is a node running as a child process.
type proc struct {
	name   string
	cmd    *exec.Cmd
	logs   *testkit.LogSink
	exited chan struct{}
	err    error // cmd.Wait's result, set before exited is closed
	http   string
	grpc   string
	peer   string
	gossip string
}

// launch starts cmd as the node name, configured by its flags alone (no
// RINGLIMIT_ variable of the test's environment reaches it), waits for its
// "node started" line and reads its addresses from it. run kills it in
// t.Cleanup.
func launch(t *testing.T, name string, cmd *exec.Cmd) *proc {
	t.Helper()
	p := &proc{name: name, cmd: cmd, logs: &testkit.LogSink{}, exited: make(chan struct{})}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "RINGLIMIT_") {
			p.cmd.Env = append(p.cmd.Env, kv)
		}
	}
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	p.run(t, name)
	testkit.WaitFor(t, 20*time.Second, name+"'s \"node started\" line", func() error {
		select {
		case <-p.exited:
			t.Fatalf("%s exited before it started: %v\n%s", name, p.err, strings.Join(p.logs.Tail(20), "\n"))
		default:
		}
		recs := p.logs.Records("node started")
		if len(recs) == 0 {
			return errors.New("not yet")
		}
		p.http, _ = recs[0]["http"].(string)
		p.grpc, _ = recs[0]["grpc"].(string)
		p.peer, _ = recs[0]["peer"].(string)
		p.gossip, _ = recs[0]["gossip"].(string)
		if p.http == "" || p.grpc == "" || p.peer == "" || p.gossip == "" {
			t.Fatalf("%s: node started without addresses: %v", name, recs[0])
		}
		return nil
	})
	return p
}

// soloArgs are the flags of a node named name on 127.0.0.1:0.
func soloArgs(name string) []string {
	return []string{"--name", name, "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--peer", "127.0.0.1:0", "--gossip", "127.0.0.1:0"}
}

// startSolo starts bin as a node of its own on 127.0.0.1:0 with extra
// flags, waits for its "node started" line, and kills it in t.Cleanup.
func startSolo(t *testing.T, bin, name string, extra ...string) *proc {
	t.Helper()
	return launch(t, name, exec.Command(bin, append(soloArgs(name), extra...)...))
}

// startProc starts bin as node name on 127.0.0.1:0 joining join, waits for
// its "node started" line, and kills it in t.Cleanup if it is still running.
func startProc(t *testing.T, bin, name string, join ...string) *proc {
	t.Helper()
	args := []string{"--name", name, "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--peer", "127.0.0.1:0", "--gossip", "127.0.0.1:0"}
	if len(join) > 0 {
		args = append(args, "--join", strings.Join(join, ","))
	}
	p := &proc{name: name, cmd: exec.Command(bin, args...), logs: &testkit.LogSink{}, exited: make(chan struct{})}
	for _, kv := range os.Environ() { // only the flags configure the node
		if !strings.HasPrefix(kv, "RINGLIMIT_") {
			p.cmd.Env = append(p.cmd.Env, kv)
		}
	}
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	p.run(t, name)
	deadline := time.Now().Add(20 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if recs := p.logs.Records("node started"); len(recs) > 0 {
			p.http, _ = recs[0]["http"].(string)
			p.grpc, _ = recs[0]["grpc"].(string)
			p.peer, _ = recs[0]["peer"].(string)
			p.gossip, _ = recs[0]["gossip"].(string)
			if p.http == "" || p.grpc == "" || p.peer == "" || p.gossip == "" {
				t.Fatalf("%s: node started without addresses: %v", name, recs[0])
			}
			return p
		}
		select {
		case <-p.exited:
			t.Fatalf("%s exited before it started: %v\n%s", name, p.err, strings.Join(p.logs.Tail(20), "\n"))
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not start within 20s", name)
		}
	}
}

// exitWait bounds the wait for a process killed with SIGKILL to be reaped:
// generous, because on a machine whose cores are busy with other work
// (scripts/test.sh --busy) reaping a killed node once took more than 10s.
const exitWait = 60 * time.Second

// kill sends p SIGKILL and waits up to exitWait for it to exit.
func (p *proc) kill() error {
	if err := p.cmd.Process.Kill(); err != nil {
		return err
	}
	select {
	case <-p.exited:
		return nil
	case <-time.After(exitWait):
		return fmt.Errorf("%s (pid %d) still running %v after SIGKILL", p.name, p.cmd.Process.Pid, exitWait)
	}
}

// stop sends sig and waits up to timeout for the process to exit,
// returning cmd.Wait's error.
// run starts p's command and makes the test's end reap it: killed if it
// still runs, its last log lines shown if the test failed.
func (p *proc) run(t *testing.T, name string) {
	t.Helper()
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			p.cmd.Process.Kill()
		}
		select {
		case <-p.exited:
		case <-time.After(exitWait):
			t.Errorf("%s (pid %d) still running %v after SIGKILL", name, p.cmd.Process.Pid, exitWait)
		}
		if t.Failed() {
			t.Logf("last log lines of %s (pid %d):\n%s", name, p.cmd.Process.Pid, strings.Join(p.logs.Tail(40), "\n"))
		}
	})
}

func (p *proc) stop(t *testing.T, sig os.Signal, timeout time.Duration) error {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %s: %v", p.name, err)
	}
	select {
	case <-p.exited:
		return p.err
	case <-time.After(timeout):
		t.Fatalf("%s did not exit within %v of %v", p.name, timeout, sig)
		return nil
	}
}

// onRing returns the state of every member p's /v1/cluster shows on its
// ring ("alive" or "suspect"), and its ring version.
func (h *harness) onRing(p *proc) (map[string]string, uint64, error) {
	var st api.ClusterStatus
	if err := getJSON(h.client, "http://"+p.http+"/v1/cluster", &st); err != nil {
		return nil, 0, err
	}
	if st.Self != p.name {
		return nil, 0, fmt.Errorf("%s: /v1/cluster self = %q", p.name, st.Self)
	}
	on := map[string]string{}
	for _, m := range st.Members {
		if m.OnRing {
			on[m.Name] = m.State
		}
	}
	return on, st.RingVersion, nil
}

// waitMembers polls GET /v1/cluster on every proc until each shows exactly
// names alive and on its ring, at one ring version; it returns how long
// that took.
func (h *harness) waitMembers(procs []*proc, names []string, timeout time.Duration) time.Duration {
	h.t.Helper()
	start := time.Now()
	deadline := start.Add(timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		ok := true
		var last string
		var version uint64
		for i, p := range procs {
			on, v, err := h.onRing(p)
			if err != nil {
				h.t.Fatal(err)
			}
			if i == 0 {
				version = v
			}
			match := len(on) == len(names) && v == version
			for _, n := range names {
				match = match && on[n] == "alive"
			}
			if !match {
				ok = false
				last = fmt.Sprintf("%s sees %v at version %d", p.name, on, v)
				break
			}
		}
		if ok {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("no agreement on %v within %v: %s", names, timeout, last)
		}
		<-tick.C
	}
}

// testCrashOfOwner: the owner of a key is killed with SIGKILL. The
// survivors answer every check meanwhile, either through the dead owner's
// failure mode (default local, flagged degraded) or, once their ring has
// dropped it, from the new owner. The new owner decides from its replica:
// the tokens spent on the dead owner still count.
func testCrashOfOwner(t *testing.T, bin string) {
	h := newHarness(t)
	p1 := startProc(t, bin, "node-1")
	p2 := startProc(t, bin, "node-2", p1.gossip)
	p3 := startProc(t, bin, "node-3", p1.gossip)
	all := []*proc{p1, p2, p3}
	t.Logf("3 processes: every /v1/cluster shows 3 alive members on the ring after %v",
		h.waitMembers(all, []string{"node-1", "node-2", "node-3"}, 15*time.Second).Round(time.Millisecond))

	var key string
	for i := 0; key == ""; i++ {
		if i == 1000 {
			t.Fatal("no key owned by node-2 among 1000")
		}
		var o api.OwnerResponse
		if err := getJSON(h.client, fmt.Sprintf("http://%s/v1/owner?key=crash:%d", p1.http, i), &o); err != nil {
			t.Fatal(err)
		}
		if o.Owner == "node-2" {
			key = o.Key
		}
	}
	const limit, per, spent = 100, "1h", 10
	for i := range spent {
		p := all[i%3]
		// The last spend asks for replication: sync. Its answer waits for a
		// replication round begun after it, so once it is answered the
		// successor's replica holds all 10.
		l := inlineLimit{count: limit, per: per, sync: i == spent-1}
		a, err := doCheck(h.client, p.http, key, l, 5*time.Second)
		if err != nil || a.status != http.StatusOK || a.body.Owner != "node-2" || a.body.Remaining != limit-1-int64(i) || a.body.Degraded {
			t.Fatalf("spend %d via %s: %d %+v %v, want 200 from node-2 with remaining %d", i, p.name, a.status, a.body, err, limit-1-i)
		}
	}

	if n := h.metric(p2.http, "ringlimit_replication_unconfirmed_total", ""); n != 0 {
		t.Fatalf("node-2 answered %v sync spends unacknowledged, want 0", n)
	}
	// kill -9 the owner.
	if err := p2.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()

	// Watch both survivors' rings drop node-2.
	survivors := []*proc{p1, p3}
	var mu sync.Mutex
	dropped := map[string]time.Duration{}
	watchDone, stopWatch := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { close(stopWatch); <-watchDone }) // before the leak check
	go func() {
		defer close(watchDone)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for time.Since(killed) < 15*time.Second {
			select {
			case <-stopWatch:
				return
			default:
			}
			for _, p := range survivors {
				mu.Lock()
				_, seen := dropped[p.name]
				mu.Unlock()
				if seen {
					continue
				}
				if on, _, err := h.onRing(p); err == nil && on["node-2"] == "" && on[p.name] != "" {
					mu.Lock()
					dropped[p.name] = time.Since(killed)
					mu.Unlock()
				}
			}
			mu.Lock()
			n := len(dropped)
			mu.Unlock()
			if n == len(survivors) {
				return
			}
			<-tick.C
		}
	}()

	// Keep checking the key on both survivors, one check at a time, each
	// within clientTimeout, until the new owner answers and both rings have
	// dropped node-2 (and a few answers more).
	const clientTimeout, slack = time.Second, 300 * time.Millisecond
	var (
		newOwner      string
		firstNormal   time.Duration
		normal        int // non-degraded answers: decided by the new owner
		degraded      = map[string]int{}
		degradedAdmit int
		sent          int
		maxLatency    time.Duration
	)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for ; ; sent++ {
		mu.Lock()
		bothDropped := len(dropped) == len(survivors)
		mu.Unlock()
		if newOwner != "" && bothDropped && normal >= 10 {
			break
		}
		if time.Since(killed) > 15*time.Second || sent == 5000 {
			t.Fatalf("after %v and %d checks: new owner %q (%d answers), rings dropped node-2: %v", time.Since(killed), sent, newOwner, normal, dropped)
		}
		p := survivors[sent%2]
		a, err := doCheck(h.client, p.http, key, inlineLimit{count: limit, per: per}, clientTimeout)
		maxLatency = max(maxLatency, a.latency)
		if a.latency > clientTimeout+slack {
			t.Errorf("check %d via %s took %v, past its %v timeout", sent, p.name, a.latency, clientTimeout)
		}
		if err != nil {
			t.Fatalf("check %d via %s at +%v: %v (after %v)", sent, p.name, time.Since(killed), err, a.latency)
		}
		switch {
		case a.status != http.StatusOK && a.status != http.StatusTooManyRequests:
			t.Fatalf("check %d via %s: status %d", sent, p.name, a.status)
		case a.body.Degraded:
			// Decided by the entry node's local fallback bucket (limit
			// divided by the 3 ring members).
			if a.body.Owner != p.name {
				t.Fatalf("degraded check %d via %s decided by %q", sent, p.name, a.body.Owner)
			}
			degraded[p.name]++
			if a.status == http.StatusOK {
				degradedAdmit++
			}
		default:
			if a.body.Owner != "node-1" && a.body.Owner != "node-3" {
				t.Fatalf("check %d via %s at +%v: non-degraded answer from %q", sent, p.name, time.Since(killed), a.body.Owner)
			}
			if newOwner == "" {
				newOwner, firstNormal = a.body.Owner, time.Since(killed)
			} else if a.body.Owner != newOwner {
				t.Fatalf("check %d via %s: decided by %s, earlier by %s", sent, p.name, a.body.Owner, newOwner)
			}
			normal++
			// The new owner (node-2's successor for the key) continues from
			// its replica: the 10 tokens spent on node-2 still count.
			left := int64(limit - spent - normal)
			wantStatus := http.StatusOK
			if left < 0 {
				left, wantStatus = 0, http.StatusTooManyRequests
			}
			if a.status != wantStatus || a.body.Remaining != left {
				t.Fatalf("check %d via %s: %d remaining %d from the new owner %s, want %d with remaining %d (limit %d − %d spent on node-2 − %d checks it decided)",
					sent, p.name, a.status, a.body.Remaining, newOwner, wantStatus, left, limit, spent, normal)
			}
		}
		<-tick.C
	}
	<-watchDone
	ringDrop := max(dropped["node-1"], dropped["node-3"])
	t.Logf("SIGKILL of node-2: first non-degraded answer (from new owner %s) after %v; node-1's ring dropped node-2 after %v, node-3's after %v",
		newOwner, firstNormal.Round(time.Millisecond), dropped["node-1"].Round(time.Millisecond), dropped["node-3"].Round(time.Millisecond))
	t.Logf("meanwhile: %d checks, slowest %v (client timeout %v); %d degraded (%v), %d of them admitted; %d decided by %s",
		sent, maxLatency.Round(time.Millisecond), clientTimeout, degraded["node-1"]+degraded["node-3"], degraded, degradedAdmit, normal, newOwner)
	t.Logf("the %d tokens spent on node-2 still counted on %s (from its replica); %d degraded admissions",
		spent, newOwner, degradedAdmit)
	const bound = 5 * time.Second
	if firstNormal > bound || ringDrop > bound {
		t.Errorf("recovery took %v (first normal answer) and %v (both rings), want ≤ %v on loopback", firstNormal, ringDrop, bound)
	}

	// Both survivors agree on the new owner, and it goes on from where its
	// own answers left it.
	for _, p := range survivors {
		var o api.OwnerResponse
		if err := getJSON(h.client, "http://"+p.http+"/v1/owner?key="+key, &o); err != nil {
			t.Fatal(err)
		}
		if o.Owner != newOwner {
			t.Errorf("%s: /v1/owner says %s, answers came from %s", p.name, o.Owner, newOwner)
		}
		a, err := doCheck(h.client, p.http, key, inlineLimit{count: limit, per: per}, clientTimeout)
		normal++
		left, wantStatus := int64(limit-spent-normal), http.StatusOK
		if left < 0 {
			left, wantStatus = 0, http.StatusTooManyRequests
		}
		if err != nil || a.status != wantStatus || a.body.Degraded || a.body.Owner != newOwner || a.body.Remaining != left {
			t.Errorf("check via %s after recovery: %d %+v %v, want %d from %s with remaining %d", p.name, a.status, a.body, err, wantStatus, newOwner, left)
		}
		// The degraded answers are counted, per entry node, in the metrics.
		m, err := testkit.Scrape(h.client, p.http, "ringlimit_degraded_checks_total")
		if err != nil {
			t.Fatal(err)
		}
		if got := m[`{mode="local"}`]; int(got) != degraded[p.name] {
			t.Errorf("%s: ringlimit_degraded_checks_total{mode=\"local\"} = %v, want %d", p.name, got, degraded[p.name])
		}
	}

	for _, p := range survivors {
		if err := p.stop(t, syscall.SIGTERM, 15*time.Second); err != nil {
			t.Errorf("%s after SIGTERM: %v, want exit status 0", p.name, err)
		}
	}
	<-p2.exited
	if ws, ok := p2.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
		t.Errorf("node-2: %v, want killed by SIGKILL", p2.err)
	}
}

// testDeadSeed: a node whose only seed is a closed port starts, serves
// /healthz, keeps retrying the join, answers checks in their failure mode
// (it owns no key before it has joined: local gives it half the limit),
// is not ready, and exits 0 on SIGTERM.
func testDeadSeed(t *testing.T, bin string) {
	h := newHarness(t)
	seed := testkit.DeadAddr(t)
	p := startProc(t, bin, "lonely", seed)
	resp, err := h.client.Get("http://" + p.http + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz: %d", resp.StatusCode)
	}
	for i, want := range []int{200, 200, 429} {
		a, err := doCheck(h.client, p.http, "dead-seed", inlineLimit{count: 4, per: "1h"}, 5*time.Second)
		if err != nil || a.status != want || a.body.Owner != "lonely" || !a.body.Degraded {
			t.Fatalf("check %d: %d %+v %v, want %d from lonely, degraded", i, a.status, a.body, err, want)
		}
	}
	on, _, err := h.onRing(p)
	if err != nil || len(on) != 0 {
		t.Fatalf("/v1/cluster: on ring %v, %v; want no ring before the join", on, err)
	}
	if resp, err := h.client.Get("http://" + p.http + "/readyz"); err != nil {
		t.Fatal(err)
	} else if resp.Body.Close(); resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("/readyz: %d, want 503 before the join", resp.StatusCode)
	}
	attempts := waitJoinAttempts(t, p.logs, 2, 10*time.Second)
	t.Logf("seed %s: %d failed join attempts logged", seed, attempts)
	if err := p.stop(t, syscall.SIGTERM, 15*time.Second); err != nil {
		t.Fatalf("exit after SIGTERM: %v, want status 0", err)
	}
	if len(p.logs.Records("node stopped")) != 1 {
		t.Errorf("no \"node stopped\" line after SIGTERM:\n%s", strings.Join(p.logs.Tail(10), "\n"))
	}
}
