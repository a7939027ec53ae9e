package peer_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
	"github.com/ringlimit/ringlimit/peer"
	peerv1 "github.com/ringlimit/ringlimit/proto/peerv1"
)

// Refusals by a peer service that authenticates: each leaves the store as
// it was.

// rawCalls makes each peer call through c as the sender from: a Check
// stream refunding spent, a Handoff and a Replicate (generated path)
// spending all of fresh, a Fetch of spent, and Stats. It returns their
// errors by call.
func rawCalls(c peerv1.PeerClient, from, spent, fresh string, l bucket.Limit) map[string]error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	full := []*peerv1.BucketState{{Key: fresh, Limit: wireLimit(l), Used: l.Count()}}
	errs := map[string]error{}
	st, err := c.Check(ctx, grpc.CallContentSubtype(peer.CodecName))
	if err == nil {
		_ = st.Send(&peerv1.CheckRequest{From: from, Id: 1, Checks: []*peerv1.Check{{Key: spent, Limit: wireLimit(l), Cost: 1, Refund: true}}})
		_, err = st.Recv() // the stream's status, even when Send failed
	}
	errs["Check"] = err
	_, errs["Handoff"] = c.Handoff(ctx, &peerv1.HandoffRequest{From: from, Buckets: full})
	_, errs["Replicate"] = c.Replicate(ctx, &peerv1.ReplicateRequest{From: from, RingVersion: testVersion, Buckets: full})
	_, errs["Fetch"] = c.Fetch(ctx, &peerv1.FetchRequest{From: from, Key: spent, Limit: wireLimit(l)})
	_, errs["Stats"] = c.Stats(ctx, &peerv1.StatsRequest{})
	return errs
}

// exhaust spends all of l on key at to, from the member n.
func exhaust(t *testing.T, n *node, to, key string, l bucket.Limit) {
	t.Helper()
	for i := range l.Count() {
		if a, _ := check1(t, n, to, key, l); !a.Allowed || a.Remaining != l.Count()-1-i {
			t.Fatalf("check %d of %s: %+v, want allowed with %d left", i, key, a, l.Count()-1-i)
		}
	}
}

// wantUntouched fails unless spent is still fully spent on n, as a check
// from the member from (unless nil) shows, and fresh was never stored.
func wantUntouched(t *testing.T, n, from *node, spent, fresh string, l bucket.Limit) {
	t.Helper()
	if _, used, ok := n.store.Used(spent, n.h.clk.Now()); !ok || used != l.Count() {
		t.Errorf("%s: used %d (held %v), want %d", spent, used, ok, l.Count())
	}
	if from != nil {
		if a, _ := check1(t, from, n.name, spent, l); a.Allowed || a.Remaining != 0 {
			t.Errorf("check of %s after the refusals: %+v, want denied with 0 left", spent, a)
		}
	}
	if n.store.Has(fresh) {
		t.Errorf("%s was stored", fresh)
	}
	n.h.mu.Lock()
	defer n.h.mu.Unlock()
	if len(n.h.replicas) != 0 || len(n.h.lookups) != 0 {
		t.Errorf("the handler was given replicas %v and lookups %v", n.h.replicas, n.h.lookups)
	}
}

// A client without a certificate of the cluster's CA does not get past the
// handshake: every call fails as a transport error, and none reaches the
// service.
func TestTLSRefusesClientsWithoutMemberCertificate(t *testing.T) {
	p := testkit.NewPKI(t, "", "cluster CA")
	m := newMembers("A", "B")
	a, b := startTLSNode(t, "A", certs(t, p, "A"), m), startTLSNode(t, "B", certs(t, p, "B"), m)
	formCluster(a, b)
	l := hourlyLimit(5)
	exhaust(t, a, "B", "spent", l)
	stranger := certs(t, testkit.NewPKI(t, "", "another CA"), "A")
	for _, tc := range []struct {
		name  string
		creds credentials.TransportCredentials
	}{
		{"in clear", insecure.NewCredentials()},
		{"TLS without a certificate", tlsCreds("B", p.Roots(), nil)},
		{"TLS with another CA's certificate", tlsCreds("B", p.Roots(), stranger.Certificate())},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The message is the handshake's alert or a broken pipe,
			// whichever the client sees first.
			for call, err := range rawCalls(rawClient(t, b.addr, tc.creds), "A", "spent", "fresh", l) {
				wantCode(t, call, err, codes.Unavailable, "")
			}
		})
	}
	wantUntouched(t, b, a, "spent", "fresh", l)
	wantUnauthenticated(t, b, 0)
}

