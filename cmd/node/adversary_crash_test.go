package main

// An adversary who can crash nodes (or waits for a crash) spends a key in a
// burst and has its owner killed right after the last answer: whatever the
// owner admitted and had not yet copied to the key's successor is admitted
// again by the survivors. The bound is in tokens per key, not in
// milliseconds of replication lag: at most --replication-max-loss (10)
// tokens over the limit, whatever the check rate; none at all for a layer
// with replication: sync.

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
)

// crashPolicy gives every caller of policy api one layer, 100 an hour
// (refill: one token every 36 s, none within a run), replicated sync, and
// refused while no node can decide it (fail_closed: a degraded answer
// admits nothing).
const crashPolicy = `version: "crash"
policies:
  api:
    default_tier: sync
    tiers:
      sync: {limit: 100, per: 1h, failure_mode: fail_closed, replication: sync}
`

const (
	crashRuns  = 20  // per mode
	crashBurst = 50  // back-to-back spends before the kill
	crashLimit = 100 // of every key, inline or policy
)

// TestAdversaryCrashBound: 20 runs per mode on one 3-node cluster. A run
// spends 50 tokens of a fresh key (limit 100) back to back on its owner,
// kills the owner with SIGKILL right after the 50th answer, then spends
// the key through a survivor (the successor stands in from its replica)
// until it is refused, and restarts the killed node under its name and
// addresses. Over-admission = admitted in all − 100: at most 10 on every
// run for an inline limit (async replication, the default bound), exactly
// 0 on every run for a policy layer with replication: sync.
func TestAdversaryCrashBound(t *testing.T) {
	bin := buildNode(t)
	h := newHarness(t)
	extra, procs := startCrashCluster(t, h, bin)

	for _, mode := range []struct {
		name  string
		body  func(run int) string
		bound int
	}{
		{"async (inline limit, --replication-max-loss 10)", func(run int) string {
			return fmt.Sprintf(`{"key":"crash-async-%d","limit":{"limit":%d,"per":"1h","failure_mode":"fail_closed"}}`, run, crashLimit)
		}, 10},
		{"sync (policy layer, replication: sync)", func(run int) string {
			return fmt.Sprintf(`{"policy":"api","user":"crash-sync-%d"}`, run)
		}, 0},
	} {
		start := time.Now()
		overs := make([]int, 0, crashRuns)
		var lat []time.Duration // of the spends on the owner, over HTTP
		for run := range crashRuns {
			over, l, err := crashRun(h, procs, mode.body(run), run)
			if err != nil {
				t.Fatalf("%s, run %d: %v", mode.name, run, err)
			}
			overs = append(overs, over)
			lat = append(lat, l...)
			// The killed node back under its name and addresses: the next
			// run starts from three members again.
			restarted := ""
			for i, p := range procs {
				select {
				case <-p.exited:
					s := restartSpec(p, procs[(i+1)%3].gossip)
					s.extra = extra
					procs[i] = startFaultProc(t, bin, nil, s)
					restarted = p.name
				default:
				}
			}
			h.client.CloseIdleConnections() // none to a killed process
			h.waitMembers(procs, names3, 15*time.Second)
			// The survivors stop backing off from the restarted node (it
			// failed to answer moments ago) once they send it its keys'
			// checks again: the next run's spends go to the owner itself.
			probe := ownedBy(h, procs[0], restarted, fmt.Sprintf("crash-probe-%d-%d", len(overs), run), 1)[0]
			testkit.WaitFor(t, 10*time.Second, "every node sending "+restarted+"'s keys to it", func() error {
				for _, p := range procs {
					a, err := policyCheck(h.client, p.http, fmt.Sprintf(`{"key":%q,"limit":{"limit":1000000,"per":"1h"}}`, probe))
					if err != nil {
						return err
					}
					if a.body.Owner != restarted || a.body.Degraded {
						return fmt.Errorf("%s: %s decided (degraded %v)", p.name, a.body.Owner, a.body.Degraded)
					}
				}
				return nil
			})
		}
		slices.Sort(lat)
		t.Logf("%s: over-admission per run after kill -9 of the owner right after %d back-to-back spends: %v (max %d, bound %d); %d runs in %v; a spend on the owner over HTTP: p50 %v p99 %v",
			mode.name, crashBurst, overs, slices.Max(overs), mode.bound, crashRuns, time.Since(start).Round(time.Millisecond),
			lat[len(lat)/2].Round(time.Microsecond), lat[len(lat)*99/100].Round(time.Microsecond))
		for run, over := range overs {
			if over > mode.bound || over < 0 {
				t.Errorf("%s, run %d: %d admitted over the limit of %d, want 0 to %d", mode.name, run, over, crashLimit, mode.bound)
			}
		}
	}
}

