package peer_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"

	"github.com/ringlimit/ringlimit/clock"
	"github.com/ringlimit/ringlimit/internal/certfile"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
	"github.com/ringlimit/ringlimit/peer"
	peerv1 "github.com/ringlimit/ringlimit/proto/peerv1"
)

// issueFiles writes a certificate of p with common name cn and DNS names
// dns, its key and p's CA to dir, under file, and returns their paths.
func issueFiles(t *testing.T, p *testkit.PKI, dir, file, cn string, dns ...string) certfile.Files {
	t.Helper()
	cert, key, err := p.CA.Issue(cn, dns, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	f := certfile.Files{CA: filepath.Join(dir, file+"-ca.pem"), Cert: filepath.Join(dir, file+".pem"), Key: filepath.Join(dir, file+"-key.pem")}
	for path, b := range map[string][]byte{f.CA: p.CA.CertPEM(), f.Cert: cert, f.Key: key} {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// A certificate with DNS names names its holder by them only: its common
// name, even a member's, does not let it speak for that member.
func TestTLSNamesAreSANsBeforeCN(t *testing.T) {
	p := testkit.NewPKI(t, "", "cluster CA")
	m := newMembers("A", "C")
	c := startTLSNode(t, "C", certs(t, p, "C"), m)
	set, err := certfile.Load(issueFiles(t, p, t.TempDir(), "cn-a", "A", "mallory.example"))
	if err != nil {
		t.Fatal(err)
	}
	mallory := tlsPool(t, "A", set, map[string]string{"C": c.addr})
	l := hourlyLimit(5)
	_, _, err = check(&node{pool: mallory}, "C", "k", l, 10*time.Second)
	wantCode(t, "check with CN A and DNS name mallory.example", err, codes.PermissionDenied,
		`peer: the certificate names ["mallory.example"], not the sender "A"`)
	if c.store.Len() != 0 {
		t.Errorf("C holds %d keys, want none", c.store.Len())
	}
}

// startVerifyingNode starts a node that serves with the certificates of
// files (re-read on Reload), verifying client certificates again after a
// change (Server.Verify, Server.Credentials), and serving members m knows.
func startVerifyingNode(t *testing.T, name string, files certfile.Files, m *members) (*node, *certfile.Set) {
	t.Helper()
	set, err := certfile.Load(files)
	if err != nil {
		t.Fatal(err)
	}
	n, lis := newNode(t, name, testkit.NewClock(0), func(c *peer.Config) { c.TLS = set })
	n.scfg.Known, n.scfg.Verify = m.known, set
	n.newServer(t) // on the server newNode made, which serves nothing
	n.srv = grpc.NewServer(grpc.Creds(n.psrv.Credentials(credentials.NewTLS(set.ServerConfig(true)))))
	n.psrv.Register(n.srv)
	n.serve(t, lis)
	return n, set
}

// After C drops the CA that A's certificate chains to and adopts the new
// ones (Recheck): the next batch on A's open Check stream, and the next
// call on a connection made before, are refused (the sender is verified
// again), and Sweep closes every connection made under the old CA.
func TestTLSCAChangeRechecksAndClosesConnections(t *testing.T) {
	old, next := testkit.NewPKI(t, "", "old CA"), testkit.NewPKI(t, "", "next CA")
	dir := t.TempDir()
	m := newMembers("A", "C")
	files := issueFiles(t, old, dir, "C", "C", "C")
	c, setC := startVerifyingNode(t, "C", files, m)
	setA := certs(t, old, "A")
	a := tlsPool(t, "A", setA, map[string]string{"C": c.addr})
	l := hourlyLimit(5)
	if ans, owner, err := check(&node{pool: a}, "C", "k", l, 10*time.Second); err != nil || !ans.Allowed || owner != "C" {
		t.Fatalf("check under the old CA: %+v by %s, %v", ans, owner, err)
	}
	raw, err := grpc.NewClient(c.addr, grpc.WithTransportCredentials(tlsCreds("C", old.Roots(), setA.Certificate())))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := peerv1.NewPeerClient(raw).Stats(ctx, &peerv1.StatsRequest{}); err != nil {
		t.Fatalf("Stats under the old CA: %v", err)
	}

	// C now trusts the next CA alone, with a certificate of it.
	nf := issueFiles(t, next, t.TempDir(), "C", "C", "C")
	for from, to := range map[string]string{nf.CA: files.CA, nf.Cert: files.Cert, nf.Key: files.Key} {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if changed, err := setC.Reload(); !changed || err != nil {
		t.Fatalf("Reload: %v, %v", changed, err)
	}
	// Until Recheck, what was authorized stays so: the calls in flight
	// finish while the other side replaces its connections.
	if ans, _, err := check(&node{pool: a}, "C", "k", l, 10*time.Second); err != nil || !ans.Allowed || ans.Remaining != 3 {
		t.Fatalf("check before Recheck: %+v, %v; want allowed with 3 left", ans, err)
	}
	c.psrv.Recheck()
	const refused = "peer: the client certificate no longer verifies"
	_, _, err = check(&node{pool: a}, "C", "k", l, 10*time.Second)
	wantCode(t, "the next batch on the open stream", err, codes.Unauthenticated, refused)
	_, err = peerv1.NewPeerClient(raw).Stats(ctx, &peerv1.StatsRequest{})
	wantCode(t, "Stats on the old connection", err, codes.Unauthenticated, refused)
	if _, used, ok := c.store.Used("k", c.h.clk.Now()); !ok || used != 2 {
		t.Errorf("C's k: used %d (held %v), want 2", used, ok)
	}

	if n := c.psrv.Sweep(); n < 1 {
		t.Fatalf("Sweep closed %d connections, want at least the raw client's", n)
	}
	testkit.WaitFor(t, 5*time.Second, "the connection made under the old CA closed by Sweep", func() error {
		if s := raw.GetState(); s == connectivity.Ready {
			return fmt.Errorf("still %v", s)
		}
		return nil
	})
	if got := testkit.Metric(t, c.reg, "ringlimit_peer_connections_closed_total"); got < 1 {
		t.Errorf("ringlimit_peer_connections_closed_total = %v, want at least 1", got)
	}
	if n := c.psrv.Sweep(); n != 0 {
		t.Errorf("a second Sweep closed %d connections, want none", n)
	}
}

// countingListener counts the connections it accepted that are still open.
type countingListener struct {
	net.Listener
	open atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.open.Add(1)
	return &countedConn{Conn: c, l: l}, nil
}

type countedConn struct {
	net.Conn
	l    *countingListener
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.l.open.Add(-1) })
	return c.Conn.Close()
}

// Renew makes a new connection to every member at once, with the
// certificates of the moment, and closes the old one Grace later: checks
// go on, exactly counted, over the new one.
func TestTLSPoolRenewReplacesConnections(t *testing.T) {
	p := testkit.NewPKI(t, "", "cluster CA")
	m := newMembers("A", "C")
	setC := certs(t, p, "C")
	c, lis := newNode(t, "C", testkit.NewClock(0), nil, grpc.Creds(credentials.NewTLS(setC.ServerConfig(true))))
	c.scfg.Known = m.known
	counted := &countingListener{Listener: lis}
	c.serve(t, counted)
	a, err := peer.NewPool(peer.Config{Self: "A", Timeout: 5 * time.Second, TLS: certs(t, p, "A"), Grace: 200 * time.Millisecond, Clock: clock.System()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(context.Background()) })
	a.SetMembers(testVersion, map[string]string{"C": c.addr})
	l := hourlyLimit(5)
	step := func(i int, wantRemaining int64, wantOpen int64) {
		t.Helper()
		ans, _, err := check(&node{pool: a}, "C", "k", l, 10*time.Second)
		if err != nil || !ans.Allowed || ans.Remaining != wantRemaining {
			t.Fatalf("step %d: check: %+v, %v; want allowed with %d left", i, ans, err, wantRemaining)
		}
		if got := counted.open.Load(); got != wantOpen {
			t.Errorf("step %d: %d connections open, want %d", i, got, wantOpen)
		}
	}
	step(0, 4, 1)
	a.Renew()
	step(1, 3, 2) // the new one, and the old one for Grace
	testkit.WaitFor(t, 5*time.Second, "the old connection closed, Grace after Renew", func() error {
		if n := counted.open.Load(); n != 1 {
			return fmt.Errorf("%d connections open", n)
		}
		return nil
	})
	step(2, 2, 1)
}
