package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/ringlimit/ringlimit/api"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
)

// testDNS is a DNS server on 127.0.0.1 for one zone: an SRV name whose
// targets are the nodes, each target's A record, and the zone's own name
// with every node's address (what a Kubernetes headless Service answers).
type testDNS struct {
	addr    string
	srvName string
	zone    string
	server  *dns.Server

	mu      sync.Mutex
	targets map[string]srvTarget // by host name (absolute)
	queries int
}

type srvTarget struct {
	ip   string
	port uint16
}

func startDNS(t *testing.T, zone string) *testDNS {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &testDNS{addr: pc.LocalAddr().String(), zone: dns.Fqdn(zone), srvName: "_gossip._tcp." + dns.Fqdn(zone),
		targets: map[string]srvTarget{}}
	d.server = &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(d.serve)}
	started := make(chan struct{})
	d.server.NotifyStartedFunc = func() { close(started) }
	go d.server.ActivateAndServe()
	<-started
	t.Cleanup(func() { d.server.Shutdown() })
	return d
}

// set makes host (within the zone) a target of the SRV name at ip:port.
func (d *testDNS) set(host, ip string, port int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.targets[host+"."+d.zone] = srvTarget{ip: ip, port: uint16(port)}
}

func (d *testDNS) serve(w dns.ResponseWriter, req *dns.Msg) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.queries++
	m := new(dns.Msg)
	m.SetReply(req)
	m.Authoritative = true
	hosts := slices.Sorted(func(yield func(string) bool) {
		for h := range d.targets {
			if !yield(h) {
				return
			}
		}
	})
	a := func(name, ip string) dns.RR {
		return &dns.A{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 1}, A: net.ParseIP(ip)}
	}
	for _, q := range req.Question {
		name := strings.ToLower(q.Name)
		switch {
		case name == d.srvName && q.Qtype == dns.TypeSRV:
			for _, h := range hosts {
				tg := d.targets[h]
				m.Answer = append(m.Answer, &dns.SRV{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeSRV, Class: dns.ClassINET, Ttl: 1},
					Priority: 0, Weight: 10, Port: tg.port, Target: h})
				m.Extra = append(m.Extra, a(h, tg.ip))
			}
		case name == d.zone && q.Qtype == dns.TypeA:
			for _, h := range hosts {
				m.Answer = append(m.Answer, a(q.Name, d.targets[h].ip))
			}
		case q.Qtype == dns.TypeA:
			if tg, ok := d.targets[name]; ok {
				m.Answer = append(m.Answer, a(q.Name, tg.ip))
			} else if name != d.srvName {
				m.Rcode = dns.RcodeNameError
			}
		default: // AAAA and the rest: no data
			if _, ok := d.targets[name]; !ok && name != d.zone && name != d.srvName {
				m.Rcode = dns.RcodeNameError
			}
		}
	}
	w.WriteMsg(m)
}

// readyWatch polls a node's /readyz every 20ms and keeps the sequence of
// answers, consecutive repeats collapsed: "503", "200", or "down" when
// nothing answers.
type readyWatch struct {
	mu       sync.Mutex
	seq      []string
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
}

// watchReady polls url until finish, limit, or the end of the test (a
// test that fails first leaves no poller behind).
func watchReady(t *testing.T, client *http.Client, url string, limit time.Duration) *readyWatch {
	w := &readyWatch{stop: make(chan struct{}), done: make(chan struct{})}
	t.Cleanup(func() { w.finish() })
	go func() {
		defer close(w.done)
		deadline := time.After(limit)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			got := "down"
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if resp, err := client.Do(req); err == nil {
				got = strconv.Itoa(resp.StatusCode)
				resp.Body.Close()
			}
			cancel()
			w.mu.Lock()
			if len(w.seq) == 0 || w.seq[len(w.seq)-1] != got {
				w.seq = append(w.seq, got)
			}
			w.mu.Unlock()
			select {
			case <-w.stop:
				return
			case <-deadline:
				return
			case <-tick.C:
			}
		}
	}()
	return w
}

func (w *readyWatch) last() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.seq) == 0 {
		return ""
	}
	return w.seq[len(w.seq)-1]
}

func (w *readyWatch) finish() []string {
	w.stopOnce.Do(func() { close(w.stop) })
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.seq)
}

// deployNode is one node of TestDeployBindAllAdvertiseDNS: every listener
// on 0.0.0.0, advertised at ip.
type deployNode struct {
	name, ip                 string
	http, grpc, peer, gossip int
}

