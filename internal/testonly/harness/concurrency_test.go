package harness_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/forward"
	"github.com/ringlimit/ringlimit/internal/testonly/harness"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
	"github.com/ringlimit/ringlimit/ring"
)

// five is an in-flight limit of 5.
var five = bucket.MustLimit(bucket.Concurrency, 5, 0, 0)

func acquire(t *testing.T, n *harness.Node, key string, ttl time.Duration) forward.LeaseResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	defer cancel()
	res, err := n.Router.Acquire(ctx, forward.Acquire{Key: key, Limit: five, Mode: bucket.FailClosed, TTL: ttl})
	if err != nil {
		t.Fatalf("acquire %s through %s: %v", key, n.Name, err)
	}
	return res
}

func release(t *testing.T, n *harness.Node, id string) forward.ReleaseResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	defer cancel()
	res, err := n.Router.Release(ctx, id, forward.OutcomeOK, time.Millisecond)
	if err != nil {
		t.Fatalf("release through %s: %v", n.Name, err)
	}
	return res
}

// wave sends n acquires of key at once, spread over nodes, and returns
// the leases granted; none may be degraded.
func wave(t *testing.T, n int, key string, ttl time.Duration, nodes ...*harness.Node) []string {
	t.Helper()
	var mu sync.Mutex
	var got []string
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
			defer cancel()
			via := nodes[i%len(nodes)]
			res, err := via.Router.Acquire(ctx, forward.Acquire{Key: key, Limit: five, Mode: bucket.FailClosed, TTL: ttl})
			switch {
			case err != nil:
				t.Errorf("acquire %d through %s: %v", i, via.Name, err)
			case res.Degraded:
				t.Errorf("acquire %d through %s degraded: %+v", i, via.Name, res)
			case res.Allowed:
				mu.Lock()
				got = append(got, res.Lease)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return got
}

func inFlight(t *testing.T, n *harness.Node, key string, want int64) {
	t.Helper()
	if got := n.Router.InFlight(key); got != want {
		t.Fatalf("%s holds %d leases of %s, want %d", n.Name, got, key, want)
	}
}

// slotKey returns the first concurrency key "c|prefix-N" that owner owns
// on the ring of A, B and C and succ would own without owner.
func slotKey(t *testing.T, owner, succ, prefix string) string {
	t.Helper()
	rg, err := ring.New(ring.DefaultConfig(), []string{"A", "B", "C"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100000 {
		k := fmt.Sprintf("%s%s-%d", bucket.NamespaceConcurrency, prefix, i)
		if o, _ := rg.Owner(k); o == owner && rg.Successors(k, 1)[0] == succ {
			return k
		}
	}
	t.Fatalf("no concurrency key of %s with successor %s", owner, succ)
	return ""
}

// TestConcurrencyThreeNodes: a limit of 5 on a key C owns, 50 acquires at
// once through all three nodes: exactly 5 granted. 2 released: exactly 2
// of a second wave of 50. A double release lowers the count once. The
// leases never released (2 s TTL) free all 5 slots after 2 s.
func TestConcurrencyThreeNodes(t *testing.T) {
	c, clk := startFake(t)
	a, b, own := c.Node("A"), c.Node("B"), c.Node("C")
	key := slotKey(t, "C", "B", "slots")
	first := wave(t, 50, key, 2*time.Second, a, b, own)
	if len(first) != 5 {
		t.Fatalf("first wave: %d granted, want 5", len(first))
	}
	inFlight(t, own, key, 5)
	inFlight(t, b, key, 5) // the successor acknowledged every grant before its answer
	if r := release(t, a, first[0]); !r.Released || r.InFlight != 4 || r.Owner != "C" {
		t.Fatalf("release through A: %+v", r)
	}
	if r := release(t, b, first[1]); !r.Released || r.InFlight != 3 {
		t.Fatalf("release through B: %+v", r)
	}
	if r := release(t, own, first[1]); r.Released || r.InFlight != 3 {
		t.Fatalf("double release through C: %+v, want released false, 3 in flight", r)
	}
	second := wave(t, 50, key, 2*time.Second, a, b, own)
	if len(second) != 2 {
		t.Fatalf("second wave: %d granted, want 2", len(second))
	}
	inFlight(t, own, key, 5)
	if r := acquire(t, a, key, 2*time.Second); r.Allowed || r.RetryAfter != 2*time.Second || r.InFlight != 5 {
		t.Fatalf("a sixth acquire: %+v, want refused for 2s", r)
	}
	clk.Advance(2 * time.Second)
	inFlight(t, own, key, 0)
	if third := wave(t, 50, key, 2*time.Second, a, b, own); len(third) != 5 {
		t.Fatalf("after the TTL: %d granted, want 5", len(third))
	}
	if got := testkit.Metric(t, own.Reg, "ringlimit_leases_in_flight"); got != 5 {
		t.Fatalf("C's ringlimit_leases_in_flight = %v, want 5", got)
	}
}

// TestConcurrencyOwnerCrash: C holds 5 leases of its key and dies (kill
// -9); its successor B, owner next, denies a 6th. Each holder's release
// through a survivor answers released and frees exactly one slot; the
// leases not released are free after their TTL.
func TestConcurrencyOwnerCrash(t *testing.T) {
	c, clk := startFake(t)
	a, b, own := c.Node("A"), c.Node("B"), c.Node("C")
	key := slotKey(t, "C", "B", "crash")
	held := wave(t, 5, key, 10*time.Second, a, b, own)
	if len(held) != 5 {
		t.Fatalf("%d granted, want 5", len(held))
	}
	own.Stop() // kill -9: nothing it says reaches the others
	harness.SetView([]*harness.Node{a, b}, []*harness.Node{a, b}, "C")
	const next = "B" // C's successor
	succ, other := b, a
	for _, n := range []*harness.Node{a, b} {
		if r := acquire(t, n, key, 10*time.Second); r.Allowed || r.Degraded || r.Owner != next || r.InFlight != 5 {
			t.Fatalf("a 6th acquire through %s after the crash: %+v, want refused by %s", n.Name, r, next)
		}
	}
	for i, id := range held[:3] {
		via := []*harness.Node{a, b}[i%2]
		if r := release(t, via, id); !r.Released || r.InFlight != int64(4-i) || r.Owner != next {
			t.Fatalf("release %d through %s: %+v, want released by %s, %d in flight", i, via.Name, r, next, 4-i)
		}
	}
	if r := release(t, a, held[0]); r.Released {
		t.Fatalf("a second release after the crash: %+v", r)
	}
	if got := wave(t, 50, key, 10*time.Second, a, b); len(got) != 3 {
		t.Fatalf("after 3 releases: %d granted, want 3", len(got))
	}
	inFlight(t, other, key, 5) // the new owner's successor
	clk.Advance(10 * time.Second)
	inFlight(t, succ, key, 0)
	if got := wave(t, 50, key, 10*time.Second, a, b); len(got) != 5 {
		t.Fatalf("after the TTL: %d granted, want 5", len(got))
	}
}

// TestConcurrencyGracefulLeave: C, the owner, leaves with 3 leases held;
// the new owner B holds 3 and grants exactly 2 more.
func TestConcurrencyGracefulLeave(t *testing.T) {
	c, _ := startFake(t)
	a, b, own := c.Node("A"), c.Node("B"), c.Node("C")
	key := slotKey(t, "C", "B", "leave")
	held := wave(t, 3, key, time.Minute, a, b, own)
	if len(held) != 3 {
		t.Fatalf("%d granted, want 3", len(held))
	}
	harness.SetView([]*harness.Node{a, b}, []*harness.Node{a, b})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := own.Router.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	inFlight(t, b, key, 3)
	if got := wave(t, 50, key, time.Minute, a, b); len(got) != 2 {
		t.Fatalf("after the leave: %d granted, want 2", len(got))
	}
	inFlight(t, b, key, 5)
	if r := release(t, a, held[0]); !r.Released || r.Owner != "B" || r.InFlight != 4 {
		t.Fatalf("release of a lease C granted, through A: %+v", r)
	}
}
