package main

// Multi-node tests with every node in this process: startNode on
// 127.0.0.1:0 for HTTP, gRPC and gossip, addresses read back from the
// listeners and the cluster. Load goes through the public HTTP API.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/cespare/xxhash/v2"
	"github.com/ringlimit/ringlimit/cluster"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
	"github.com/ringlimit/ringlimit/ring"

	"github.com/ringlimit/ringlimit/api"
	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/node"
)

// TestMain checks that the package's tests, the existing ones included,
// leave no goroutine behind (the multi-node tests also check it at their
// own end, with goleak.VerifyNone).
func TestMain(m *testing.M) {
	// memberlist's Shutdown does not wait for a probe in flight: its
	// goroutine ends when the probe's ack timer fires, up to one probe
	// interval later.
	testkit.Main(m)
}

// harness holds what one multi-node test shares: an HTTP client and the
// in-process nodes it started.
type harness struct {
	t      *testing.T
	client *http.Client
}

// newHarness registers, in this order, the cleanups that must run last: the
// goroutine-leak check, then closing the client's idle connections. Nodes
// started afterwards are closed before both.
func newHarness(t *testing.T) *harness {
	t.Cleanup(func() { goleak.VerifyNone(t, testkit.Ignored()...) })
	tr := &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second}
	t.Cleanup(tr.CloseIdleConnections)
	return &harness{t: t, client: &http.Client{Transport: tr}}
}

// start starts an in-process node named name on 127.0.0.1:0, joining the
// given gossip addresses, and closes it in t.Cleanup (Close is idempotent,
// so a test may close it earlier). On failure the tail of its log is
// printed.
func (h *harness) start(name string, join ...string) (*node.Node, *testkit.LogSink) {
	h.t.Helper()
	return h.startWith(name, joinArgs(join), nil)
}

// lanDetection gives an in-process node a failure detector patient
// enough for a starved CPU (2s probes with a 1s probe timeout, suspicion
// for 6 probe intervals scaled by Lifeguard up to 6 times) and keeps the
// loopback timings of everything else (joins, leaves and news spread every
// 50ms). The nodes of an in-process test share one process with the test's
// load: under -race on a busy machine their gossip goroutines wait for a
// CPU longer than the loopback timings allow (100ms probe timeout, 800ms to
// refute), and even memberlist's LAN timings (1s probes, 500ms probe
// timeout, 4 intervals of suspicion) declared live members dead mid-test.
// No in-process test crashes a node (only a process can: process_test.go),
// and a node that closes leaves at once, so none waits for the detector.
func lanDetection(c *cluster.Config) {
	c.ProbeInterval, c.ProbeTimeout = 2*time.Second, time.Second
	c.SuspicionMult, c.SuspicionMaxTimeoutMult = 6, 6
}

// patientPeers gives a node a peer deadline of 10s (and check and write
// deadlines above it), for the tests that count on every check being
// decided by its owner while 32 clients load three in-process nodes under
// -race: with the default 500ms an owner starved of CPU (busy loops on
// every core) misses the deadline and its successor stands in for it,
// which these tests report as a check decided by the wrong node.
func patientPeers(c *config) {
	c.PeerTimeout = 10 * time.Second
	c.CheckTimeout = 20 * time.Second
	c.HTTPWriteTimeout = 30 * time.Second
}

// joinArgs is the --join flag for the gossip addresses join, if any.
func joinArgs(join []string) []string {
	if len(join) == 0 {
		return nil
	}
	return []string{"--join", strings.Join(join, ",")}
}

// startWith starts an in-process node named name on 127.0.0.1:0 with the
// extra flags, tweak (if not nil) editing the parsed config, and closes it
// in t.Cleanup, printing the tail of its log if the test failed.
func (h *harness) startWith(name string, extra []string, tweak func(*config)) (*node.Node, *testkit.LogSink) {
	t := h.t
	t.Helper()
	args := append([]string{"--name", name, "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--peer", "127.0.0.1:0", "--gossip", "127.0.0.1:0"}, extra...)
	cfg, err := parseConfig(args, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ClusterTuning = lanDetection
	if tweak != nil {
		tweak(&cfg)
	}
	sink := &testkit.LogSink{}
	n, err := startNode(t.Context(), cfg, newJSONLogger(sink, cfg.logLevel))
	if err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if err := n.Close(ctx); err != nil {
			t.Errorf("close %s: %v", name, err)
		}
		if t.Failed() {
			t.Logf("last log lines of %s:\n%s", name, strings.Join(sink.Tail(40), "\n"))
		}
	})
	return n, sink
}

func newJSONLogger(w io.Writer, level slog.Level) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level}))
}

func httpAddr(n *node.Node) string { return n.HTTPAddr() }

