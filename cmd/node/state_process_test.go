package main

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/internal/statefile"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
)

// TestProcessRestartKeepsSpend: three node processes with --data-dir.
//   - 700 of a key's 1,000 spent; every node stopped (SIGTERM, one after
//     the other) and started again on its directory: exactly 300 more
//     are admitted.
//   - 700 of a second key spent; once every node has written its state
//     file after the last spend, all three are killed at once (SIGKILL)
//     and started again: exactly 300 more are admitted.
//   - node-1's file cut short: node-1 logs that it refused it and starts
//     empty.
//
// The keys are 1,000 a year (a token bucket: no window boundary, and not
// one token comes back within the test).
func TestProcessRestartKeepsSpend(t *testing.T) {
	bin := buildNode(t)
	h := newHarness(t)
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	up := func() []*proc {
		t.Helper()
		args := func(i int) []string {
			return append(soloArgs(names3[i]), "--data-dir", dirs[i], "--snapshot-interval", "100ms")
		}
		p1 := launch(t, names3[0], exec.Command(bin, args(0)...))
		procs := []*proc{p1}
		for i := 1; i < 3; i++ {
			procs = append(procs, launch(t, names3[i], exec.Command(bin, append(args(i), "--join", p1.gossip)...)))
		}
		h.waitMembers(procs, names3, 30*time.Second)
		return procs
	}
	spend := func(procs []*proc, key string, n int) int {
		t.Helper()
		body := fmt.Sprintf(`{"key":%q,"limit":{"limit":1000,"per":"8784h"}}`, key)
		ok := 0
		for i := range n {
			status, b, err := postJSON(h.client, "http://"+procs[i%3].http+"/v1/check", body)
			switch {
			case err != nil || (status != http.StatusOK && status != http.StatusTooManyRequests):
				t.Fatalf("check %d of %s: %d %s %v", i+1, key, status, b, err)
			case status == http.StatusOK:
				ok++
			}
		}
		return ok
	}
	procs := up()
	if got := spend(procs, "alpha", 700); got != 700 {
		t.Fatalf("alpha: %d of the first 700 admitted", got)
	}
	for _, p := range procs {
		if err := p.stop(t, syscall.SIGTERM, 20*time.Second); err != nil {
			t.Fatalf("%s: %v", p.name, err)
		}
	}
	procs = up()
	if got := spend(procs, "alpha", 400); got != 300 {
		t.Fatalf("alpha after a stop and start of every node: %d of 400 admitted, want exactly 300", got)
	}

	if got := spend(procs, "beta", 700); got != 700 {
		t.Fatalf("beta: %d of the first 700 admitted", got)
	}
	// Two more writes on every node: the second began after the last spend.
	var before []float64
	for _, p := range procs {
		before = append(before, h.metric(p.http, "ringlimit_state_writes_total", `{result="ok"}`))
	}
	testkit.WaitFor(t, 10*time.Second, "two state files written by every node", func() error {
		for i, p := range procs {
			if got := h.metric(p.http, "ringlimit_state_writes_total", `{result="ok"}`); got < before[i]+2 {
				return fmt.Errorf("%s wrote %v since", p.name, got-before[i])
			}
		}
		return nil
	})
	for _, p := range procs {
		p.cmd.Process.Signal(syscall.SIGKILL)
	}
	for _, p := range procs {
		<-p.exited
	}
	procs = up()
	if got := spend(procs, "beta", 400); got != 300 {
		t.Fatalf("beta after every node was killed: %d of 400 admitted, want exactly 300", got)
	}

	n1 := procs[0]
	n1.cmd.Process.Signal(syscall.SIGKILL)
	<-n1.exited
	path := filepath.Join(dirs[0], statefile.Name)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b[:len(b)/2], 0o600); err != nil {
		t.Fatal(err)
	}
	n1 = launch(t, names3[0], exec.Command(bin, append(soloArgs(names3[0]), "--data-dir", dirs[0], "--join", procs[1].gossip)...))
	recs := n1.logs.Records("state file refused: starting empty")
	want := fmt.Sprintf("statefile: corrupt: checksum mismatch (%d bytes: cut short or changed)", len(b)/2)
	if len(recs) != 1 || recs[0]["err"] != want || recs[0]["set_aside"] != path+".refused" {
		t.Fatalf("node-1's log: %v", recs)
	}
}
