package harness_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/clock"
	"github.com/ringlimit/ringlimit/forward"
	"github.com/ringlimit/ringlimit/internal/peermsg"
	"github.com/ringlimit/ringlimit/internal/testonly/harness"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
	"github.com/ringlimit/ringlimit/node"
)

// ten is a capacity of 10 that refills nothing while a test runs.
var ten = bucket.MustLimit(bucket.TokenBucket, 10, 24*time.Hour, 10)

// peek asks n what a check of cost 1 on key would answer.
func peek(t *testing.T, n *harness.Node, key string, l bucket.Limit) forward.Result {
	t.Helper()
	out := make([]forward.Result, 1)
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	defer cancel()
	if err := n.Router.Check(ctx, []forward.Check{{Key: key, Limit: l, Cost: 1, Peek: true}}, out); err != nil {
		t.Fatalf("peek %s through %s: %v", key, n.Name, err)
	}
	return out[0]
}

// check sends one check of cost 1 on key through n.
func check(t *testing.T, n *harness.Node, key string, l bucket.Limit) forward.Result {
	t.Helper()
	out := make([]forward.Result, 1)
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	defer cancel()
	if err := n.Router.Check(ctx, []forward.Check{{Key: key, Limit: l, Cost: 1}}, out); err != nil {
		t.Fatalf("check %s through %s: %v", key, n.Name, err)
	}
	return out[0]
}

// reset resets key through n.
func reset(t *testing.T, n *harness.Node, key string, l bucket.Limit) forward.ResetResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	defer cancel()
	res, err := n.Router.Reset(ctx, key, l)
	if err != nil {
		t.Fatalf("reset %s through %s: %v", key, n.Name, err)
	}
	return res
}

func lens(c *harness.Cluster) []int {
	var ls []int
	for _, n := range c.Nodes {
		ls = append(ls, n.Store.Len())
	}
	return ls
}

// Capacity 10, 10 spends, then 1,000 peeks round robin through the three
// nodes: each answers refused with remaining 0, the owner's copy keeps
// its 10 spent, no store gains or loses a key, and a check after them is
// refused as before. 1,000 peeks of distinct keys no node holds answer
// allowed with remaining 9 and leave every store's size as it was.
func TestPeekThreeNodes(t *testing.T) {
	// A patient peer deadline: every peek must reach the owner C, even on
	// a starved CPU (with fault_test.go's 200ms, C's successor B stands
	// in for a C slow to answer, which is right but not what this counts).
	c := harness.Start(t, harness.Options{PeerTimeout: 10 * time.Second, Clock: clock.System()}, "A", "B", "C")
	key := c.KeyWith("C", "B", "peek")
	for i := range 10 {
		if r := check(t, c.Nodes[i%3], key, ten); !r.Allowed || r.Remaining != int64(9-i) {
			t.Fatalf("spend %d: %+v", i, r)
		}
	}
	synced(t, c, "C")
	before := lens(c)
	for i := range 1000 {
		n := c.Nodes[i%3]
		if r := peek(t, n, key, ten); r.Allowed || r.Remaining != 0 || r.Owner != "C" || r.Degraded {
			t.Fatalf("peek %d through %s: %+v; want refused by C, remaining 0", i, n.Name, r)
		}
	}
	if got := c.Used("C", key); got != 10 {
		t.Fatalf("C's copy has spent %d after the peeks, want 10", got)
	}
	if got := lens(c); !slices.Equal(got, before) {
		t.Fatalf("store sizes %v after the peeks, want %v", got, before)
	}
	for _, n := range c.Nodes {
		if r := check(t, n, key, ten); r.Allowed || r.Remaining != 0 {
			t.Fatalf("check through %s after the peeks: %+v; want refused", n.Name, r)
		}
	}
	for i := range 1000 {
		n := c.Nodes[i%3]
		if r := peek(t, n, fmt.Sprint("unknown-", i), ten); !r.Allowed || r.Remaining != 9 {
			t.Fatalf("peek of unknown key %d through %s: %+v; want allowed, remaining 9", i, n.Name, r)
		}
	}
	if got := lens(c); !slices.Equal(got, before) {
		t.Fatalf("store sizes %v after 1,000 peeks of unknown keys, want %v", got, before)
	}
	for _, n := range c.Nodes {
		if got := testkit.Metric(t, n.Reg, "ringlimit_keys"); got != float64(n.Store.Len()) {
			t.Fatalf("%s: ringlimit_keys %v, store %d", n.Name, got, n.Store.Len())
		}
	}
}

