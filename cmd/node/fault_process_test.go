package main

// Fault tests with the real binary: kill -9 of a key's owner, one node of
// three cut off by iptables, and a rolling restart under load. They count
// every admission of keys limited to 100 an hour (refill: one token every
// 36 s, negligible over a test) and hold the cluster to the limit.

import (
	"cmp"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/api"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
)

// faultLimit is the limit of every key in the fault tests: 100 per hour,
// failure mode the default (local).
var faultLimit = inlineLimit{count: 100, per: "1h"}

// names3 are the nodes of every fault test.
var names3 = []string{"node-1", "node-2", "node-3"}

// buildNode builds cmd/node, once per run of the tests (testkit.Build).
func buildNode(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds a binary and runs node processes")
	}
	return testkit.Build(t, ".")
}

// startThree starts node-1, then node-2 and node-3 joining it (in f's
// cgroups when f is not nil), and waits until all three agree.
func startThree(t *testing.T, h *harness, bin string, f *netFault) []*proc {
	t.Helper()
	p1 := startFaultProc(t, bin, f, procSpec{name: "node-1"})
	p2 := startFaultProc(t, bin, f, procSpec{name: "node-2", join: []string{p1.gossip}})
	p3 := startFaultProc(t, bin, f, procSpec{name: "node-3", join: []string{p1.gossip}})
	all := []*proc{p1, p2, p3}
	h.waitMembers(all, names3, 15*time.Second)
	return all
}

// ownedBy returns n keys prefix:i that via's /v1/owner gives to owner.
func ownedBy(h *harness, via *proc, owner, prefix string, n int) []string {
	h.t.Helper()
	var keys []string
	for i := 0; len(keys) < n; i++ {
		if i == 1000 {
			h.t.Fatalf("only %d of %d keys owned by %s among 1000", len(keys), n, owner)
		}
		var o api.OwnerResponse
		if err := getJSON(h.client, fmt.Sprintf("http://%s/v1/owner?key=%s:%d", via.http, prefix, i), &o); err != nil {
			h.t.Fatal(err)
		}
		if o.Owner == owner {
			keys = append(keys, o.Key)
		}
	}
	return keys
}

// spendReplicated is spend, with the last check of each key (through
// procs[0]) asking for replication: sync: when it returns, each key's
// successor holds a copy with every token spent. It fails the test if an
// owner answered a sync check without that acknowledgement.
func spendReplicated(h *harness, procs []*proc, n map[string]int) {
	h.t.Helper()
	rest := make(map[string]int, len(n))
	for k, c := range n {
		rest[k] = c - 1
	}
	spend(h, procs, rest)
	sync := faultLimit
	sync.sync = true
	for _, k := range slices.Sorted(maps.Keys(n)) {
		a, err := doCheck(h.client, procs[0].http, k, sync, 10*time.Second)
		if err != nil || a.status != http.StatusOK || a.body.Degraded {
			h.t.Fatalf("last spend of %s via %s: %d %+v %v, want 200 not degraded", k, procs[0].name, a.status, a.body, err)
		}
	}
	var addrs []string
	for _, p := range procs {
		addrs = append(addrs, p.http)
	}
	if u := h.sumCounter(addrs, "ringlimit_replication_unconfirmed_total"); u != 0 {
		h.t.Fatalf("%v sync spends answered without their successor's acknowledgement, want 0", u)
	}
}

// spend takes n[key] tokens of every key through procs round robin and
// fails the test unless every check is admitted, not degraded.
func spend(h *harness, procs []*proc, n map[string]int) {
	h.t.Helper()
	var addrs []string
	for _, p := range procs {
		addrs = append(addrs, p.http)
	}
	var jobs []job
	for _, k := range slices.Sorted(maps.Keys(n)) {
		for i := range n[k] {
			jobs = append(jobs, job{key: k, node: i % len(procs)})
		}
	}
	for _, r := range runJobs(h.client, addrs, jobs, faultLimit, 16, time.Now().Add(30*time.Second)) {
		if r.err != nil || r.status != http.StatusOK || r.body.Degraded {
			h.t.Fatalf("spending %s via %s: %d %+v %v, want 200 not degraded", r.key, procs[r.node].name, r.status, r.body, r.err)
		}
	}
}

// shot is one check of a paced load: key through node via.
type shot struct {
	key string
	via *proc
}

// outcome is a shot's answer. err is set for a failure: no answer, a
// status other than 200 and 429, or an answer past the client's timeout.
type outcome struct {
	shot
	checkAnswer
	err error
}

// load sends checks at a fixed pace.
type load struct {
	every    time.Duration // check i is due at start + i×every
	timeout  time.Duration // each check's client timeout
	inflight int           // most checks awaiting an answer at once; a due check waits for a slot
}