// waitRing polls until every node's ring holds exactly names and all agree
// on the ring version, and returns how long that took.
func (h *harness) waitRing(nodes []*node.Node, names []string, timeout time.Duration) time.Duration {
	h.t.Helper()
	start := time.Now()
	deadline := start.Add(timeout)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	want := slices.Sorted(slices.Values(names))
	for {
		ok := true
		for _, n := range nodes {
			got := slices.Sorted(slices.Values(n.Router().RingMembers()))
			if !slices.Equal(got, want) || n.Router().RingVersion() != nodes[0].Router().RingVersion() {
				ok = false
				break
			}
		}
		if ok {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			var views []string
			for _, n := range nodes {
				views = append(views, fmt.Sprintf("%s: %v v%d", n.Router().Self(), n.Router().RingMembers(), n.Router().RingVersion()))
			}
			h.t.Fatalf("rings did not converge on %v within %v: %s", want, timeout, strings.Join(views, "; "))
		}
		<-tick.C
	}
}

// checkAnswer is one answer to POST /v1/check.
type checkAnswer struct {
	status  int
	body    api.CheckResponse
	latency time.Duration
}

// inlineLimit is a limit given in the check: count per per (a Go
// duration), and the failure mode ("" for the default, local).
type inlineLimit struct {
	count int64
	per   string
	mode  string
	// sync asks for replication: sync (the answer waits until the key's
	// successor acknowledged a copy made after the spend).
	sync bool
}

// storedKeys are the keys the store holds for inline checks of keys under
// l (a token bucket of l.count per l.per): each in the inline namespace
// with its limit's spec.
func storedKeys(keys []string, l inlineLimit) []string {
	per, err := time.ParseDuration(l.per)
	if err != nil {
		panic(err)
	}
	lim := bucket.MustLimit(bucket.TokenBucket, l.count, per, 0)
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = bucket.InlineKey(k, &lim)
	}
	return out
}

// checkBody is the JSON body of a check of cost 1 under l.
func checkBody(key string, l inlineLimit) string {
	mode := ""
	if l.mode != "" {
		mode = fmt.Sprintf(`,"failure_mode":%q`, l.mode)
	}
	if l.sync {
		mode += `,"replication":"sync"`
	}
	return fmt.Sprintf(`{"key":%q,"cost":1,"limit":{"limit":%d,"per":%q%s}}`, key, l.count, l.per, mode)
}

// doCheck posts one check to addr within timeout. Safe to call from any
// goroutine: it reports problems as errors.
func doCheck(client *http.Client, addr, key string, l inlineLimit, timeout time.Duration) (checkAnswer, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/v1/check", strings.NewReader(checkBody(key, l)))
	if err != nil {
		return checkAnswer{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return checkAnswer{latency: time.Since(start)}, err
	}
	defer resp.Body.Close()
	a := checkAnswer{status: resp.StatusCode}
	b, err := io.ReadAll(resp.Body)
	a.latency = time.Since(start)
	if err != nil {
		return a, err
	}
	if a.status == http.StatusOK || a.status == http.StatusTooManyRequests {
		if err := json.Unmarshal(b, &a.body); err != nil {
			return a, fmt.Errorf("status %d, body %q: %w", a.status, b, err)
		}
	}
	return a, nil
}

func getJSON(client *http.Client, url string, v any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// sumCounter adds the unlabelled counter name over the nodes' /metrics.
func (h *harness) sumCounter(addrs []string, name string) float64 {
	h.t.Helper()
	var sum float64
	for _, a := range addrs {
		m, err := testkit.Scrape(h.client, a, name)
		if err != nil {
			h.t.Fatal(err)
		}
		v, ok := m[""]
		if !ok {
			h.t.Fatalf("%s: no %s in /metrics", a, name)
		}
		sum += v
	}
	return sum
}

// job is one check to send: key to the node at addrs[node].
type job struct {
	key  string
	node int
}

// result is a job's answer.
type result struct {
	job
	checkAnswer
	err error
}

// runJobs sends jobs from workers concurrent clients and returns one result
// per job, in job order. It stops early (leaving err set on the jobs not
// sent) when deadline passes.
func runJobs(client *http.Client, addrs []string, jobs []job, l inlineLimit, workers int, deadline time.Time) []result {
	out := make([]result, len(jobs))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(jobs) {
					return
				}
				out[i].job = jobs[i]
				if time.Now().After(deadline) {
					out[i].err = errors.New("not sent: deadline passed")
					continue
				}
				out[i].checkAnswer, out[i].err = doCheck(client, addrs[jobs[i].node], jobs[i].key, l, 10*time.Second)
			}
		})
	}
	wg.Wait()
	return out
}

