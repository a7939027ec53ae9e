package main

import (
	"fmt"
	"net/http"
	"os/exec"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/api"
	"github.com/ringlimit/ringlimit/ring"
)

// TestProcessNineNodes: nine node processes on this machine converge (every
// /v1/cluster shows the nine alive on one ring), enforce limits exactly
// through every node (100 of 1,000 checks on one key; 10 of 30 on each of
// 50 keys), and a tenth that joins moves about a tenth of the keyspace,
// measured on partitions and on 20,000 sample keys, without refilling
// anything. The convergence times are logged: a bound here only catches a
// hang (targets are measured, never asserted on timings).
//
// Every check fails closed: an owner that misses its deadline on a busy
// machine rejects rather than admits from a local stand-in, so the counts
// of admissions stay exact whatever the machine's load.
func TestProcessNineNodes(t *testing.T) {
	bin := buildNode(t)
	h := newHarness(t)
	names := make([]string, 10)
	for i := range names {
		names[i] = fmt.Sprintf("node-%d", i+1)
	}
	nine := names[:9]

	start := func(name string, join ...string) *proc {
		args := soloArgs(name)
		if len(join) > 0 {
			args = append(args, joinArgs(join)...)
		}
		return launch(t, name, exec.Command(bin, args...))
	}
	began := time.Now()
	procs := []*proc{start(names[0])}
	for _, name := range nine[1:] {
		procs = append(procs, start(name, procs[0].gossip))
	}
	started := time.Since(began)
	converged := h.waitMembers(procs, nine, 30*time.Second)
	t.Logf("9 processes: started one after the other in %v; every /v1/cluster shows 9 alive on one ring %v after the last started",
		started.Round(time.Millisecond), converged.Round(time.Millisecond))

	// The servers' ring is the ring package's with its default Config: the
	// versions agree (a version hashes the config and the members).
	ring9, err := ring.New(ring.DefaultConfig(), nine)
	if err != nil {
		t.Fatal(err)
	}
	if _, v, err := h.onRing(procs[0]); err != nil || v != ring9.Version() {
		t.Fatalf("node-1's ring version %d (%v), the ring package's for the nine %d", v, err, ring9.Version())
	}

	// One hot key: 1,000 checks round-robin through the nine nodes.
	hot := inlineLimit{count: 100, per: "1h", mode: "fail_closed"}
	jobs := make([]job, 1000)
	for i := range jobs {
		jobs[i] = job{key: "growth:hot", node: i % 9}
	}
	addrs := make([]string, 0, 10)
	for _, p := range procs {
		addrs = append(addrs, p.http)
	}
	hotOwner := ""
	admitted, rejected := tallyExact(t, runJobs(h.client, addrs, jobs, hot, 16, time.Now().Add(2*time.Minute)), func(r result) {
		if hotOwner == "" {
			hotOwner = r.body.Owner
		}
		if r.body.Owner != hotOwner {
			t.Errorf("growth:hot via %s decided by %s, earlier by %s", names[r.node], r.body.Owner, hotOwner)
		}
	})
	if admitted["growth:hot"] != 100 {
		t.Errorf("growth:hot: %d of 1,000 admitted through 9 nodes, want exactly 100 (%d rejected)", admitted["growth:hot"], rejected)
	}

	// 50 keys of limit 10: 30 checks each, spread over the nine nodes.
	ten := inlineLimit{count: 10, per: "1h", mode: "fail_closed"}
	jobs = jobs[:0]
	for c := range 30 {
		for k := range 50 {
			jobs = append(jobs, job{key: fmt.Sprintf("growth:%d", k), node: (c*50 + k) % 9})
		}
	}
	admitted, rejected = tallyExact(t, runJobs(h.client, addrs, jobs, ten, 16, time.Now().Add(2*time.Minute)), nil)
	for k := range 50 {
		if key := fmt.Sprintf("growth:%d", k); admitted[key] != 10 {
			t.Errorf("%s: %d of 30 admitted through 9 nodes, want exactly 10", key, admitted[key])
		}
	}
	t.Logf("exact through 9 nodes: growth:hot 100 of 1,000 (owner %s); 50 keys 10 of 30 each (%d rejections)", hotOwner, rejected)

	// A tenth node joins. What moves, computed with the servers' ring.
	ring10, err := ring.New(ring.DefaultConfig(), names)
	if err != nil {
		t.Fatal(err)
	}
	parts9, parts10 := ring9.Partitions(), ring10.Partitions()
	movedParts, toNew := 0, 0
	owned := len(slices.DeleteFunc(slices.Clone(parts10), func(o string) bool { return o != names[9] }))
	for p := range parts9 {
		if parts9[p] != parts10[p] {
			movedParts++
			if parts10[p] == names[9] {
				toNew++
			}
		}
	}
	const samples = 20000
	movedKeys := 0
	for i := range samples {
		k := fmt.Sprintf("sample:%d", i)
		o9, _ := ring9.Owner(k)
		o10, _ := ring10.Owner(k)
		if o9 != o10 {
			movedKeys++
		}
	}
	partFrac, keyFrac := float64(movedParts)/float64(len(parts9)), float64(movedKeys)/samples
	t.Logf("node-10 joins: %d of %d partitions change owner (%.3f; %d of them to node-10, which owns %d), %d of %d sample keys (%.3f)",
		movedParts, len(parts9), partFrac, toNew, owned, movedKeys, samples, keyFrac)
	for _, f := range []float64{partFrac, keyFrac} {
		if f < 0.03 || f > 0.2 {
			t.Errorf("moved fraction %.3f, want about 1/10 (0.03 to 0.2)", f)
		}
	}

	joinBegan := time.Now()
	procs = append(procs, start(names[9], procs[0].gossip))
	joined := h.waitMembers(procs, names, 30*time.Second)
	t.Logf("10th process: every /v1/cluster shows 10 alive on one ring %v after it started (%v after its launch began)",
		joined.Round(time.Millisecond), time.Since(joinBegan).Round(time.Millisecond))
	if _, v, err := h.onRing(procs[9]); err != nil || v != ring10.Version() {
		t.Fatalf("node-10's ring version %d (%v), the ring package's for the ten %d", v, err, ring10.Version())
	}
	// The live cluster agrees with the computed owners.
	for i := range 50 {
		k := fmt.Sprintf("sample:%d", i*397)
		var o api.OwnerResponse
		if err := getJSON(h.client, fmt.Sprintf("http://%s/v1/owner?key=%s", procs[i%10].http, k), &o); err != nil {
			t.Fatal(err)
		}
		if want, _ := ring10.Owner(k); o.Owner != want {
			t.Errorf("%s: /v1/owner on %s says %s, the ring package %s", k, names[i%10], o.Owner, want)
		}
	}

	// Nothing was refilled by the move: every key spent above is still
	// empty, asked through the new node.
	jobs = jobs[:0]
	jobs = append(jobs, job{key: "growth:hot", node: 9})
	for k := range 50 {
		jobs = append(jobs, job{key: fmt.Sprintf("growth:%d", k), node: 9})
	}
	addrs = append(addrs, procs[9].http)
	res := runJobs(h.client, addrs, jobs[:1], hot, 1, time.Now().Add(time.Minute))
	res = append(res, runJobs(h.client, addrs, jobs[1:], ten, 8, time.Now().Add(time.Minute))...)
	admitted, _ = tallyExact(t, res, nil)
	if n := sumValues(admitted); n != 0 {
		t.Errorf("after node-10 joined, %d of 51 spent keys admitted a check through it (%v), want 0", n, admitted)
	}

	// Stop them one after another (each leaves, hands its keys on and
	// exits 0), and time it: stopping is part of what grows with the
	// cluster.
	stopBegan := time.Now()
	for _, p := range procs {
		if err := p.stop(t, syscall.SIGTERM, 60*time.Second); err != nil {
			t.Errorf("%s after SIGTERM: %v, want exit status 0", p.name, err)
		}
	}
	t.Logf("10 processes stopped one after another (SIGTERM, each waited for) in %v", time.Since(stopBegan).Round(time.Millisecond))
}

// tallyExact counts the admissions per key in rs and the rejections, failing
// the test on an error, on a status other than 200 or 429, and on an
// admission that was not decided by the key's owner (degraded). each, when
// not nil, sees every answer.
func tallyExact(t *testing.T, rs []result, each func(result)) (admitted map[string]int, rejected int) {
	t.Helper()
	admitted = map[string]int{}
	for _, r := range rs {
		if r.err != nil {
			t.Fatalf("%s via node %d: %v", r.key, r.node+1, r.err)
		}
		switch r.status {
		case http.StatusOK:
			if r.body.Degraded {
				t.Errorf("%s via node %d: admitted degraded (fail_closed): %+v", r.key, r.node+1, r.body)
			}
			admitted[r.key]++
		case http.StatusTooManyRequests:
			rejected++
		default:
			t.Fatalf("%s via node %d: status %d", r.key, r.node+1, r.status)
		}
		if each != nil {
			each(r)
		}
	}
	return admitted, rejected
}

func sumValues(m map[string]int) (n int) {
	for _, v := range m {
		n += v
	}
	return n
}
