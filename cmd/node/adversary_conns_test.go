package main

// Attacks on a node's listeners by clients that never finish a request:
// idle TCP connections that would take every file descriptor of a node
// with a small open-file limit, and garbage UDP packets on the gossip
// port that would fill its log. Real node processes over real sockets.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
	pb "github.com/ringlimit/ringlimit/proto/ringlimitv1"
)

// startPrefixedProc is startFaultProc (no network fault) with the node's
// command run through prefix (e.g. prlimit), which must exec it in place.
func startPrefixedProc(t *testing.T, bin string, prefix []string, s procSpec) *proc {
	t.Helper()
	args := soloArgs(s.name)
	if len(s.join) > 0 {
		args = append(args, "--join", strings.Join(s.join, ","))
	}
	args = append(append(append(prefix[1:len(prefix):len(prefix)], bin), args...), s.extra...)
	return launch(t, s.name, exec.Command(prefix[0], args...))
}

// linesContaining counts the lines of s that contain text.
func linesContaining(s *testkit.LogSink, text string) int {
	n := 0
	for _, l := range s.Lines() {
		if strings.Contains(l, text) {
			n++
		}
	}
	return n
}

// idleConns opens n TCP connections to addr that send nothing; they are
// closed at the test's end.
func idleConns(t *testing.T, addr string, n int) []net.Conn {
	t.Helper()
	conns := make([]net.Conn, 0, n)
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	d := net.Dialer{Timeout: 5 * time.Second}
	for range n {
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("connection %d of %d to %s: %v", len(conns)+1, n, addr, err)
		}
		conns = append(conns, c)
	}
	return conns
}

// waitAllClosed waits until the server has closed every one of conns
// (a read ends in EOF or a reset; what the server sends before, such as
// gRPC's HTTP/2 settings, is read and dropped) or deadline passes, and
// returns how long after start the last one was closed and how many are
// still open.
func waitAllClosed(conns []net.Conn, start, deadline time.Time) (last time.Duration, open int) {
	closedAt := make([]time.Duration, len(conns)) // 0: still open at deadline
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Go(func() {
			c.SetReadDeadline(deadline)
			buf := make([]byte, 512)
			var err error
			for err == nil {
				_, err = c.Read(buf)
			}
			if ne := net.Error(nil); !errors.As(err, &ne) || !ne.Timeout() {
				closedAt[i] = time.Since(start) // EOF or reset: closed by the server
			}
		})
	}
	wg.Wait()
	for _, d := range closedAt {
		if d == 0 {
			open++
		}
		last = max(last, d)
	}
	return last, open
}

// healthz answers GET /healthz's status over a new connection.
func healthz(addr string) error {
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 2 * time.Second}
	resp, err := client.Get("http://" + addr + "/healthz")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

// closedUnread reports whether err is how an HTTP client sees a new
// connection the server closed without reading the request: reset (the
// request had reached it), or ended before any answer, which net/http
// reports as a closed idle connection and does not retry for a POST.
func closedUnread(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) ||
		strings.Contains(err.Error(), "server closed idle connection")
}

// endWatch is a net.Conn that records when the connection ended: the
// peer closed it (a read failed) or the client closed it.
type endWatch struct {
	net.Conn
	once  sync.Once
	ended chan struct{}
}

func (c *endWatch) end() { c.once.Do(func() { close(c.ended) }) }

func (c *endWatch) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil {
		c.end()
	}
	return n, err
}

func (c *endWatch) Close() error {
	c.end()
	return c.Conn.Close()
}