// TestClusterExactness: three nodes enforce the limit exactly, not three
// times it, for one hot key and for 200 keys at once, and about two thirds
// of the checks are forwarded (those that enter at a node that is not the
// key's owner).
//
// The limit is 100 per hour, so that refill (one token per 36 s) cannot add
// a token during the test; with 100 per minute a token comes back every
// 600 ms, which a slow -race run could see.
func TestClusterExactness(t *testing.T) {
	h := newHarness(t)
	n1, l1 := h.startWith("node-1", nil, patientPeers)
	n2, l2 := h.startWith("node-2", joinArgs([]string{n1.Cluster().LocalAddr()}), patientPeers)
	n3, l3 := h.startWith("node-3", joinArgs([]string{n1.Cluster().LocalAddr()}), patientPeers)
	nodes := []*node.Node{n1, n2, n3}
	logs := []*testkit.LogSink{l1, l2, l3}
	names := []string{"node-1", "node-2", "node-3"}
	addrs := []string{httpAddr(n1), httpAddr(n2), httpAddr(n3)}
	t.Logf("3 in-process nodes: ring converged in %v", h.waitRing(nodes, names, 10*time.Second))
	// The exact counts below hold only if no ring changes during the
	// phases; say so if one did (a member wrongly declared dead when the
	// machine is starved of CPU: the loopback timings are aggressive).
	ringChanges := func() (n int) {
		for _, l := range logs {
			n += len(l.Records("ring changed"))
		}
		return n
	}
	// A node applies a ring before it logs "ring changed": wait until each
	// node's last such line names the ring it has, so that a change made
	// before a phase is not counted in it.
	logsCaughtUp := func() error {
		for i, l := range logs {
			recs := l.Records("ring changed")
			if len(recs) == 0 {
				return fmt.Errorf("%s has logged no ring yet", names[i])
			}
			var logged []string
			for _, m := range recs[len(recs)-1]["members"].([]any) {
				logged = append(logged, m.(string))
			}
			if has := slices.Sorted(slices.Values(nodes[i].Router().RingMembers())); !slices.Equal(slices.Sorted(slices.Values(logged)), has) {
				return fmt.Errorf("%s logged the ring %v last, has %v", names[i], logged, has)
			}
		}
		return nil
	}

	// 100 a day: no key refills a token before a phase's deadline (at 100
	// an hour one comes back every 36 s, which the 200-key phase reaches
	// under -race on a loaded machine, and every key then admits 101).
	// The deadline bounds a stuck phase: the 200-key phase takes about 20s
	// on an idle machine, and over 90s with busy loops on every core.
	const limit, per, workers, phaseDeadline = 100, "24h", 32, 5 * time.Minute
	owner := func(key string) string {
		o, _ := n1.Router().Owner(key)
		return o
	}
	// phase sends jobs, checks what every answer must satisfy and the
	// forwarding metrics, and returns the admitted count per key.
	phase := func(label string, jobs []job) (admitted map[string]int) {
		t.Helper()
		testkit.WaitFor(t, 10*time.Second, "every node's log names its ring", logsCaughtUp)
		changesBefore := ringChanges()
		defer func() {
			if n := ringChanges() - changesBefore; n != 0 {
				t.Errorf("%s: the ring changed %d times during the phase", label, n)
				for i, l := range logs {
					for _, r := range l.Records("cluster: member departed") {
						t.Logf("%s: %v", names[i], r)
					}
				}
			}
		}()
		fwdBefore := h.sumCounter(addrs, "ringlimit_forward_checks_total")
		rpcBefore := h.sumCounter(addrs, "ringlimit_forward_rpcs_total")
		start := time.Now()
		res := runJobs(h.client, addrs, jobs, inlineLimit{count: limit, per: per}, workers, time.Now().Add(phaseDeadline))
		took := time.Since(start)
		admitted = map[string]int{}
		rejected, viaOther := 0, 0
		for _, r := range res {
			if r.err != nil {
				t.Fatalf("%s: check %q via %s: %v", label, r.key, names[r.node], r.err)
			}
			switch r.status {
			case http.StatusOK:
				admitted[r.key]++
			case http.StatusTooManyRequests:
				rejected++
			default:
				t.Fatalf("%s: check %q via %s: status %d", label, r.key, names[r.node], r.status)
			}
			if want := owner(r.key); r.body.Owner != want || r.body.Degraded {
				t.Fatalf("%s: check %q via %s decided by %q (degraded %v), want owner %s", label, r.key, names[r.node], r.body.Owner, r.body.Degraded, want)
			}
			if r.body.Owner != names[r.node] {
				viaOther++
			}
		}
		fwd := h.sumCounter(addrs, "ringlimit_forward_checks_total") - fwdBefore
		rpcs := h.sumCounter(addrs, "ringlimit_forward_rpcs_total") - rpcBefore
		if int(fwd) != viaOther {
			t.Errorf("%s: ringlimit_forward_checks_total grew by %v over the nodes, want %d (the checks that entered at a non-owner)", label, fwd, viaOther)
		}
		if frac := float64(viaOther) / float64(len(jobs)); frac < 0.6 || frac > 0.73 {
			t.Errorf("%s: %d of %d checks forwarded (%.3f), want about 2/3", label, viaOther, len(jobs), frac)
		}
		t.Logf("%s: %d checks in %v (%.0f/s) from %d clients: %d rejected; forwarded %v (%.1f%%) in %v RPCs: batching factor %.2f",
			label, len(jobs), took.Round(time.Millisecond), float64(len(jobs))/took.Seconds(), workers, rejected,
			fwd, 100*fwd/float64(len(jobs)), rpcs, fwd/max(rpcs, 1))
		return admitted
	}

	// One hot key, 1,000 checks round-robin over the three nodes.
	hot := make([]job, 1000)
	for i := range hot {
		hot[i] = job{key: "exact:hot", node: i % 3}
	}
	admitted := phase("1 key", hot)
	if admitted["exact:hot"] != 100 {
		t.Fatalf("1 key: %d of 1000 checks admitted, want exactly 100 (900 rejected)", admitted["exact:hot"])
	}

	// 200 keys at once, 150 checks each, interleaved so that every key is
	// hit by every node in turn (200 ≡ 2 mod 3).
	const keys, perKey = 200, 150
	many := make([]job, 0, keys*perKey)
	for i := range keys * perKey {
		many = append(many, job{key: fmt.Sprintf("exact:%03d", i%keys), node: i % 3})
	}
	admitted = phase("200 keys", many)
	byOwner := map[string]int{}
	for k := range keys {
		key := fmt.Sprintf("exact:%03d", k)
		byOwner[owner(key)]++
		if admitted[key] != 100 {
			t.Errorf("200 keys: %s admitted %d of %d, want exactly 100", key, admitted[key], perKey)
		}
	}
	t.Logf("200 keys: owners %v", byOwner)
	if len(byOwner) != 3 {
		t.Errorf("200 keys all owned by %v: the ring does not spread keys", byOwner)
	}
}

