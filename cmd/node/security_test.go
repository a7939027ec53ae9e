package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
	"github.com/ringlimit/ringlimit/node"
	peerv1 "github.com/ringlimit/ringlimit/proto/peerv1"
)

// secureFlags are the flags of a node named name that talks to the others
// over mutual TLS with certificates of p (CA file ca) and gossips
// encrypted with the key file keys, labelled "prod".
func secureFlags(p *testkit.PKI, ca, keys, name string) []string {
	cert, key := p.Issue(name, name)
	return []string{"--tls-ca", ca, "--tls-cert", cert, "--tls-key", key, "--gossip-key-file", keys, "--cluster-name", "prod"}
}

// startSecureCluster starts three nodes named node-1..node-3 with
// secureFlags, the policy overridePolicy and admin tokens, and waits for
// their ring.
func startSecureCluster(h *harness, p *testkit.PKI, tweak func(*config)) ([]*node.Node, []string, []*testkit.LogSink) {
	t := h.t
	t.Helper()
	keys := filepath.Join(p.Dir, "gossip.keys")
	writeKeys(t, keys, newTestKey(t))
	pol := filepath.Join(p.Dir, "policy.yaml")
	writePolicy(t, pol, overridePolicy)
	ca := filepath.Join(p.Dir, "prod-ca.pem")
	names := []string{"node-1", "node-2", "node-3"}
	nodes := make([]*node.Node, len(names))
	sinks := make([]*testkit.LogSink, len(names))
	for i, name := range names {
		tokens := tokenPath(pol, name)
		if err := os.WriteFile(tokens, []byte("oncall:"+testAdminToken+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		extra := append(secureFlags(p, ca, keys, name), "--policy", pol, "--audit-log", filepath.Join(p.Dir, name+".audit"), "--admin-token-file", tokens)
		if i > 0 {
			extra = append(extra, "--join", nodes[0].Cluster().LocalAddr())
		}
		nodes[i], sinks[i] = h.startWith(name, extra, tweak)
	}
	h.waitRing(nodes, names, 10*time.Second)
	return nodes, names, sinks
}

// attack is one way a stranger dials a port.
type attack struct {
	name  string
	creds credentials.TransportCredentials
}

// strangerCalls makes, as from, every peer call that could read or change
// state on conn: a Fetch of spent, a refunding check of spent, a handoff
// that would exhaust fresh, and a replica that would do the same. It
// returns each call's error (nil: the call succeeded). Each call is made
// as nodes make it, on their codec.
func strangerCalls(conn *grpc.ClientConn, from, spent, fresh string) map[string]error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c := peerv1.NewPeerClient(conn)
	lim := &peerv1.Limit{Algorithm: 0, Limit: 5, PerNs: int64(time.Hour), Burst: 5}
	out := map[string]error{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	call := func(name string, f func() error) {
		wg.Go(func() {
			err := f()
			mu.Lock()
			out[name] = err
			mu.Unlock()
		})
	}
	call("Fetch", func() error {
		_, err := c.Fetch(ctx, &peerv1.FetchRequest{From: from, Key: spent, Limit: lim})
		return err
	})
	call("Check refund", func() error {
		st, err := c.Check(ctx, grpc.CallContentSubtype("ringlimit-peer")) // as nodes call it
		if err != nil {
			return err
		}
		if err := st.Send(&peerv1.CheckRequest{From: from, Id: 1, Checks: []*peerv1.Check{{Key: spent, Limit: lim, Cost: 5, Refund: true, Final: true}}}); err != nil {
			return err
		}
		resp, err := st.Recv()
		if err == nil && resp.GetError() != "" {
			return fmt.Errorf("refused: %s", resp.GetError())
		}
		return err
	})
	call("Handoff", func() error {
		_, err := c.Handoff(ctx, &peerv1.HandoffRequest{From: from, Buckets: []*peerv1.BucketState{{Key: fresh, Limit: lim, Used: 5}}})
		return err
	})
	call("Replicate", func() error {
		_, err := c.Replicate(ctx, &peerv1.ReplicateRequest{From: from, Buckets: []*peerv1.BucketState{{Key: fresh, Limit: lim, Used: 5}}})
		return err
	})
	wg.Wait()
	return out
}

// TestStrangersChangeNothing: on a secure 3-node cluster, a client with no
// certificate, one with a certificate of another CA naming a member, and
// one with a certificate of the cluster's CA naming no member call Fetch,
// a refunding check, Handoff and Replicate on every port of every node
// (public HTTP, public gRPC, peer, gossip); a node without the gossip key
// and one with another cluster name gossip an override. Every call fails,
// neither outsider appears in a member list, no override is in force, the
// exhausted key stays exhausted and the fresh one fresh.
func TestStrangersChangeNothing(t *testing.T) {
	h := newHarness(t)
	dir := t.TempDir()
	p := testkit.NewPKI(t, dir, "prod")
	nodes, names, _ := startSecureCluster(h, p, nil)
	lim := inlineLimit{count: 5, per: "1h"}
	const spent, fresh = "acct:spent", "acct:fresh"
	for i := range 5 {
		if a := h.mustCheck(httpAddr(nodes[i%3]), checkBody(spent, lim)); a.status != http.StatusOK {
			t.Fatalf("check %d of %s: %d", i+1, spent, a.status)
		}
	}

	other := testkit.NewPKI(t, dir, "other")
	attacks := []attack{
		{"no TLS", insecure.NewCredentials()},
		{"TLS, no client certificate", credentials.NewTLS(&tls.Config{InsecureSkipVerify: true})},
		{"another CA's certificate naming node-1", credentials.NewTLS(&tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{other.KeyPair("node-1")}})},
		{"the CA's certificate naming mallory", credentials.NewTLS(&tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{p.KeyPair("mallory")}})},
	}
	type target struct{ node, port, addr string }
	var targets []target
	for i, n := range nodes {
		for _, port := range []struct{ name, addr string }{
			{"http", httpAddr(n)}, {"grpc", n.GRPCAddr()}, {"peer", n.PeerAddr()}, {"gossip", n.Cluster().LocalAddr()},
		} {
			targets = append(targets, target{names[i], port.name, port.addr})
		}
	}
	var wg sync.WaitGroup
	for _, tg := range targets {
		for _, a := range attacks {
			wg.Go(func() {
				conn, err := grpc.NewClient(tg.addr, grpc.WithTransportCredentials(a.creds))
				if err != nil {
					t.Errorf("dial %s: %v", tg.addr, err)
					return
				}
				defer conn.Close()
				from := "node-1"
				if strings.Contains(a.name, "mallory") {
					from = "mallory"
				}
				for call, err := range strangerCalls(conn, from, spent, fresh) {
					if err == nil {
						t.Errorf("%s %s (%s): %s succeeded", tg.node, tg.port, a.name, call)
						continue
					}
					if a.name == "the CA's certificate naming mallory" && tg.port == "peer" && status.Code(err) != codes.PermissionDenied {
						t.Errorf("%s peer, mallory, %s: %v, want PermissionDenied", tg.node, call, err)
					}
				}
			})
		}
	}
	wg.Wait()

	// Outsiders gossip an override.
	pol := filepath.Join(dir, "policy.yaml")
	var outsiders []*testkit.LogSink
	for _, o := range []struct {
		name  string
		flags []string
	}{
		{"keyless", []string{"--cluster-name", "prod"}},
		{"other-cluster", []string{"--cluster-name", "staging", "--gossip-key-file", filepath.Join(dir, "gossip.keys")}},
	} {
		tokens := tokenPath(pol, o.name)
		if err := os.WriteFile(tokens, []byte("oncall:"+testAdminToken+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		extra := append(o.flags, "--policy", pol, "--audit-log", filepath.Join(dir, o.name+".audit"), "--admin-token-file", tokens, "--join", nodes[0].Cluster().LocalAddr())
		out, sink := h.startWith(o.name, extra, nil)
		outsiders = append(outsiders, sink)
		status, b, err := postJSON(h.client, "http://"+httpAddr(out)+"/v1/overrides", `{"reason":"r","user":"42","tier":"enterprise","expires_in":"1h"}`)
		if err != nil || status != http.StatusOK {
			t.Fatalf("override on %s: %d %s %v", o.name, status, b, err)
		}
	}
	// Until every outsider has been refused three times, no node lists it
	// or holds its override.
	testkit.WaitFor(t, 20*time.Second, "three refused join attempts of every outsider", func() error {
		for i, n := range nodes {
			if got := memberNames(n); len(got) != 3 {
				t.Fatalf("%s lists %v, want only the three nodes", names[i], got)
			}
			if o := h.overrides(httpAddr(n)); len(o) != 0 {
				t.Fatalf("%s: overrides %+v, want none", names[i], o)
			}
		}
		for i, sink := range outsiders {
			if n := len(sink.Records("cluster: join failed, will retry")); n < 3 {
				return fmt.Errorf("outsider %d: %d refused attempts", i+1, n)
			}
		}
		return nil
	})

	for i, n := range nodes {
		if a := h.mustCheck(httpAddr(n), checkBody(spent, lim)); a.status != http.StatusTooManyRequests || a.body.Remaining != 0 {
			t.Errorf("%s via %s: %d remaining %d, want 429 with 0", spent, names[i], a.status, a.body.Remaining)
		}
		if got := h.metric(httpAddr(n), "ringlimit_peer_unauthenticated_total", ""); got != 4 {
			t.Errorf("%s: ringlimit_peer_unauthenticated_total = %v, want 4 (mallory's calls)", names[i], got)
		}
	}
	if a := h.mustCheck(httpAddr(nodes[1]), checkBody(fresh, lim)); a.status != http.StatusOK || a.body.Remaining != 4 {
		t.Errorf("%s: %d remaining %d, want 200 with 4", fresh, a.status, a.body.Remaining)
	}
}

// TestRotationUnderLoad replaces the CA (old and new in the bundle, new
// node certificates, new CA alone) and the gossip key (add, use, remove)
// of a running 3-node cluster while checks flow through every node: every
// check is answered 200 or 429, and every key admitted exactly
// min(checks, limit). Then a node holding only the new CA, its own new
// certificate and the new key joins and forwards checks, and a
// certificate of the old CA is refused.
func TestRotationUnderLoad(t *testing.T) {
	h := newHarness(t)
	dir := t.TempDir()
	old := testkit.NewPKI(t, dir, "prod")
	fast := func(c *config) { c.CertPoll, c.KeyFilePoll = 100*time.Millisecond, 100*time.Millisecond }
	nodes, names, sinks := startSecureCluster(h, old, fast)
	keyFile := filepath.Join(dir, "gossip.keys")

	const limit, workers = 5, 4
	lim := inlineLimit{count: limit, per: "1h"}
	keys := make([]string, 120)
	for i := range keys {
		keys[i] = fmt.Sprintf("rot:%d", i)
	}
	sent, admitted := make([]int, len(keys)), make([]int, len(keys))
	var rotated sync.WaitGroup
	rotated.Add(1)
	done := make(chan struct{})
	go func() { rotated.Wait(); close(done) }()
	var load sync.WaitGroup
	var failures []string
	var mu sync.Mutex
	deadline := time.Now().Add(60 * time.Second)
	for w := range workers {
		load.Go(func() {
			for round := 0; time.Now().Before(deadline); round++ {
				select {
				case <-done:
					if round > 1 {
						return
					}
				default:
				}
				for k := w; k < len(keys); k += workers {
					a, err := doCheck(h.client, httpAddr(nodes[(k+round)%3]), keys[k], lim, 5*time.Second)
					sent[k]++
					switch {
					case err != nil || (a.status != http.StatusOK && a.status != http.StatusTooManyRequests):
						mu.Lock()
						failures = append(failures, fmt.Sprintf("%s: %d %v", keys[k], a.status, err))
						mu.Unlock()
					case a.status == http.StatusOK:
						admitted[k]++
					}
					time.Sleep(2 * time.Millisecond)
				}
			}
		})
	}

	// step writes new files and waits for n more "certificates reloaded"
	// lines in every node's log.
	reloads := func(i int) int { return len(sinks[i].Records("certificates reloaded")) }
	step := func(what string, n int, write func()) {
		t.Helper()
		before := make([]int, len(nodes))
		for i := range nodes {
			before[i] = reloads(i)
		}
		write()
		poll(t, 5*time.Second, what, func() (bool, string) {
			for i := range nodes {
				if reloads(i) < before[i]+n {
					return false, fmt.Sprintf("%s reloaded %d times", names[i], reloads(i)-before[i])
				}
			}
			return true, ""
		})
	}
	next := testkit.NewPKI(t, dir, "next")
	step("both CAs trusted", 1, func() { old.Write("prod-ca.pem", append(old.CA.CertPEM(), next.CA.CertPEM()...)) })
	step("new certificates", 1, func() {
		for _, name := range names {
			next.Issue(name, name)
		}
	})
	step("only the new CA", 1, func() { old.Write("prod-ca.pem", next.CA.CertPEM()) })
	k1 := nodes[0].Cluster().Keys()[0]
	k2 := newTestKey(t)
	for _, ring := range [][][]byte{{k1, k2}, {k2, k1}, {k2}} {
		writeKeys(t, keyFile, ring...)
		poll(t, 5*time.Second, "keyring "+fingerprints(ring)[0], func() (bool, string) {
			for i, nd := range nodes {
				if got := nd.Cluster().Keys(); len(got) != len(ring) || string(got[0]) != string(ring[0]) {
					return false, fmt.Sprintf("%s holds %v", names[i], fingerprints(got))
				}
			}
			return true, ""
		})
	}
	time.Sleep(time.Second) // probes and gossip under the new keyring, checks still flowing
	rotated.Done()
	load.Wait()

	if len(failures) > 0 {
		t.Fatalf("%d checks failed during the rotation, first: %s", len(failures), failures[0])
	}
	total := 0
	for k := range keys {
		total += sent[k]
		if want := min(sent[k], limit); admitted[k] != want {
			t.Errorf("%s: %d admitted of %d checks, want %d", keys[k], admitted[k], sent[k], want)
		}
	}
	t.Logf("%d checks through the rotation, none failed", total)

	// A node with only the new material joins and forwards.
	caOnly := next.Write("next-only-ca.pem", next.CA.CertPEM())
	newKeys := filepath.Join(dir, "node-4.keys")
	writeKeys(t, newKeys, k2)
	n4, _ := h.startWith("node-4", append(secureFlags(next, caOnly, newKeys, "node-4"), "--join", nodes[1].Cluster().LocalAddr()), fast)
	all := append(nodes, n4)
	h.waitRing(all, append(names, "node-4"), 10*time.Second)
	forwarded := 0
	for i := range 40 {
		key := fmt.Sprintf("after:%d", i)
		a := h.mustCheck(httpAddr(n4), checkBody(key, lim))
		if a.status != http.StatusOK || a.body.Remaining != limit-1 {
			t.Fatalf("%s via node-4: %d %+v", key, a.status, a.body)
		}
		if a.body.Owner != "node-4" {
			forwarded++
		}
	}
	if forwarded == 0 {
		t.Fatal("node-4 owned all 40 keys: nothing was forwarded")
	}
	// A certificate of the old CA no longer opens a peer connection.
	conn, err := grpc.NewClient(nodes[0].PeerAddr(), grpc.WithTransportCredentials(
		credentials.NewTLS(&tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{old.KeyPair("node-2")}})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for call, err := range strangerCalls(conn, "node-2", "after:0", "after:1") {
		if err == nil {
			t.Errorf("%s with a certificate of the old CA succeeded", call)
		}
	}
}