// TestAdversaryIdleConns: 1,100 idle TCP connections to the public gRPC
// port and 1,100 to the HTTP port of a node whose open-file limit is
// 1,024. The node keeps answering /healthz, checks over HTTP and gRPC
// with exact counts, reloads its gossip key file without running out of
// file descriptors, stays alive for the other nodes, and closes the idle
// connections: those that never finish a handshake within 5 s (gRPC) or
// send no request within the header timeout (HTTP, 3 s here), a gRPC
// connection with no call in flight after --grpc-idle-timeout (2 s here).
// Before the caps a node at the limit stopped answering /healthz and
// held the idle gRPC connections 120 s.
func TestAdversaryIdleConns(t *testing.T) {
	bin := buildNode(t)
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		t.Skip("needs prlimit (util-linux) to lower the node's open-file limit")
	}
	h := newHarness(t)
	dir := t.TempDir()
	keys := filepath.Join(dir, "gossip.keys")
	key1, key2 := newTestKey(t), newTestKey(t)
	writeKeys(t, keys, key1)
	common := []string{"--gossip-key-file", keys}
	p1 := startFaultProc(t, bin, nil, procSpec{name: "node-1", extra: common})
	victim := startPrefixedProc(t, bin, []string{prlimit, "--nofile=1024:1024", "--"}, procSpec{name: "node-2", join: []string{p1.gossip},
		extra: append([]string{"--grpc-idle-timeout", "2s", "--http-read-timeout", "3s"}, common...)})
	p3 := startFaultProc(t, bin, nil, procSpec{name: "node-3", join: []string{p1.gossip}, extra: common})
	all := []*proc{p1, victim, p3}
	h.waitMembers(all, names3, 15*time.Second)
	caps := victim.logs.Records("connection caps")
	if len(caps) != 1 || caps[0]["nofile"] != float64(1024) || caps[0]["grpc"] != float64(384) || caps[0]["http"] != float64(384) {
		t.Fatalf("victim's connection caps: %v, want nofile 1024, http and grpc 384", caps)
	}

	const n = 1100
	start := time.Now()
	grpcIdle := idleConns(t, victim.grpc, n)
	httpIdle := idleConns(t, victim.http, n)
	t.Logf("%d idle connections to gRPC and %d to HTTP opened in %v", n, n, time.Since(start).Round(time.Millisecond))

	// /healthz answers on a new connection (one idle connection makes room).
	testkit.WaitFor(t, 4*time.Second, "/healthz under the attack", func() error { return healthz(victim.http) })
	t.Logf("/healthz answered %v after the attack began", time.Since(start).Round(time.Millisecond))

	// An HTTP check: 5 allowed, then refused. A new connection is closed
	// unread while every idle one is younger than the 1 s grace: such a
	// request was never read, and is sent again.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	lim := inlineLimit{count: 5, per: "1h"}
	refused := 0
	for i := range 6 {
		var a checkAnswer
		testkit.WaitFor(t, 10*time.Second, "a check's connection to be taken", func() error {
			a, err = doCheck(client, victim.http, "conns:http", lim, 5*time.Second)
			if err != nil && !closedUnread(err) {
				return nil // reported below
			}
			if err != nil {
				refused++
			}
			return err
		})
		wantAllowed := i < 5
		if err != nil || a.body.Allowed != wantAllowed || a.body.Remaining != max(int64(4-i), 0) {
			t.Fatalf("HTTP check %d under the attack: %d %+v %v, want allowed=%v remaining %d", i+1, a.status, a.body, err, wantAllowed, max(4-i, 0))
		}
	}

	t.Logf("HTTP checks: %d connections refused before one was taken", refused)

	// A gRPC check on its own connection: 3 allowed, then refused. The
	// connection is watched, to see it closed once idle. A connection
	// refused unread is made again (WaitForReady).
	var watched atomic.Pointer[endWatch]
	conn, err := grpc.NewClient(victim.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
			if err != nil {
				return nil, err
			}
			w := &endWatch{Conn: c, ended: make(chan struct{})}
			watched.Store(w)
			return w, nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rl := pb.NewRateLimiterClient(conn)
	for i := range 4 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := rl.Check(ctx, &pb.CheckRequest{Checks: []*pb.Check{{Key: "conns:grpc",
			Limit: &pb.Limit{Limit: 3, PerMs: int64(time.Hour / time.Millisecond)}}}}, grpc.WaitForReady(true))
		cancel()
		wantAllowed := i < 3
		if err != nil || len(resp.GetDecisions()) != 1 || resp.GetDecisions()[0].GetAllowed() != wantAllowed || resp.GetDecisions()[0].GetRemaining() != int64(max(2-i, 0)) {
			t.Fatalf("gRPC check %d under the attack: %v %v, want allowed=%v remaining %d", i+1, resp, err, wantAllowed, max(2-i, 0))
		}
	}
	lastCall := time.Now()

	// The gossip key file is re-read and applied: a second key added.
	before := len(victim.logs.Records("gossip keyring updated"))
	writeKeys(t, keys, key1, key2)
	testkit.WaitFor(t, 10*time.Second, "the victim's gossip keyring update", func() error {
		if len(victim.logs.Records("gossip keyring updated")) == before {
			return errors.New("not yet")
		}
		return nil
	})

	// Every idle connection is closed by the node: gRPC ones 5 s after they
	// were accepted (no handshake), HTTP ones after the 3 s header timeout,
	// or at once to make room.
	var grpcClosed, httpClosed time.Duration
	var grpcOpen, httpOpen int
	var wg sync.WaitGroup
	wg.Go(func() { grpcClosed, grpcOpen = waitAllClosed(grpcIdle, start, start.Add(12*time.Second)) })
	wg.Go(func() { httpClosed, httpOpen = waitAllClosed(httpIdle, start, start.Add(12*time.Second)) })
	wg.Wait()
	if grpcOpen > 0 || httpOpen > 0 {
		t.Fatalf("idle connections still open 12s after the attack began: %d of %d on gRPC, %d of %d on HTTP", grpcOpen, n, httpOpen, n)
	}
	t.Logf("idle connections closed within %v (gRPC) and %v (HTTP) of the attack's start",
		grpcClosed.Round(time.Millisecond), httpClosed.Round(time.Millisecond))

	// The gRPC connection with no call in flight is closed after 2 s.
	w := watched.Load()
	select {
	case <-w.ended:
		if idle := time.Since(lastCall); idle < 2*time.Second {
			t.Errorf("gRPC connection closed %v after its last call, before --grpc-idle-timeout 2s", idle)
		}
	case <-time.After(time.Until(lastCall.Add(10 * time.Second))):
		t.Fatalf("gRPC connection still open 10s after its last call (--grpc-idle-timeout 2s)")
	}

	// Still alive for the others, and ready.
	h.waitMembers(all, names3, 15*time.Second)
	if err := expectStatus(h.client, "http://"+victim.http+"/readyz", http.StatusOK); err != nil {
		t.Fatal(err)
	}
	if n := linesContaining(victim.logs, "too many open files"); n > 0 {
		t.Errorf("victim logged %d lines with \"too many open files\"", n)
	}
	m, err := testkit.Scrape(h.client, victim.http, "ringlimit_conns_evicted_total")
	if err != nil {
		t.Fatal(err)
	}
	if m[`{listener="grpc"}`] < 1 || m[`{listener="http"}`] < 1 {
		t.Errorf("ringlimit_conns_evicted_total = %v, want evictions on grpc and http", m)
	}
	t.Logf("evicted: %v", m)
}