// An owner that cannot be reached: a peek is answered by the failure mode
// and spends nothing, not even the Local share.
func TestPeekOwnerUnreachable(t *testing.T) {
	c := start(t)
	a := c.Node("A")
	key := c.KeyWith("C", "B", "peekdown") // B owns it once C is down
	harness.SetView([]*harness.Node{a}, []*harness.Node{a, c.Node("B")}, "C")
	c.Net.Isolate("C")
	defer c.Net.Restore("C")
	// Replication is on: B stands in for C from its replica (none: full).
	for i := range 5 {
		for _, mode := range []bucket.FailureMode{bucket.Local, bucket.FailOpen, bucket.FailClosed} {
			out := make([]forward.Result, 1)
			err := a.Router.Check(context.Background(), []forward.Check{{Key: key, Limit: ten, Cost: 1, Peek: true, Mode: mode}}, out)
			if err != nil || !out[0].Allowed || out[0].Remaining != 9 {
				t.Fatalf("peek %d (%v) with C down: %+v, %v; want allowed, remaining 9", i, mode, out[0], err)
			}
		}
	}
	if got := a.Store.Len() + c.Node("B").Store.Len(); got != 0 {
		t.Fatalf("A and B hold %d keys after peeks, want 0", got)
	}
	// A alone, in a minority (B and C down): its failure modes answer,
	// degraded, and spend nothing, not even of the Local share (10 / 3
	// members: 3, 2 after a peek of 1, peek after peek).
	c.Net.Restore("C")
	c.Net.Isolate("A")
	defer c.Net.Restore("A")
	harness.SetView([]*harness.Node{a}, []*harness.Node{a}, "B", "C")
	for i := range 5 {
		for _, m := range []struct {
			mode      bucket.FailureMode
			allowed   bool
			remaining int64
		}{{bucket.Local, true, 2}, {bucket.FailOpen, true, 0}, {bucket.FailClosed, false, 0}} {
			out := make([]forward.Result, 1)
			err := a.Router.Check(context.Background(), []forward.Check{{Key: key, Limit: ten, Cost: 1, Peek: true, Mode: m.mode}}, out)
			if r := out[0]; err != nil || !r.Degraded || r.Allowed != m.allowed || r.Remaining != m.remaining {
				t.Fatalf("peek %d (%v), A in a minority: %+v, %v; want degraded, allowed %v, remaining %d", i, m.mode, r, err, m.allowed, m.remaining)
			}
		}
	}
}

// Reset, then kill -9 of the owner: the successor, now the owner, answers
// a full bucket (remaining 9 after one check), through every node left.
func TestResetThenOwnerCrash(t *testing.T) {
	c := start(t)
	a, b := c.Node("A"), c.Node("B")
	key := c.KeyWith("C", "B", "crash")
	want(t, "exhaust through A", a.Check(key, ten, bucket.Local, 12, checkTimeout), harness.Tally{Allowed: 10, Rejected: 2})
	synced(t, c, "C")
	usedBecomes(t, c, "C", key, 10)

	res := reset(t, a, key, ten)
	if res.Previous != 0 || res.Owner != "C" || len(res.Unconfirmed) != 0 {
		t.Fatalf("reset through A: %+v; want previous 0, owner C, all confirmed", res)
	}
	if got := c.Used("C", key); got != 0 {
		t.Fatalf("C holds %d spent after the reset, want 0", got)
	}
	c.Node("C").Stop() // a crash: C says nothing more
	harness.SetView([]*harness.Node{a, b}, []*harness.Node{a, b}, "C")
	if r := check(t, a, key, ten); !r.Allowed || r.Remaining != 9 || r.Owner != "B" {
		t.Fatalf("first check after the crash through A: %+v; want allowed by B, remaining 9", r)
	}
	if r := check(t, b, key, ten); !r.Allowed || r.Remaining != 8 {
		t.Fatalf("second check through B: %+v; want allowed, remaining 8", r)
	}
}