func (d deployNode) addr(port int) string { return net.JoinHostPort(d.ip, strconv.Itoa(port)) }

// TestDeployBindAllAdvertiseDNS runs three node processes the way a
// Kubernetes StatefulSet does: every listener binds 0.0.0.0, each node
// advertises its own address (127.0.0.1, .2, .3) and finds the others
// through one DNS name (an SRV name served by a DNS server in this test,
// as a headless Service's is). Then node-3 is killed and comes back under
// the same name from a new address (127.0.0.4): the cluster has three
// alive members again within 5s. /readyz follows node-3 through its start
// (503, then 200), its drain (503 while it still serves) and its stop.
func TestDeployBindAllAdvertiseDNS(t *testing.T) {
	bin := buildNode(t)
	h := newHarness(t)
	dir := t.TempDir()
	p := testkit.NewPKI(t, dir, "deploy")
	ca := filepath.Join(dir, "deploy-ca.pem")
	keys := filepath.Join(dir, "gossip.keys")
	writeKeys(t, keys, newTestKey(t))
	zone := "ringlimit.test"
	d := startDNS(t, zone)

	nodes := make([]deployNode, 3)
	for i := range nodes {
		nodes[i] = deployNode{name: fmt.Sprintf("node-%d", i+1), ip: fmt.Sprintf("127.0.0.%d", i+1),
			http: freePort(t), grpc: freePort(t), peer: freePort(t), gossip: freePort(t)}
		d.set(nodes[i].name, nodes[i].ip, nodes[i].gossip)
	}
	start := func(n deployNode) *proc {
		t.Helper()
		all := func(port int) string { return "0.0.0.0:" + strconv.Itoa(port) }
		return startFaultProc(t, bin, nil, procSpec{name: n.name, http: all(n.http), grpc: all(n.grpc), peer: all(n.peer), gossip: all(n.gossip),
			join:  []string{"_gossip._tcp." + zone},
			extra: append(secureFlags(p, ca, keys, n.name), "--advertise-host", n.ip, "--resolver", d.addr, "--drain-delay", "1s")})
	}
	// alive is the members p's /v1/cluster lists alive, by name, with
	// their advertised addresses.
	alive := func(at deployNode) (map[string]api.ClusterMember, error) {
		var st api.ClusterStatus
		if err := getJSON(h.client, "http://"+at.addr(at.http)+"/v1/cluster", &st); err != nil {
			return nil, err
		}
		out := map[string]api.ClusterMember{}
		for _, m := range st.Members {
			if m.State == "alive" {
				out[m.Name] = m
			}
		}
		return out, nil
	}
	// converged reports nil once every node in at lists exactly the nodes
	// in want alive, at their advertised addresses.
	converged := func(at, want []deployNode) error {
		for _, n := range at {
			got, err := alive(n)
			if err != nil {
				return fmt.Errorf("%s: %w", n.name, err)
			}
			if len(got) != len(want) {
				return fmt.Errorf("%s lists %d alive members, want %d", n.name, len(got), len(want))
			}
			for _, w := range want {
				m := got[w.name]
				wantM := api.ClusterMember{Name: w.name, HTTP: w.addr(w.http), GRPC: w.addr(w.grpc), Peer: w.addr(w.peer),
					Gossip: w.addr(w.gossip), State: "alive", OnRing: true, Keys: m.Keys}
				if m != wantM {
					return fmt.Errorf("%s lists %s as %+v, want %+v", n.name, w.name, m, wantM)
				}
			}
		}
		return nil
	}

	watch3 := watchReady(t, h.client, "http://"+nodes[2].addr(nodes[2].http)+"/readyz", 60*time.Second)
	procs := []*proc{start(nodes[0]), start(nodes[1]), start(nodes[2])}
	testkit.WaitFor(t, 15*time.Second, "three nodes on 0.0.0.0 find each other by DNS", func() error { return converged(nodes, nodes) })
	for _, n := range nodes {
		testkit.WaitFor(t, 5*time.Second, n.name+" ready", func() error { return expectStatus(h.client, "http://"+n.addr(n.http)+"/readyz", 200) })
	}
	// The watcher polls on its own; under load its last poll may predate
	// node-3's readiness.
	testkit.WaitFor(t, 5*time.Second, "node-3's /readyz watcher sees 200", func() error { return watchIs(watch3, "200") })

	// Checks through every node's advertised address: exactly the limit.
	admitted := 0
	for i := range 9 {
		n := nodes[i%3]
		code, _, err := postJSON(h.client, "http://"+n.addr(n.http)+"/v1/check", checkBody("deploy:k", inlineLimit{count: 5, per: "1h"}))
		if err != nil {
			t.Fatal(err)
		}
		if code == 200 {
			admitted++
		}
	}
	if admitted != 5 {
		t.Errorf("a limit of 5 admitted %d of 9 checks through the three nodes, want 5", admitted)
	}

	// kill -9 node-3; it comes back as node-3 from 127.0.0.4, and the DNS
	// name now points there.
	if err := procs[2].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-procs[2].exited
	testkit.WaitFor(t, 2*time.Second, "node-3's /readyz down after kill -9", func() error { return watchIs(watch3, "down") })
	seqBefore := watch3.finish()
	if want := []string{"down", "503", "200", "down"}; !slices.Equal(seqBefore, want) {
		t.Errorf("node-3's /readyz went %v through start and kill -9, want %v", seqBefore, want)
	}
	moved := nodes[2]
	moved.ip = "127.0.0.4"
	d.set(moved.name, moved.ip, moved.gossip)
	watch4 := watchReady(t, h.client, "http://"+moved.addr(moved.http)+"/readyz", 60*time.Second)
	restarted := time.Now() // the process's own start included
	p3 := start(moved)
	now := []deployNode{nodes[0], nodes[1], moved}
	testkit.WaitFor(t, 5*time.Second, "three alive members again, node-3 at its new address", func() error { return converged(now, now) })
	t.Logf("three alive members again %v after node-3 restarted from a new address", time.Since(restarted).Round(time.Millisecond))
	testkit.WaitFor(t, 5*time.Second, "node-3 ready again", func() error { return watchIs(watch4, "200") })

	// Drain: SIGTERM; /readyz answers 503 and gRPC health NOT_SERVING at
	// once, while the node still serves (/healthz 200) for --drain-delay.
	conn, err := grpc.NewClient(moved.addr(moved.grpc), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	testkit.WaitFor(t, 2*time.Second, "gRPC health SERVING before the drain", func() error {
		if st := healthStatus(t, hc); st != healthpb.HealthCheckResponse_SERVING {
			return fmt.Errorf("gRPC health = %v", st)
		}
		return nil
	})
	if err := p3.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 2*time.Second, "node-3 not ready once draining", func() error { return watchIs(watch4, "503") })
	if err := expectStatus(h.client, "http://"+moved.addr(moved.http)+"/healthz", 200); err != nil {
		t.Errorf("while draining: %v", err)
	}
	if st := healthStatus(t, hc); st != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("gRPC health while draining = %v, want NOT_SERVING", st)
	}
	select {
	case <-p3.exited:
		if p3.err != nil {
			t.Errorf("node-3 exited with %v after SIGTERM, want 0", p3.err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("node-3 did not exit within 15s of SIGTERM")
	}
	testkit.WaitFor(t, 2*time.Second, "node-3's /readyz down after it stopped", func() error { return watchIs(watch4, "down") })
	if seq, want := watch4.finish(), []string{"down", "503", "200", "503", "down"}; !slices.Equal(seq, want) {
		t.Errorf("restarted node-3's /readyz went %v through start, drain and stop, want %v", seq, want)
	}
	testkit.WaitFor(t, 10*time.Second, "node-1 and node-2 see node-3 gone", func() error { return converged(nodes[:2], nodes[:2]) })
	for _, n := range nodes[:2] {
		if err := expectStatus(h.client, "http://"+n.addr(n.http)+"/readyz", 200); err != nil {
			t.Errorf("%s after node-3 left: %v", n.name, err)
		}
	}
	for _, pr := range procs[:2] {
		if err := pr.stop(t, syscall.SIGTERM, 15*time.Second); err != nil {
			t.Errorf("%s: %v", pr.name, err)
		}
	}
}

func watchIs(w *readyWatch, want string) error {
	if got := w.last(); got != want {
		return fmt.Errorf("/readyz is %q, want %q", got, want)
	}
	return nil
}

func expectStatus(client *http.Client, url string, want int) error {
	resp, err := client.Get(url)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != want {
		return fmt.Errorf("GET %s = %d, want %d", url, resp.StatusCode, want)
	}
	return nil
}

func healthStatus(t *testing.T, hc healthpb.HealthClient) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatalf("health check: %v", err)
	}
	return r.Status
}