// run sends up to n checks, next(i) choosing check i when it is due, and
// stops early once stop is closed (nil: never). It returns, once all have
// answered, the outcomes of the checks sent, in order.
func (ld load) run(client *http.Client, n int, stop <-chan struct{}, next func(i int) shot) []outcome {
	out := make([]outcome, n)
	sem := make(chan struct{}, ld.inflight)
	var wg sync.WaitGroup
	start := time.Now()
	sent := 0
send:
	for ; sent < n; sent++ {
		due := time.NewTimer(time.Until(start.Add(time.Duration(sent) * ld.every)))
		select {
		case <-stop:
			due.Stop()
			break send
		case <-due.C:
		}
		select {
		case <-stop:
			break send
		case sem <- struct{}{}:
		}
		i, s := sent, next(sent)
		wg.Go(func() {
			defer func() { <-sem }()
			o := outcome{shot: s}
			o.checkAnswer, o.err = doCheck(client, s.via.http, s.key, faultLimit, ld.timeout)
			switch {
			case o.err != nil:
				o.err = fmt.Errorf("via %s after %v: %w", s.via.name, o.latency.Round(time.Millisecond), o.err)
			case o.status != http.StatusOK && o.status != http.StatusTooManyRequests:
				o.err = fmt.Errorf("via %s: status %d", s.via.name, o.status)
			case o.latency > ld.timeout:
				o.err = fmt.Errorf("via %s: answered after %v, past the %v timeout", s.via.name, o.latency, ld.timeout)
			}
			out[i] = o
		})
	}
	wg.Wait()
	return out[:sent]
}

// tally counts outcomes; admitted is also counted per key.
type tally struct {
	checks, admitted, refused, failed, degraded int
	byKey                                       map[string]int
	checksByKey                                 map[string]int
	firstFailure                                error
}

func count(outs ...[]outcome) tally {
	c := tally{byKey: map[string]int{}, checksByKey: map[string]int{}}
	for _, o := range slices.Concat(outs...) {
		c.checks++
		c.checksByKey[o.key]++
		switch {
		case o.err != nil:
			c.failed++
			if c.firstFailure == nil {
				c.firstFailure = o.err
			}
			continue
		case o.status == http.StatusOK:
			c.admitted++
			c.byKey[o.key]++
		default:
			c.refused++
		}
		if o.body.Degraded {
			c.degraded++
		}
	}
	return c
}

func (c tally) String() string {
	return fmt.Sprintf("%d checks: %d admitted, %d refused, %d failed (%d degraded answers)", c.checks, c.admitted, c.refused, c.failed, c.degraded)
}

// TestFaultKillOwner: the owner of a spent key (E) and of a half-spent key
// (H) is killed with SIGKILL, then restarted under its name and addresses.
// Through it all, the cluster admits at most 10 more on E and 50 + 10 on H,
// and answers every check.
func TestFaultKillOwner(t *testing.T) {
	bin := buildNode(t)
	h := newHarness(t)
	all := startThree(t, h, bin, nil)
	p1, p2, p3 := all[0], all[1], all[2]
	keys := ownedBy(h, p1, "node-2", "kill", 2)
	e, hk := keys[0], keys[1]
	spendReplicated(h, all, map[string]int{e: 100, hk: 50})

	if err := p2.kill(); err != nil {
		t.Fatal(err)
	}
	// 8 s at 25 checks a second per key, through the survivors.
	ld := load{every: 20 * time.Millisecond, timeout: 2 * time.Second, inflight: 16}
	survivors := []*proc{p1, p3}
	down := ld.run(h.client, 400, nil, func(i int) shot { return shot{keys[i%2], survivors[i/2%2]} })

	p2 = startFaultProc(t, bin, nil, restartSpec(p2, p1.gossip))
	all = []*proc{p1, p2, p3}
	rejoined := h.waitMembers(all, names3, 15*time.Second)
	// 3 s more at the same pace, through all three.
	up := ld.run(h.client, 150, nil, func(i int) shot { return shot{keys[i%2], all[i/2%3]} })

	c, cd, cu := count(down, up), count(down), count(up)
	t.Logf("kill -9 of owner node-2: admitted after the kill E=%d (bound 10; it was spent) and H=%d (bound 60; 50 were left), of which %d and %d while node-2 was down, %d and %d after its restart; %v; node-2 back on every ring %v after its restart; first failure: %v",
		c.byKey[e], c.byKey[hk], cd.byKey[e], cd.byKey[hk], cu.byKey[e], cu.byKey[hk], c, rejoined.Round(time.Millisecond), c.firstFailure)
	if c.byKey[e] > 10 {
		t.Errorf("E: %d admitted after the kill, want ≤ 10 (it was spent)", c.byKey[e])
	}
	if c.byKey[hk] > 60 {
		t.Errorf("H: %d admitted after the kill, want ≤ 50 left + 10", c.byKey[hk])
	}
	if c.failed != 0 {
		t.Errorf("%d checks failed, want 0; first: %v", c.failed, c.firstFailure)
	}
}