// A certificate of the cluster's CA whose holder is no member: every call
// is refused PermissionDenied once the server has waited AuthWait for
// gossip to tell of it, and changes nothing.
func TestTLSRefusesUnknownHolder(t *testing.T) {
	p := testkit.NewPKI(t, "", "cluster CA")
	m := newMembers("A", "B")
	a, b := startTLSNode(t, "A", certs(t, p, "A"), m), startTLSNode(t, "B", certs(t, p, "B"), m)
	formCluster(a, b)
	l := hourlyLimit(5)
	exhaust(t, a, "B", "spent", l)
	mallory := tlsPool(t, "mallory", certs(t, p, "mallory"), map[string]string{"B": b.addr})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fresh := []peer.State{{Key: "fresh", Limit: l, Used: l.Count()}}
	calls := map[string]func() error{
		"Check refund": func() error {
			_, err := mallory.Check(ctx, "B", []peer.Request{{Key: "spent", Limit: l, Cost: 1, Refund: true}}, make([]peer.Answer, 1))
			return err
		},
		"Handoff":   func() error { return mallory.Handoff(ctx, "B", fresh) },
		"Replicate": func() error { _, err := mallory.Replicate(ctx, "B", fresh); return err },
		"Fetch":     func() error { _, _, err := mallory.Fetch(ctx, "B", "spent", &l); return err },
	}
	var wg sync.WaitGroup // the calls wait together
	for name, call := range calls {
		wg.Go(func() {
			start := time.Now()
			err := call()
			took := time.Since(start)
			wantCode(t, name, err, codes.PermissionDenied, `peer: "mallory" is not a member of this cluster`)
			if took < peer.AuthWait {
				t.Errorf("%s refused after %v, before AuthWait (%v)", name, took, peer.AuthWait)
			}
		})
	}
	var keys map[string]int64
	wg.Go(func() { keys = mallory.Keys(ctx) })
	wg.Wait()
	if len(keys) != 0 {
		t.Errorf("Stats answered mallory: %v", keys)
	}
	wantUntouched(t, b, a, "spent", "fresh", l)
	wantUnauthenticated(t, b, 5)
}

// A member's certificate used to speak for another member is refused at
// once, without waiting for gossip, on every call that names a sender and
// on both Replicate paths.
func TestTLSRefusesSenderTheCertificateDoesNotName(t *testing.T) {
	p := testkit.NewPKI(t, "", "cluster CA")
	m := newMembers("A", "B", "C")
	a, c := startTLSNode(t, "A", certs(t, p, "A"), m), startTLSNode(t, "C", certs(t, p, "C"), m)
	formCluster(a, c)
	l := hourlyLimit(5)
	exhaust(t, a, "C", "spent", l)
	setB := certs(t, p, "B")
	const refused = `peer: the certificate names ["B"], not the sender "A"`
	for call, err := range rawCalls(rawClient(t, c.addr, tlsCreds("C", p.Roots(), setB.Certificate())), "A", "spent", "fresh", l) {
		if call == "Stats" { // names no sender: B may ask
			if err != nil {
				t.Errorf("Stats with B's certificate: %v", err)
			}
			continue
		}
		wantCode(t, call, err, codes.PermissionDenied, refused)
	}
	impostor := tlsPool(t, "A", setB, map[string]string{"C": c.addr})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := impostor.Replicate(ctx, "C", []peer.State{{Key: "fresh", Limit: l, Used: l.Count()}})
	wantCode(t, "Replicate by hand", err, codes.PermissionDenied, refused)
	_, err = impostor.Check(ctx, "C", []peer.Request{{Key: "spent", Limit: l, Cost: 1, Refund: true}}, make([]peer.Answer, 1))
	wantCode(t, "Check refund", err, codes.PermissionDenied, refused)
	wantUntouched(t, c, a, "spent", "fresh", l)
	wantUnauthenticated(t, c, 6)
}

// A server that authenticates but is served in clear has no verified
// certificate to go by: it refuses every call Unauthenticated.
func TestTLSAuthenticateInClearRefusesEveryCall(t *testing.T) {
	b, lis := newNode(t, "B", testkit.NewClock(0), nil)
	b.scfg.Known = newMembers("A", "B").known
	b.serve(t, lis)
	a := startNode(t, "A", testkit.NewClock(0), nil)
	formCluster(a, b)
	l := hourlyLimit(5)
	for range l.Count() {
		if _, err := b.store.Take("spent", &l, b.h.clk.Now(), 1); err != nil {
			t.Fatal(err)
		}
	}
	const refused = "peer: a verified client certificate is required"
	for call, err := range rawCalls(peerClient(t, b.addr), "A", "spent", "fresh", l) {
		wantCode(t, call, err, codes.Unauthenticated, refused)
	}
	_, _, err := check(a, "B", "spent", l, 10*time.Second)
	wantCode(t, "pool check", err, codes.Unauthenticated, refused)
	wantUntouched(t, b, nil, "spent", "fresh", l)
	wantUnauthenticated(t, b, 6)
}