// A stand-in's copy pushed to the owner after a reset it did not hear of
// (the handoff of a rolling restart arriving late) does not bring the
// spend back: B spends 10 for C while C is cut off, C resets the key
// while B cannot hear it, then B's handoff reaches C and is refused.
func TestResetNotUndoneByHandoff(t *testing.T) {
	c := start(t)
	a, b, own := c.Node("A"), c.Node("B"), c.Node("C")
	key := c.KeyWith("C", "B", "handoff")
	c.Net.Cut("A", "C")
	c.Net.Cut("B", "C") // until after the reset: B's push must not reach C before it
	want(t, "spend 10 through A with C cut off (B stands in)", a.Check(key, ten, bucket.Local, 10, checkTimeout), harness.Tally{Allowed: 10})
	if got := c.Used("B", key); got != 10 {
		t.Fatalf("B's stand-in copy has spent %d, want 10", got)
	}
	c.Net.Heal("A", "C")
	res := reset(t, own, key, ten)
	if res.Previous != 10 || res.Owner != "C" || !slices.Equal(res.Unconfirmed, []string{"B"}) {
		t.Fatalf("reset through C: %+v; want previous 10 left (C never saw B's spend), owner C, unconfirmed [B]", res)
	}
	c.Net.Heal("B", "C")
	testkit.WaitFor(t, 10*time.Second, "B's handoff refused by C", func() error {
		if got := testkit.Metric(t, own.Reg, "ringlimit_states_before_reset_total"); got < 1 {
			return fmt.Errorf("C refused %v states", got)
		}
		return nil
	})
	for i, n := range []*harness.Node{a, b, own} {
		if r := check(t, n, key, ten); !r.Allowed || r.Remaining != int64(9-i) {
			t.Fatalf("check %d through %s after the handoff: %+v; want allowed, remaining %d", i, n.Name, r, 9-i)
		}
	}
	if got := c.Used("C", key); got != 3 {
		t.Fatalf("C's copy has spent %d, want the 3 checks after the reset", got)
	}
	// C's replica of the key, which carries the reset, makes B drop the
	// stand-in copy it kept from before it.
	synced(t, c, "C")
	testkit.WaitFor(t, 5*time.Second, "B's copy dropped", func() error {
		if b.Store.Has(key) {
			return fmt.Errorf("B still holds %d spent", c.Used("B", key))
		}
		return nil
	})
}

// A replica, a handoff or a fetched state from before the reset, arriving
// after it (the peer server runs calls concurrently: a replicate sent
// before the reset may be handled after it), is refused by a member that
// heard of the reset, and counted; one from after the reset is taken.
func TestResetNotUndoneByLateReplica(t *testing.T) {
	c := start(t)
	a, b := c.Node("A"), c.Node("B")
	key := c.KeyWith("C", "B", "late")
	want(t, "exhaust through A", a.Check(key, ten, bucket.Local, 10, checkTimeout), harness.Tally{Allowed: 10})
	synced(t, c, "C")
	c.Net.Delay("C", "B", 50*time.Millisecond) // the replicate path is slow; the reset waits on it
	res := reset(t, a, key, ten)
	if len(res.Unconfirmed) != 0 {
		t.Fatalf("reset: %+v; want every member confirmed", res)
	}
	c.Net.Delay("C", "B", 0)
	stale := []peermsg.State{{Key: key, Limit: ten, Used: 10}}
	if n, err := b.Router.Replicate("C", stale); err != nil || n != 0 {
		t.Fatalf("late replica: took %d, %v; want 0 taken", n, err)
	}
	if n := b.Router.Merge("C", slices.Clone(stale)); n != 0 {
		t.Fatalf("late handoff: merged %d, want 0", n)
	}
	if got := testkit.Metric(t, b.Reg, "ringlimit_states_before_reset_total"); got != 2 {
		t.Fatalf("B refused %v states, want 2", got)
	}
	// B is C's successor: kill C and B answers from what it holds.
	c.Node("C").Stop()
	harness.SetView([]*harness.Node{a, b}, []*harness.Node{a, b}, "C")
	want(t, "after the crash through A", a.Check(key, ten, bucket.Local, 6, checkTimeout), harness.Tally{Allowed: 6})
	want(t, "after the crash through B", b.Check(key, ten, bucket.Local, 6, checkTimeout), harness.Tally{Allowed: 4, Rejected: 2})
}