// crashRun makes one run on body's fresh key and returns its
// over-admission, and the latencies of the spends sent to the owner. The
// killed owner is left dead for the caller to restart.
func crashRun(h *harness, procs []*proc, body string, run int) (int, []time.Duration, error) {
	first, err := policyCheck(h.client, procs[0].http, body)
	if err != nil || first.status != http.StatusOK || first.body.Degraded {
		return 0, nil, fmt.Errorf("first spend via %s: %d %+v %v, want 200 not degraded", procs[0].name, first.status, first.body, err)
	}
	var owner *proc
	var survivors []*proc
	for _, p := range procs {
		if p.name == first.body.Owner {
			owner = p
		} else {
			survivors = append(survivors, p)
		}
	}
	if owner == nil {
		return 0, nil, fmt.Errorf("first spend decided by %q, not a member", first.body.Owner)
	}
	lat := make([]time.Duration, 0, crashBurst)
	for i := 2; i <= crashBurst; i++ {
		a, err := policyCheck(h.client, owner.http, body)
		lat = append(lat, a.latency)
		if err != nil || a.status != http.StatusOK || a.body.Degraded || a.body.Owner != owner.name {
			return 0, nil, fmt.Errorf("spend %d on owner %s: %d %+v %v, want 200 decided by it", i, owner.name, a.status, a.body, err)
		}
	}
	if err := owner.kill(); err != nil {
		return 0, nil, err
	}
	via := survivors[run%2]
	admitted := crashBurst
	for i := 0; ; i++ {
		if i == 2*crashLimit {
			return 0, nil, fmt.Errorf("still admitted after %d spends via %s", i, via.name)
		}
		a, err := policyCheck(h.client, via.http, body)
		if err != nil {
			return 0, nil, fmt.Errorf("spend %d after the kill, via %s: %w", i+1, via.name, err)
		}
		if a.body.Degraded {
			return 0, nil, fmt.Errorf("spend %d after the kill, via %s: degraded answer %+v, want the successor to decide", i+1, via.name, a.body)
		}
		if a.status != http.StatusOK {
			break
		}
		admitted++
	}
	return admitted - crashLimit, lat, nil
}

// TestAdversaryCrashSyncWithoutSuccessor: with every other node killed, a
// replication: sync layer's owner cannot have its spend acknowledged. It
// answers as async (the layer stays available: it keeps deciding the keys
// it owns, as a minority does) and counts each such answer in
// ringlimit_replication_unconfirmed_total; no answer waits past the
// client's 2 s.
func TestAdversaryCrashSyncWithoutSuccessor(t *testing.T) {
	bin := buildNode(t)
	h := newHarness(t)
	_, procs := startCrashCluster(t, h, bin)
	const body = `{"policy":"api","user":"alone"}`
	first := h.mustCheck(procs[0].http, body)
	var owner *proc
	for _, p := range procs {
		if p.name == first.body.Owner {
			owner = p
		}
	}
	if owner == nil || first.status != http.StatusOK {
		t.Fatalf("first spend: %d decided by %q", first.status, first.body.Owner)
	}
	if n := h.sumCounter([]string{owner.http}, "ringlimit_replication_unconfirmed_total"); n != 0 {
		t.Fatalf("%s: %v unconfirmed answers with its successor up, want 0", owner.name, n)
	}
	for _, p := range procs {
		if p != owner {
			if err := p.stop(t, syscall.SIGKILL, 10*time.Second); err == nil {
				t.Fatalf("%s exited cleanly after SIGKILL", p.name)
			}
		}
	}
	h.client.CloseIdleConnections()
	const n = 5
	var slowest time.Duration
	for i := range n {
		a, err := policyCheck(h.client, owner.http, body)
		if err != nil || a.status != http.StatusOK || a.body.Owner != owner.name {
			t.Fatalf("spend %d with no successor: %d %+v %v, want 200 decided by %s", i+2, a.status, a.body, err, owner.name)
		}
		if a.latency > 2*time.Second {
			t.Errorf("spend %d with no successor answered after %v, want within 2s", i+2, a.latency)
		}
		slowest = max(slowest, a.latency)
	}
	got := h.sumCounter([]string{owner.http}, "ringlimit_replication_unconfirmed_total")
	t.Logf("%d sync spends on %s with both other nodes killed: all admitted, slowest %v, %v counted unconfirmed",
		n, owner.name, slowest.Round(time.Microsecond), got)
	if got != n {
		t.Errorf("ringlimit_replication_unconfirmed_total = %v, want %d", got, n)
	}
}

// startCrashCluster starts node-1 to node-3 of bin with crashPolicy and
// waits until each sees all three; it returns the flags they were given.
func startCrashCluster(t *testing.T, h *harness, bin string) ([]string, []*proc) {
	t.Helper()
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, []byte(crashPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	extra := []string{"--policy", policy}
	p1 := startFaultProc(t, bin, nil, procSpec{name: "node-1", extra: extra})
	p2 := startFaultProc(t, bin, nil, procSpec{name: "node-2", join: []string{p1.gossip}, extra: extra})
	p3 := startFaultProc(t, bin, nil, procSpec{name: "node-3", join: []string{p1.gossip}, extra: extra})
	procs := []*proc{p1, p2, p3}
	h.waitMembers(procs, names3, 15*time.Second)
	return extra, procs
}