// TestClusterJoinAndLeave: a third node joins two that already hold state
// for 300 keys; the keys it now owns are handed to it with their spent
// tokens, and handed back when it leaves. No key is refilled on the way.
func TestClusterJoinAndLeave(t *testing.T) {
	h := newHarness(t)
	h.validateOpenAPI()
	n1, _ := h.startWith("node-1", nil, patientPeers)
	n2, _ := h.startWith("node-2", joinArgs([]string{n1.Cluster().LocalAddr()}), patientPeers)
	two := []*node.Node{n1, n2}
	h.waitRing(two, []string{"node-1", "node-2"}, 10*time.Second)
	byName := map[string]*node.Node{"node-1": n1, "node-2": n2}

	const limit, per, nkeys = 10, "1h", 300
	keys := make([]string, nkeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("jl:%03d", i)
	}
	// sweep sends one check per key, round-robin over nodes, and returns
	// the answers in key order; every answer must be a 200 from the key's
	// owner with wantRemaining left.
	sweep := func(label string, nodes []*node.Node, wantRemaining int64) {
		t.Helper()
		addrs := make([]string, len(nodes))
		for i, n := range nodes {
			addrs[i] = httpAddr(n)
		}
		jobs := make([]job, len(keys))
		for i, k := range keys {
			jobs[i] = job{key: k, node: i % len(nodes)}
		}
		for _, r := range runJobs(h.client, addrs, jobs, inlineLimit{count: limit, per: per}, 16, time.Now().Add(time.Minute)) {
			if r.err != nil {
				t.Fatalf("%s: %s via %s: %v", label, r.key, nodes[r.node].Router().Self(), r.err)
			}
			want, _ := nodes[0].Router().Owner(r.key)
			if r.status != http.StatusOK || r.body.Remaining != wantRemaining || r.body.Owner != want || r.body.Degraded {
				t.Errorf("%s: %s via %s: %d %+v, want 200 with remaining %d from %s",
					label, r.key, nodes[r.node].Router().Self(), r.status, r.body, wantRemaining, want)
			}
		}
	}
	// Spend 3 of 10 tokens on every key (remaining 7).
	for spent := range 3 {
		sweep(fmt.Sprintf("2 nodes, spend %d", spent+1), two, limit-int64(spent)-1)
	}
	before := map[string]string{}
	for _, k := range keys {
		before[k], _ = n1.Router().Owner(k)
	}
	v2 := n1.Router().RingVersion()

	// node-3 joins.
	start := time.Now()
	n3, _ := h.startWith("node-3", joinArgs([]string{n1.Cluster().LocalAddr()}), patientPeers)
	byName["node-3"] = n3
	three := []*node.Node{n1, n2, n3}
	h.waitRing(three, []string{"node-1", "node-2", "node-3"}, 10*time.Second)
	t.Logf("node-3 joined: every ring at version %d after %v", n3.Router().RingVersion(), time.Since(start).Round(time.Millisecond))
	h.checkOwnersAgree(three, keys)
	h.checkRingAgrees(three, keys)
	var moved []string
	for _, k := range keys {
		now, _ := n1.Router().Owner(k)
		switch {
		case now == "node-3":
			moved = append(moved, k)
		case now != before[k]:
			t.Errorf("%s moved from %s to %s when node-3 joined: only keys going to node-3 may move", k, before[k], now)
		}
	}
	if len(moved) < nkeys/6 || len(moved) > nkeys/2 {
		t.Fatalf("%d of %d keys moved to node-3, want about a third", len(moved), nkeys)
	}
	// The old owners push the state; wait for it before any check reaches
	// node-3 (a check would fetch the state itself during the grace period).
	h.waitHeld(n3, storedKeys(moved, inlineLimit{count: limit, per: per}), true, 10*time.Second)
	t.Logf("node-3 holds the %d keys it owns %v after it started", len(moved), time.Since(start).Round(time.Millisecond))
	sweep("3 nodes", three, limit-4) // not refilled: 7 left before this check
	// The previous owners drop their copies after the grace period.
	for _, name := range []string{"node-1", "node-2"} {
		var gave []string
		for _, k := range moved {
			if before[k] == name {
				gave = append(gave, k)
			}
		}
		h.waitHeld(byName[name], storedKeys(gave, inlineLimit{count: limit, per: per}), false, 15*time.Second)
	}
	t.Logf("previous owners dropped their copies %v after node-3 started", time.Since(start).Round(time.Millisecond))
	// Now every key is held by its owner only, and /v1/cluster (which asks
	// every member) says so.
	var st api.ClusterStatus
	if err := getJSON(h.client, "http://"+httpAddr(n2)+"/v1/cluster", &st); err != nil {
		t.Fatal(err)
	}
	owned := map[string]int64{}
	for _, k := range keys {
		o, _ := n2.Router().Owner(k)
		owned[o]++
	}
	if len(st.Members) != 3 {
		t.Errorf("/v1/cluster on node-2: %+v, want 3 members", st)
	}
	for _, m := range st.Members {
		if m.State != "alive" || !m.OnRing || m.Keys != owned[m.Name] {
			t.Errorf("/v1/cluster on node-2: %+v, want alive on the ring with %d keys", m, owned[m.Name])
		}
	}

	// node-3 leaves gracefully.
	start = time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := n3.Close(ctx); err != nil {
		t.Fatalf("node-3 close: %v", err)
	}
	closed := time.Since(start)
	h.waitRing(two, []string{"node-1", "node-2"}, 10*time.Second)
	if v := n1.Router().RingVersion(); v != v2 {
		t.Errorf("ring version %d after node-3 left, want %d as before it joined", v, v2)
	}
	for _, name := range []string{"node-1", "node-2"} {
		var back []string
		for _, k := range moved {
			if before[k] == name {
				back = append(back, k)
			}
		}
		h.waitHeld(byName[name], storedKeys(back, inlineLimit{count: limit, per: per}), true, 10*time.Second)
	}
	t.Logf("node-3 left: Close took %v, rings back to 2 members and keys back with their owners %v after Close began",
		closed.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	h.checkOwnersAgree(two, keys)
	h.checkRingAgrees(two, keys)
	for _, k := range keys {
		if now, _ := n2.Router().Owner(k); now != before[k] {
			t.Errorf("%s owned by %s after node-3 left, want %s as before it joined", k, now, before[k])
		}
	}
	sweep("2 nodes again", two, limit-5)
}

// checkOwnersAgree asks GET /v1/owner on every node for every key and
// expects one answer per key, the router's, at one ring version.
func (h *harness) checkOwnersAgree(nodes []*node.Node, keys []string) {
	h.t.Helper()
	for _, k := range keys {
		var first api.OwnerResponse
		for i, n := range nodes {
			var o api.OwnerResponse
			if err := getJSON(h.client, "http://"+httpAddr(n)+"/v1/owner?key="+k, &o); err != nil {
				h.t.Fatal(err)
			}
			if want, v := n.Router().Owner(k); o.Key != k || o.Owner != want || o.RingVersion != v {
				h.t.Fatalf("%s: /v1/owner?key=%s = %+v, its router says %s at %d", n.Router().Self(), k, o, want, v)
			}
			if i == 0 {
				first = o
			} else if o != first {
				h.t.Fatalf("/v1/owner?key=%s: %s says %+v, %s says %+v", k, nodes[0].Router().Self(), first, n.Router().Self(), o)
			}
		}
	}
}

// checkRingAgrees asks GET /v1/ring on every node: all answer the same
// ring, with every member's share of the partitions, and each key's
// partition, xxhash64(key) mod the partitions, is owned by the key's owner.
func (h *harness) checkRingAgrees(nodes []*node.Node, keys []string) {
	h.t.Helper()
	var first api.RingStatus
	for i, n := range nodes {
		var st api.RingStatus
		if err := getJSON(h.client, "http://"+httpAddr(n)+"/v1/ring", &st); err != nil {
			h.t.Fatal(err)
		}
		if v := n.Router().RingVersion(); st.Version != v || len(st.Owners) != ring.DefaultPartitions || len(st.Members) != len(nodes) {
			h.t.Fatalf("%s: /v1/ring at version %d, %d partitions, members %+v; want version %d, %d partitions, %d members",
				n.Router().Self(), st.Version, len(st.Owners), st.Members, v, ring.DefaultPartitions, len(nodes))
		}
		total := 0
		for _, m := range st.Members {
			total += m.Partitions
			if m.Share != float64(m.Partitions)/ring.DefaultPartitions {
				h.t.Errorf("%s: /v1/ring member %+v: share is not partitions/%d", n.Router().Self(), m, ring.DefaultPartitions)
			}
		}
		if total != ring.DefaultPartitions {
			h.t.Errorf("%s: /v1/ring members own %d partitions, want %d", n.Router().Self(), total, ring.DefaultPartitions)
		}
		for _, k := range keys {
			p := xxhash.Sum64String(k) % uint64(len(st.Owners))
			if got, want := st.Members[st.Owners[p]].Name, mustOwner(n, k); got != want {
				h.t.Fatalf("%s: /v1/ring gives %s partition %d, owned by %s; the router says %s", n.Router().Self(), k, p, got, want)
			}
		}
		if i == 0 {
			first = st
		} else if !reflect.DeepEqual(st, first) {
			h.t.Fatalf("/v1/ring: %s and %s answer different rings", nodes[0].Router().Self(), n.Router().Self())
		}
	}
}

func mustOwner(n *node.Node, key string) string {
	o, _ := n.Router().Owner(key)
	return o
}

// waitHeld polls until n's store holds (held) or no longer holds (!held)
// every key.
func (h *harness) waitHeld(n *node.Node, keys []string, held bool, timeout time.Duration) {
	h.t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		var wrong []string
		for _, k := range keys {
			if n.Store().Has(k) != held {
				wrong = append(wrong, k)
			}
		}
		if len(wrong) == 0 {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("%s: after %v, held=%v still wrong for %d of %d keys, e.g. %v",
				n.Router().Self(), timeout, held, len(wrong), len(keys), wrong[:min(len(wrong), 5)])
		}
		<-tick.C
	}
}