// A hot-key lease holder admits nothing from its old lease after a reset:
// on a fake clock (nothing refills, no lease expires), A takes a lease of
// 10 of C's key (capacity 60) and admits 5 of it; the key is reset
// through B; then A admits exactly the fresh bucket's 60, not 65.
func TestResetDropsLease(t *testing.T) {
	clk := testkit.NewClock(0)
	c := harness.Start(t, harness.Options{PeerTimeout: peerTimeout, Clock: clk}, "A", "B", "C")
	a, b := c.Node("A"), c.Node("B")
	hot := bucket.MustLimit(bucket.TokenBucket, 1000, time.Second, 60) // a lease of min(100, 60/6) = 10
	key := c.KeyOwnedBy("C", "hot")
	leased := func(n int) (allowed, fromLease int) {
		out := make([]forward.Result, 1)
		for range n {
			ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
			err := a.Router.Check(ctx, []forward.Check{{Key: key, Limit: hot, Cost: 1, Lease: true}}, out)
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			if out[0].Allowed {
				allowed++
			}
			if out[0].Leased {
				fromLease++
			}
		}
		return allowed, fromLease
	}
	if n, l := leased(6); n != 6 || l != 5 {
		t.Fatalf("before the reset: %d allowed, %d from the lease; want 6 and 5", n, l)
	}
	if got := c.Used("C", key); got != 11 {
		t.Fatalf("C has spent %d, want 11 (1 check, a lease of 10)", got)
	}
	if res := reset(t, b, key, hot); res.Previous != 49 || res.Owner != "C" {
		t.Fatalf("reset: %+v; want previous 49, owner C", res)
	}
	if n, _ := leased(70); n != 60 {
		t.Fatalf("after the reset A admitted %d of 70, want the fresh bucket's 60", n)
	}
}

// An owner that cannot be reached: the reset fails (ErrUnavailable) and
// nothing is reset, on the owner nor on its successor's replica.
func TestResetOwnerUnreachable(t *testing.T) {
	c := start(t)
	a := c.Node("A")
	key := c.KeyWith("C", "B", "unreach")
	want(t, "spend 4 through A", a.Check(key, ten, bucket.Local, 4, checkTimeout), harness.Tally{Allowed: 4})
	synced(t, c, "C")
	c.Net.Isolate("C")
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	defer cancel()
	if res, err := a.Router.Reset(ctx, key, ten); !errors.Is(err, forward.ErrUnavailable) {
		t.Fatalf("reset with C cut off: %+v, %v; want ErrUnavailable", res, err)
	}
	c.Net.Restore("C")
	if got := c.Used("C", key); got != 4 {
		t.Fatalf("C's copy has spent %d after the refused reset, want 4", got)
	}
	if got := testkit.Metric(t, c.Node("B").Reg, "ringlimit_peer_resets_received_total"); got != 0 {
		t.Fatalf("B heard of %v resets, want 0", got)
	}
	if r := check(t, a, key, ten); !r.Allowed || r.Remaining != 5 {
		t.Fatalf("check after the refused reset: %+v; want remaining 5", r)
	}
}

