package peer_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/clock"
	"github.com/ringlimit/ringlimit/internal/certfile"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
	"github.com/ringlimit/ringlimit/peer"
	peerv1 "github.com/ringlimit/ringlimit/proto/peerv1"
)

// The peer transport over mutual TLS: nodes serve the peer service with
// certfile.Set.ServerConfig(true) and Server.Authenticate, and dial with
// Config.TLS, on real loopback sockets. Every refusal leaves the store as
// it was: an exhausted key stays exhausted, a fresh key stays fresh.

// certs issues a certificate of p whose common and DNS name is name and
// loads it with the CA.
func certs(t *testing.T, p *testkit.PKI, name string) *certfile.Set {
	t.Helper()
	cert, key := p.Issue(name, name)
	s, err := certfile.Load(certfile.Files{CA: p.CAFile(), Cert: cert, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// members is what a node's gossip knows: its known is Authenticate's.
type members struct {
	mu    sync.Mutex
	names map[string]bool
}

func newMembers(names ...string) *members {
	m := &members{names: map[string]bool{}}
	for _, n := range names {
		m.add(n)
	}
	return m
}

func (m *members) add(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.names[name] = true
}

func (m *members) known(name string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.names[name]
}

// startTLSNode starts a node that serves and dials with set, serving the
// members m knows.
func startTLSNode(t *testing.T, name string, set *certfile.Set, m *members) *node {
	t.Helper()
	n, lis := newNode(t, name, testkit.NewClock(0), func(c *peer.Config) { c.TLS = set },
		grpc.Creds(credentials.NewTLS(set.ServerConfig(true))))
	n.scfg.Known = m.known
	n.serve(t, lis)
	return n
}

// tlsPool returns a pool that calls itself self, presents set's
// certificate and dials members (name → address).
func tlsPool(t *testing.T, self string, set peer.Certs, members map[string]string) *peer.Pool {
	t.Helper()
	p, err := peer.NewPool(peer.Config{Self: self, Timeout: 5 * time.Second, TLS: set, Clock: clock.System()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(context.Background()) })
	p.SetMembers(testVersion, members)
	return p
}

// tlsCreds are a raw client's credentials: it trusts roots for the server
// named server and presents cert (nil: none), even where the server asks
// for another CA's.
func tlsCreds(server string, roots *x509.CertPool, cert *tls.Certificate) credentials.TransportCredentials {
	c := &tls.Config{ServerName: server, RootCAs: roots, MinVersion: tls.VersionTLS12}
	if cert != nil {
		c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
	}
	return credentials.NewTLS(c)
}

// rawClient dials addr's peer service with creds, as a generated client.
func rawClient(t *testing.T, addr string, creds credentials.TransportCredentials) peerv1.PeerClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return peerv1.NewPeerClient(conn)
}

func wireLimit(l bucket.Limit) *peerv1.Limit {
	return &peerv1.Limit{Algorithm: uint32(l.Algorithm()), Limit: l.Count(), PerNs: int64(l.Per()), Burst: l.Burst()}
}

// wantCode fails unless err has code and its message contains msg.
func wantCode(t *testing.T, what string, err error, code codes.Code, msg string) {
	t.Helper()
	if status.Code(err) != code || err == nil || !strings.Contains(err.Error(), msg) {
		t.Errorf("%s: %v; want %v with %q", what, err, code, msg)
	}
}

func wantUnauthenticated(t *testing.T, n *node, want float64) {
	t.Helper()
	if got := testkit.Metric(t, n.reg, "ringlimit_peer_unauthenticated_total"); got != want {
		t.Errorf("%s: ringlimit_peer_unauthenticated_total = %v, want %v", n.name, got, want)
	}
}

// Two members with certificates from the same CA naming them: checks both
// ways, Handoff, Replicate on both paths, Fetch and Stats all work.
func TestTLSMembersServeEachOther(t *testing.T) {
	p := testkit.NewPKI(t, "", "cluster CA")
	m := newMembers("A", "B")
	setA := certs(t, p, "A")
	a, b := startTLSNode(t, "A", setA, m), startTLSNode(t, "B", certs(t, p, "B"), m)
	formCluster(a, b)
	l := hourlyLimit(5)
	if ans, owner := check1(t, a, "B", "k", l); !ans.Allowed || ans.Remaining != 4 || owner != "B" {
		t.Fatalf("A→B check: %+v by %s, want allowed by B with 4 left", ans, owner)
	}
	if ans, owner := check1(t, b, "A", "k", l); !ans.Allowed || ans.Remaining != 4 || owner != "A" {
		t.Fatalf("B→A check: %+v by %s, want allowed by A with 4 left", ans, owner)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.pool.Handoff(ctx, "B", []peer.State{{Key: "handed", Limit: l, Used: 3}}); err != nil {
		t.Fatalf("Handoff: %v", err)
	}
	if n, err := a.pool.Replicate(ctx, "B", []peer.State{{Key: "replica", Limit: l, Used: 2}}); n != 1 || err != nil {
		t.Fatalf("Replicate: %d, %v; want 1 taken", n, err)
	}
	gen := rawClient(t, b.addr, tlsCreds("B", setA.Roots(), setA.Certificate()))
	resp, err := gen.Replicate(ctx, &peerv1.ReplicateRequest{From: "A", RingVersion: testVersion,
		Buckets: []*peerv1.BucketState{{Key: "generated", Limit: wireLimit(l), Used: 4}}})
	if err != nil || resp.GetAccepted() != 1 {
		t.Fatalf("Replicate on the generated path: %v, %v; want 1 taken", resp, err)
	}
	for key, want := range map[string]int64{"k": 1, "handed": 3, "replica": 2, "generated": 4} {
		if _, used, ok := b.store.Used(key, b.h.clk.Now()); !ok || used != want {
			t.Errorf("B's %s: used %d (held %v), want %d", key, used, ok, want)
		}
	}
	if st, found, err := a.pool.Fetch(ctx, "B", "handed", &l); err != nil || !found || st.Used != 3 {
		t.Fatalf("Fetch: %+v, found %v, %v; want 3 used", st, found, err)
	}
	if keys := a.pool.Keys(ctx); len(keys) != 1 || keys["B"] != 4 {
		t.Fatalf("Keys from A: %v, want B: 4", keys)
	}
	wantUnauthenticated(t, a, 0)
	wantUnauthenticated(t, b, 0)
}

// A member gossip tells of within AuthWait is served: the server waits for
// it rather than refuse it at once.
func TestTLSServesMemberKnownWithinAuthWait(t *testing.T) {
	p := testkit.NewPKI(t, "", "cluster CA")
	m := newMembers("A", "B")
	b := startTLSNode(t, "B", certs(t, p, "B"), m)
	d := tlsPool(t, "D", certs(t, p, "D"), map[string]string{"B": b.addr})
	timer := time.AfterFunc(200*time.Millisecond, func() { m.add("D") })
	t.Cleanup(func() { timer.Stop() })
	l := hourlyLimit(5)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out := make([]peer.Answer, 1)
	owner, err := d.Check(ctx, "B", []peer.Request{{Key: "late", Limit: l, Cost: 1}}, out)
	if err != nil || owner != "B" || !out[0].Allowed || out[0].Remaining != 4 {
		t.Fatalf("D's check: %+v by %s, %v; want allowed by B with 4 left", out[0], owner, err)
	}
	if !m.known("D") {
		t.Fatal("D was served before it was known")
	}
	if st, found, err := d.Fetch(ctx, "B", "late", &l); err != nil || !found || st.Used != 1 {
		t.Fatalf("D's Fetch: %+v, found %v, %v; want 1 used", st, found, err)
	}
	wantUnauthenticated(t, b, 0)
}

// The pool accepts only a server whose certificate chains to its CAs and
// names the member it dials.
func TestTLSPoolRefusesServerNotNamingTheMember(t *testing.T) {
	p := testkit.NewPKI(t, "", "cluster CA")
	m := newMembers("A", "B", "C")
	c := startTLSNode(t, "C", certs(t, p, "C"), m)
	foreignB := startTLSNode(t, "B", certs(t, testkit.NewPKI(t, "", "another CA"), "B"), m)
	l := hourlyLimit(5)
	for _, tc := range []struct{ name, addr, msg string }{
		{"certificate of another member", c.addr, // quoted in the status:
			`peer: the server dialled as member \"B\" presents a certificate for [\"C\"]`},
		{"certificate of another CA", foreignB.addr, "certificate signed by unknown authority"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := tlsPool(t, "A", certs(t, p, "A"), map[string]string{"B": tc.addr})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := a.Check(ctx, "B", []peer.Request{{Key: "k", Limit: l, Cost: 1}}, make([]peer.Answer, 1))
			wantCode(t, "check", err, codes.Unavailable, tc.msg)
		})
	}
	for _, n := range []*node{c, foreignB} {
		if n.store.Len() != 0 {
			t.Errorf("%s holds %d keys, want none", n.name, n.store.Len())
		}
		wantUnauthenticated(t, n, 0)
	}
}