// TestClusterRollingRestart is the handoff test: every one of 300 keys has
// spent its whole budget (10 per hour); then each of the three nodes in
// turn leaves gracefully and is replaced by a new in-process node of the
// same name (new ports), while clients keep checking random keys on random
// live nodes. Not one check may be admitted, during or after the restart.
//
// The checks say failure_mode fail_closed, so that an answer is admitted
// only by an owner that lost the key's state: with the default (local), a
// peer call that times out on a starved machine is decided by a fresh
// local bucket (limit / members), which is that mode's documented
// behaviour, not a handoff failure. Degraded answers are counted.
//
// Without handoff it fails: when node-1 leaves, the keys it owned (about a
// third) go to node-2 and node-3, which have no state for them, so the
// sweep that follows every step (each key checked once) finds them full and
// admits. Handoff is the push of every bucket by the leaving node
// (Router.Leave), the push by old owners after a join, and the fetch from
// the previous owner during the grace period; disabling the push and the
// fetch in a scratch copy of the repository made this test fail with
// thousands of admitted checks, from the first step on.
func TestClusterRollingRestart(t *testing.T) {
	h := newHarness(t)
	names := []string{"node-1", "node-2", "node-3"}
	nodes := map[string]*node.Node{}
	var sinks []*testkit.LogSink // of every node started, for the diagnostics
	start := func(name string, join ...string) {
		n, l := h.startWith(name, joinArgs(join), patientPeers)
		nodes[name] = n
		sinks = append(sinks, l)
	}
	start("node-1")
	start("node-2", nodes["node-1"].Cluster().LocalAddr())
	start("node-3", nodes["node-1"].Cluster().LocalAddr())
	liveNodes := func(except string) []*node.Node {
		var out []*node.Node
		for _, name := range names {
			if name != except {
				out = append(out, nodes[name])
			}
		}
		return out
	}
	h.waitRing(liveNodes(""), names, 10*time.Second)

	const limit, per, nkeys = 10, "1h", 300
	ll := inlineLimit{count: limit, per: per, mode: "fail_closed"}
	keys := make([]string, nkeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("rr:%03d", i)
	}
	// Spend every token: 10 checks per key, all admitted by the owner.
	addrs := []string{httpAddr(nodes["node-1"]), httpAddr(nodes["node-2"]), httpAddr(nodes["node-3"])}
	var spend []job
	for i := range limit * nkeys {
		spend = append(spend, job{key: keys[i%nkeys], node: i % 3})
	}
	// 3,000 checks: about 3 s idle; the deadline allows for a starved CPU.
	for _, r := range runJobs(h.client, addrs, spend, ll, 8, time.Now().Add(2*time.Minute)) {
		if r.err != nil || r.status != http.StatusOK || r.body.Degraded {
			t.Fatalf("spending %s via %s: %d %+v %v", r.key, names[r.node], r.status, r.body, r.err)
		}
	}

	// From here on, every check on these keys must be rejected.
	type admittedCheck struct {
		key, node string
		at        time.Duration
		body      api.CheckResponse
	}
	var (
		mu       sync.Mutex
		admitted []admittedCheck
		statuses = map[int]int{}
		degraded int
		errs     int
		firstErr error
		sent     atomic.Int64
	)
	t0 := time.Now()
	live := atomic.Pointer[map[string]string]{} // node name → HTTP address
	setLive := func(except string) {
		m := map[string]string{}
		for _, n := range liveNodes(except) {
			m[n.Router().Self()] = httpAddr(n)
		}
		live.Store(&m)
	}
	record := func(key, name string, a checkAnswer, err error) {
		sent.Add(1)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			errs++
			if firstErr == nil {
				firstErr = fmt.Errorf("%s via %s: %w", key, name, err)
			}
			return
		}
		statuses[a.status]++
		if a.body.Degraded {
			degraded++
		}
		if a.status == http.StatusOK {
			admitted = append(admitted, admittedCheck{key, name, time.Since(t0), a.body})
		}
	}
	// sweep checks every key once on a random live node.
	reported := 0
	sweep := func(label string) {
		t.Helper()
		m := *live.Load()
		var names, addrs []string
		for name, addr := range m {
			names = append(names, name)
			addrs = append(addrs, addr)
		}
		jobs := make([]job, len(keys))
		for i, k := range keys {
			jobs[i] = job{key: k, node: rand.IntN(len(addrs))}
		}
		for _, r := range runJobs(h.client, addrs, jobs, ll, 8, time.Now().Add(20*time.Second)) {
			record(r.key, names[r.node], r.checkAnswer, r.err)
		}
		mu.Lock()
		n := len(admitted)
		mu.Unlock()
		if n > reported {
			t.Errorf("%s: %d checks admitted so far", label, n)
			reported = n
		}
	}
	setLive("")
	sweep("after spending")

	// Background load: a few clients on random keys and random live nodes,
	// bounded in count and time.
	const loaders, maxPerLoader = 3, 20000
	loadDeadline := time.Now().Add(60 * time.Second)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range loaders {
		wg.Go(func() {
			for i := 0; i < maxPerLoader && time.Now().Before(loadDeadline); i++ {
				select {
				case <-stop:
					return
				default:
				}
				m := *live.Load()
				pick := rand.IntN(len(m))
				for name, addr := range m {
					if pick--; pick < 0 {
						key := keys[rand.IntN(len(keys))]
						a, err := doCheck(h.client, addr, key, ll, 5*time.Second)
						record(key, name, a, err)
						break
					}
				}
			}
		})
	}
	stopLoad := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer stopLoad()

	for i, name := range names {
		// Stop it: clients stop sending to it first (as a load balancer
		// would), then it leaves and hands its buckets off.
		setLive(name)
		begin := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		err := nodes[name].Close(ctx)
		cancel()
		if err != nil {
			t.Fatalf("close %s: %v", name, err)
		}
		closeTook := time.Since(begin)
		rest := liveNodes(name)
		var restNames []string
		for _, n := range rest {
			restNames = append(restNames, n.Router().Self())
		}
		h.waitRing(rest, restNames, 10*time.Second)
		left := time.Since(begin)
		sweep(name + " stopped")

		// Its replacement joins through a node that stayed up; clients
		// send to it once every ring has it.
		begin = time.Now()
		start(name, rest[0].Cluster().LocalAddr())
		h.waitRing(liveNodes(""), names, 10*time.Second)
		joined := time.Since(begin)
		setLive("")
		sweep(name + " restarted")
		t.Logf("step %d: %s Close %v, rings without it %v after Close began; new %s on every ring %v after start; %d checks so far",
			i+1, name, closeTook.Round(time.Millisecond), left.Round(time.Millisecond), name, joined.Round(time.Millisecond), sent.Load())
	}
	stopLoad()
	sweep("after the rolling restart")

	// A member declared dead (rather than left) means the failure detector
	// misfired: the loopback timings (100 ms probe timeout) do on a machine
	// starved of CPU. The ring then flaps, two owners spend the same key,
	// and merging keeps the larger spend, not the sum: that over-admits
	// for reasons other than the graceful handoff under test.
	var falseDeaths []string
	for _, l := range sinks {
		for _, r := range l.Records("cluster: member departed") {
			if r["state"] == "dead" {
				falseDeaths = append(falseDeaths, fmt.Sprintf("%v declared dead at %v", r["member"], r["time"]))
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("rolling restart: %d checks on the %d exhausted keys over %v: %d admitted, %d rejected (429, %d of them degraded: owner unreachable), statuses %v, %d client errors (first: %v); members wrongly declared dead: %d",
		sent.Load(), nkeys, time.Since(t0).Round(time.Millisecond), len(admitted), statuses[http.StatusTooManyRequests], degraded,
		statuses, errs, firstErr, len(falseDeaths))
	for i, a := range admitted {
		if i == 20 {
			t.Errorf("... and %d more admitted", len(admitted)-i)
			break
		}
		t.Errorf("admitted %s via %s at %s (+%v): %+v", a.key, a.node, t0.Add(a.at).Format("15:04:05.000"), a.at.Round(time.Millisecond), a.body)
	}
	if len(admitted) > 0 && len(falseDeaths) > 0 {
		t.Errorf("the failure detector misfired during the test (%v): admissions may come from ring flaps, not from the handoff", falseDeaths)
	}
}

// TestDeadSeedInProcess: a node whose only seed is a closed port starts,
// keeps retrying the join, and until it is in a cluster owns no key: it
// answers every check in the check's failure mode (local: half the limit,
// since it has at least one other member) and is not ready. A node that
// joins it makes it a member, and it owns keys from then on. Close returns
// nil.
func TestDeadSeedInProcess(t *testing.T) {
	h := newHarness(t)
	seed := testkit.DeadAddr(t)
	n, logs := h.start("lonely", seed)
	resp, err := h.client.Get("http://" + httpAddr(n) + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(b) != "ok\n" {
		t.Fatalf("/healthz: %d %q", resp.StatusCode, b)
	}
	attempts := waitJoinAttempts(t, logs, 2, 10*time.Second)
	if err := n.Ready(); err == nil {
		t.Error("ready with its only seed unreachable")
	}
	local := inlineLimit{count: 4, per: "1h"}
	for i, want := range []int{200, 200, 429} {
		a, err := doCheck(h.client, httpAddr(n), "dead-seed", local, 5*time.Second)
		if err != nil || a.status != want || a.body.Owner != "lonely" || !a.body.Degraded {
			t.Fatalf("local check %d: %d %+v %v, want %d, degraded, from lonely", i, a.status, a.body, err, want)
		}
	}
	a, err := doCheck(h.client, httpAddr(n), "closed", inlineLimit{count: 4, per: "1h", mode: "fail_closed"}, 5*time.Second)
	if err != nil || a.status != 429 || !a.body.Degraded {
		t.Fatalf("fail_closed check: %d %+v %v, want 429, degraded", a.status, a.body, err)
	}
	t.Logf("%d join attempts logged before a member joined", attempts)

	other, _ := h.start("other", n.Cluster().LocalAddr())
	h.waitRing([]*node.Node{n, other}, []string{"lonely", "other"}, 10*time.Second)
	if !n.Cluster().Joined() {
		t.Error("lonely: not joined once other joined it")
	}
	fresh := inlineLimit{count: 4, per: "1h", mode: "fail_closed"}
	for i, node := range []*node.Node{n, other, n, other, n} {
		want := 200
		if i == 4 {
			want = 429
		}
		a, err := doCheck(h.client, httpAddr(node), "joined", fresh, 5*time.Second)
		if err != nil || a.status != want || a.body.Degraded {
			t.Fatalf("check %d after the join, via %s: %d %+v %v, want %d, not degraded", i, node.Router().Self(), a.status, a.body, err, want)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// waitJoinAttempts polls logs until they show at least n failed join
// attempts, and returns how many they show.
func waitJoinAttempts(t *testing.T, logs *testkit.LogSink, n int, timeout time.Duration) (got int) {
	t.Helper()
	testkit.WaitFor(t, timeout, fmt.Sprintf("%d failed join attempts logged", n), func() error {
		if got = len(logs.Records("cluster: join failed, will retry")); got < n {
			return fmt.Errorf("%d logged", got)
		}
		return nil
	})
	return got
}