// states returns every member p's /v1/cluster lists, with its state.
func states(h *harness, p *proc) (map[string]string, error) {
	var st api.ClusterStatus
	if err := getJSON(h.client, "http://"+p.http+"/v1/cluster", &st); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, m := range st.Members {
		out[m.Name] = m.State
	}
	return out, nil
}

// TestFaultPartition: node-3 is cut off from node-1 and node-2 for 12 s
// while clients reach all three. Two spent keys, one owned on each side,
// admit at most 45 in all meanwhile; within 10 s of the heal the cluster
// is one again, and neither key admits anything after.
func TestFaultPartition(t *testing.T) {
	bin := buildNode(t)
	h := newHarness(t)
	f := newNetFault(t)
	all := startThree(t, h, bin, f)
	p1, p2, p3 := all[0], all[1], all[2]

	// The rules really cut: node-3's sockets no longer reach node-1, nor
	// node-1's node-3, and both sides see the other failing while the test
	// still reaches all three; the heal removes every rule and connections
	// go through again.
	if !t.Run("CutAndHeal", func(t *testing.T) {
		sh := &harness{t: t, client: h.client}
		reach := func(from, to *proc, addr string, want bool) {
			t.Helper()
			if ok, err := f.connects(from.name, addr); err != nil || ok != want {
				t.Fatalf("%s connects to %s's %s: %v, %v; want %v", from.name, to.name, addr, ok, err, want)
			}
		}
		reach(p3, p1, p1.grpc, true)
		f.cut(t, p3, p1, p2)
		cut := time.Now()
		reach(p3, p1, p1.grpc, false)
		reach(p1, p3, p3.gossip, false)
		var views string
		testkit.WaitFor(t, 10*time.Second, "both sides of the cut to see the other failing", func() error {
			s3, err3 := states(sh, p3)
			s1, err1 := states(sh, p1)
			views = fmt.Sprintf("node-3 sees %v, node-1 sees %v", s3, s1)
			if err := cmp.Or(err3, err1); err != nil {
				return err
			}
			if s3["node-1"] == "alive" || s3["node-2"] == "alive" || s1["node-3"] == "alive" {
				return fmt.Errorf("%s", views)
			}
			return nil
		})
		seen := time.Since(cut)
		f.heal(t)
		if l := f.leftovers(t); len(l) > 0 {
			t.Fatalf("rules left after heal: %q", l)
		}
		reach(p3, p1, p1.grpc, true)
		reach(p1, p3, p3.gossip, true)
		back := sh.waitMembers(all, names3, 15*time.Second)
		t.Logf("cut seen after %v (%s); after the heal no rule is left, node-3 and node-1 connect again, and the cluster was whole again after %v",
			seen.Round(time.Millisecond), views, back.Round(time.Millisecond))
	}) {
		t.FailNow()
	}

	k1 := ownedBy(h, p1, "node-1", "part-a", 1)[0]
	k3 := ownedBy(h, p1, "node-3", "part-b", 1)[0]
	keys := []string{k1, k3}
	// Each key's successor holds what was spent (what a cut loses is
	// bounded by the replication lag, not tested here).
	spendReplicated(h, all, map[string]int{k1: 100, k3: 100})

	f.cut(t, p3, p1, p2)
	// 12 s: each key through each node 10 times a second.
	ld := load{every: 12 * time.Second / 720, timeout: 2 * time.Second, inflight: 16}
	during := count(ld.run(h.client, 720, nil, func(i int) shot { return shot{keys[i%2], all[i/2%3]} }))
	s3, err := states(h, p3)
	if err != nil {
		t.Fatal(err)
	}
	f.heal(t)
	// Logged before the wait for agreement, so that a failure there still reports it.
	t.Logf("partition of node-3 for 12 s: admitted %d (bound 45): %s=%d (owner node-1), %s=%d (owner node-3); %v; node-3 saw %v at the end; first failure: %v",
		during.admitted, k1, during.byKey[k1], k3, during.byKey[k3], during, s3, during.firstFailure)
	if during.admitted > 45 {
		t.Errorf("%d admitted during the partition, want ≤ 45 (both keys were spent)", during.admitted)
	}
	rejoined := h.waitMembers(all, names3, 10*time.Second)

	after := count(load{timeout: 2 * time.Second, inflight: 1}.run(h.client, 180, nil, func(i int) shot { return shot{keys[i%2], all[i/2%3]} }))
	t.Logf("after the heal: one cluster again after %v (bound 10s); %d admitted (bound 0): %v", rejoined.Round(time.Millisecond), after.admitted, after)
	if after.admitted != 0 {
		t.Errorf("%d admitted after the heal, want 0", after.admitted)
	}
}