// TestAdversaryGossipGarbage: 20,000 garbage UDP packets to a node's
// gossip port. Each is counted as refused (ringlimit_gossip_errors_total
// {kind="decode"}), memberlist's error lines are logged at most 10 at once
// and 5 a second (before: one line per packet), and the node stays
// healthy and a member.
func TestAdversaryGossipGarbage(t *testing.T) {
	bin := buildNode(t)
	h := newHarness(t)
	p1 := startFaultProc(t, bin, nil, procSpec{name: "node-1"})
	victim := startFaultProc(t, bin, nil, procSpec{name: "node-2", join: []string{p1.gossip}})
	h.waitMembers([]*proc{p1, victim}, names3[:2], 15*time.Second)
	decoded := func() (float64, error) {
		m, err := testkit.Scrape(h.client, victim.http, "ringlimit_gossip_errors_total")
		if err != nil {
			return 0, err
		}
		v, ok := m[`{kind="decode"}`]
		if !ok {
			return 0, fmt.Errorf("no ringlimit_gossip_errors_total{kind=\"decode\"} in %v", m)
		}
		return v, nil
	}
	base, err := decoded()
	if err != nil {
		t.Fatal(err)
	}
	errorLines := func() int { return linesContaining(victim.logs, `"component":"memberlist"`) }
	linesBefore := errorLines()

	udp, err := net.Dial("udp", victim.gossip)
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	garbage := []byte(strings.Repeat("\xff", 32)) // message type 255: not supported
	const packets, batch = 20000, 500
	start := time.Now()
	for sent := batch; sent <= packets; sent += batch {
		for range batch {
			if _, err := udp.Write(garbage); err != nil {
				t.Fatal(err)
			}
		}
		// Paced by the node's count, so that no packet is lost in a
		// full socket buffer and the count is exact.
		testkit.WaitFor(t, 10*time.Second, fmt.Sprintf("%d garbage packets counted", sent), func() error {
			v, err := decoded()
			if err != nil {
				return err
			}
			if v < base+float64(sent) {
				return fmt.Errorf("%v counted", v-base)
			}
			return nil
		})
	}
	elapsed := time.Since(start)
	v, err := decoded()
	if err != nil {
		t.Fatal(err)
	}
	if v-base != packets {
		t.Errorf("ringlimit_gossip_errors_total{kind=\"decode\"} grew by %v, want %d", v-base, packets)
	}
	lines := errorLines() - linesBefore
	bound := errorLogBurstForTest + int(float64(errorLogRateForTest)*elapsed.Seconds()) + 1
	if lines > bound {
		t.Errorf("%d memberlist lines logged for %d garbage packets in %v, want at most %d (10 + 5 a second)", lines, packets, elapsed.Round(time.Millisecond), bound)
	}
	if lines < errorLogBurstForTest {
		t.Errorf("%d memberlist lines logged, want at least the burst of %d", lines, errorLogBurstForTest)
	}
	sup, err := testkit.Scrape(h.client, victim.http, "ringlimit_gossip_log_suppressed_total")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d packets in %v: %d lines logged, %v suppressed", packets, elapsed.Round(time.Millisecond), lines, sup[""])
	if err := healthz(victim.http); err != nil {
		t.Fatalf("/healthz after the flood: %v", err)
	}
	h.waitMembers([]*proc{p1, victim}, names3[:2], 10*time.Second)
}

// The gossip error-line limit of cluster/log.go, which the test restates
// (it is the documented behaviour, not an import).
const (
	errorLogBurstForTest = 10
	errorLogRateForTest  = 5
)