// twoLayers is a policy of two layers that refill nothing during a test:
// the tier (10 a day) and the route /login (3 a day, by user and route).
const twoLayers = `
version: peek
policies:
  api:
    default_tier: free
    tiers:
      free: { limit: 10, per: 24h }
    routes:
      - match: /login
        limit: { limit: 3, per: 24h, key: identity+route }
`

// httpTo returns a client that reaches the cluster's nodes over its network.
func httpTo(c *harness.Cluster) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
		return c.Net.Dial(ctx, "client", addr)
	}}}
}

// post sends body to path on node n and decodes the answer into out.
func post(t *testing.T, hc *http.Client, n *harness.Node, path, body string, out any) int {
	t.Helper()
	resp, err := hc.Post("http://"+n.Node.HTTPAddr()+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s to %s: %v", path, n.Name, err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatalf("POST %s to %s: %v", path, n.Name, err)
	}
	return resp.StatusCode
}

// A policy request of two layers, peeked over HTTP through each of three
// nodes, combines them as a check would and spends nothing: with 2 checks
// spent, a peek answers allowed by route:/login with remaining 0 (the
// route's 3rd of 3); after the 3rd check, refused by route:/login
// (remaining 0) while the tier has 7 left; a check then is refused as the
// peeks said, and a peek of the tier alone (another route) says 6 remain
// after one more.
func TestPeekPolicyThreeNodes(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(path, []byte(twoLayers), 0o644); err != nil {
		t.Fatal(err)
	}
	o := opts
	o.Node = func(cfg *node.Config) { cfg.PolicyPath = path }
	c := harness.Start(t, o, "A", "B", "C")
	hc := httpTo(c)
	defer hc.CloseIdleConnections()
	const login = `{"user":"u1","route":"/login"}`
	const peekLogin = `{"user":"u1","route":"/login","peek":true}`
	var r struct {
		Allowed   bool   `json:"allowed"`
		Remaining int64  `json:"remaining"`
		Scope     string `json:"scope"`
	}
	for i := range 2 {
		if st := post(t, hc, c.Nodes[i], "/v1/check", login, &r); st != 200 || r.Remaining != int64(2-i) {
			t.Fatalf("check %d: %d %+v", i, st, r)
		}
	}
	for _, n := range c.Nodes {
		for range 3 {
			if st := post(t, hc, n, "/v1/check", peekLogin, &r); st != 200 || !r.Allowed || r.Remaining != 0 || r.Scope != "route:/login" {
				t.Fatalf("peek through %s with 1 left: %d %+v; want 200, remaining 0, scope route:/login", n.Name, st, r)
			}
		}
	}
	if st := post(t, hc, c.Nodes[2], "/v1/check", login, &r); st != 200 || r.Remaining != 0 {
		t.Fatalf("3rd check: %d %+v", st, r)
	}
	for _, n := range c.Nodes {
		if st := post(t, hc, n, "/v1/check", peekLogin, &r); st != 429 || r.Allowed || r.Remaining != 0 || r.Scope != "route:/login" {
			t.Fatalf("peek through %s, route exhausted: %d %+v; want 429 by route:/login", n.Name, st, r)
		}
	}
	if st := post(t, hc, c.Nodes[0], "/v1/check", login, &r); st != 429 || r.Scope != "route:/login" {
		t.Fatalf("4th check: %d %+v; want 429 by route:/login", st, r)
	}
	// The tier spent 3 (the refused 4th was refunded), peeks nothing.
	if st := post(t, hc, c.Nodes[1], "/v1/check", `{"user":"u1","route":"/home"}`, &r); st != 200 || r.Remaining != 6 || r.Scope != "tier:free" {
		t.Fatalf("tier check: %d %+v; want remaining 6 of 10", st, r)
	}
	for _, n := range c.Nodes {
		if st := post(t, hc, n, "/v1/check", `{"user":"u1","route":"/home","peek":true}`, &r); st != 200 || r.Remaining != 5 {
			t.Fatalf("tier peek through %s: %d %+v; want remaining 5 (6 left, 1 peeked)", n.Name, st, r)
		}
	}
}