// TestFaultRollingRestart: 60 keys half spent; under a steady load every
// node in turn is stopped with SIGTERM and started again under its name and
// addresses. No key admits more than its limit over the whole test (plus
// what refilled: nothing before 36 s).
func TestFaultRollingRestart(t *testing.T) {
	bin := buildNode(t)
	h := newHarness(t)
	procs := startThree(t, h, bin, nil)
	const nkeys, spent = 60, 50
	keys := make([]string, nkeys)
	half := map[string]int{}
	for i := range keys {
		keys[i] = fmt.Sprintf("roll:%d", i)
		half[keys[i]] = spent
	}
	first := time.Now()
	spend(h, procs, half)

	// The load: 90 checks per key (5400) at 400 a second (13.5 s), key
	// round robin, at most 20 in flight, through the nodes that are up. The
	// keys run out of tokens after 50 of them, about 7.5 s in; the restarts
	// start 1 s, 5 s and 9 s in, so before, around and after that.
	const perKey, every, gap = 90, 2500 * time.Microsecond, 4 * time.Second
	var up atomic.Pointer[[]*proc]
	up.Store(new(slices.Clone(procs)))
	stop := make(chan struct{})
	var outs []outcome
	loaded := make(chan struct{})
	loadStart := time.Now()
	go func() {
		defer close(loaded)
		ld := load{every: every, timeout: 2 * time.Second, inflight: 20}
		outs = ld.run(h.client, nkeys*perKey, stop, func(i int) shot {
			ps := *up.Load()
			return shot{keys[i%nkeys], ps[i/nkeys%len(ps)]}
		})
	}()
	t.Cleanup(sync.OnceFunc(func() { close(stop); <-loaded })) // before the processes are killed

	var took []time.Duration
	var phases []string // when each restart began and ended, into the load
	for i, old := range procs {
		time.Sleep(time.Until(loadStart.Add(time.Second + time.Duration(i)*gap)))
		start := time.Now()
		others := slices.Delete(slices.Clone(procs), i, i+1)
		up.Store(&others)
		if err := old.stop(t, syscall.SIGTERM, 15*time.Second); err != nil {
			t.Errorf("%s after SIGTERM: %v, want exit status 0", old.name, err)
		}
		procs[i] = startFaultProc(t, bin, nil, restartSpec(old, others[0].gossip))
		h.waitMembers(procs, names3, 15*time.Second)
		up.Store(new(slices.Clone(procs)))
		took = append(took, time.Since(start).Round(time.Millisecond))
		phases = append(phases, fmt.Sprintf("%s %v to %v", old.name, start.Sub(loadStart).Round(time.Millisecond), time.Since(loadStart).Round(time.Millisecond)))
	}
	restarted := time.Since(loadStart)
	<-loaded
	if loadTook := time.Since(loadStart); restarted > loadTook {
		t.Errorf("the load ended %v in, before the last restart was over (%v in): the test proves nothing", loadTook, restarted)
	}

	c := count(outs)
	for i, o := range outs {
		if o.body.Degraded {
			t.Logf("degraded answer to check %d (due %v into the load; restarts %v): %s via %s, status %d, %+v",
				i, time.Duration(i)*every, phases, o.key, o.via.name, o.status, o.body)
		}
	}
	refill := int(time.Since(first) * time.Duration(faultLimit.count) / time.Hour)
	expected, worst := 0, keys[0]
	var over []string
	for _, k := range keys {
		expected += spent + min(c.checksByKey[k], int(faultLimit.count)-spent)
		if c.byKey[k] > c.byKey[worst] {
			worst = k
		}
		if spent+c.byKey[k] > int(faultLimit.count)+refill {
			over = append(over, k)
		}
	}
	t.Logf("rolling restart under load (restarts took %v): admitted %d in all, expected %d (%d keys × %d); worst key %s admitted %d in all; load after the half spend: %v; first failure: %v",
		took, nkeys*spent+c.admitted, expected, nkeys, faultLimit.count, worst, spent+c.byKey[worst], c, c.firstFailure)
	if len(over) > 0 {
		t.Errorf("%d of %d keys admitted more than %d (+%d refilled) in all, the worst %s %d", len(over), nkeys, faultLimit.count, refill, worst, spent+c.byKey[worst])
	}
}
