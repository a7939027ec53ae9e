package forward

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"google.golang.org/grpc"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
	peerv1 "github.com/ringlimit/ringlimit/proto/peerv1"
	"github.com/ringlimit/ringlimit/ring"
)

// fetchHold is a peer server interceptor that answers Fetch calls (the
// previous owner's Lookup runs, and counts the answer as shared) and then
// holds the answer: until release is closed, or, with drop set, until the
// caller's deadline, so that the caller never gets it.
type fetchHold struct {
	release chan struct{}
	drop    atomic.Bool
	served  atomic.Int64 // Fetch calls whose Lookup ran
}

func newFetchHold() *fetchHold { return &fetchHold{release: make(chan struct{})} }

func (h *fetchHold) option() grpc.ServerOption {
	return grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if info.FullMethod != peerv1.Peer_Fetch_FullMethodName {
			return handler(ctx, req)
		}
		resp, err := handler(ctx, req)
		h.served.Add(1)
		if h.drop.Load() {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		select {
		case <-h.release:
		case <-ctx.Done():
		}
		return resp, err
	})
}

// joinedKey returns a key the ring of A, B and C gives to C and the ring
// of A and B to A: C, joining, fetches it from A.
func joinedKey(t *testing.T) string {
	t.Helper()
	two, _ := ring.New(ring.Config{}, []string{"A", "B"})
	three, _ := ring.New(ring.Config{}, []string{"A", "B", "C"})
	for i := range 100000 {
		k := fmt.Sprintf("late-%d", i)
		o2, _ := two.Owner(k)
		if o3, _ := three.Owner(k); o2 == "A" && o3 == "C" {
			return k
		}
	}
	t.Fatal("no key moves from A to C")
	return ""
}

// joinWhileFetchHeld starts A, B and C, has A spend 7 of 10 on a key that
// moves from A to C, and tells only C that it joined (A pushes nothing):
// C's first check of the key fetches it from A, whose answer hold keeps
// until released.
func joinWhileFetchHeld(t *testing.T) (*testkit.Clock, *fetchHold, *node, string, bucket.Limit) {
	t.Helper()
	clk := testkit.NewClock(0)
	hold := newFetchHold()
	a := startNode(t, "A", clk, nil, hold.option())
	b := startNode(t, "B", clk, nil)
	c := startNode(t, "C", clk, realTransport)
	setMembers(membersOf(a, b), a, b)
	clk.Advance(testGrace)
	key, lim := joinedKey(t), hourly(10)
	if res := check1(t, a.r, key, lim, 7); res.Owner != "A" || res.Remaining != 3 {
		t.Fatalf("A's spend: %+v", res)
	}
	c.r.SetMembers(membersOf(a, b, c))
	return clk, hold, c, key, lim
}

// A joining owner's fetch that the previous owner answers after the check
// waiting on it gave up is still merged, and the check is not decided on
// a full bucket meanwhile: A spent 7 of 10; C's check that cannot wait is
// answered in its failure mode, C's store untouched; once A's answer
// arrives C holds 7 spent, and its next check leaves 2. Deciding on a full
// bucket (and dropping the answer A counted as shared) left 9 and admitted
// the key's whole limit again (TestRingJoinExact admitted 200 of 100 on a
// loaded machine).
func TestLateFetchAnswerIsMerged(t *testing.T) {
	clk, hold, c, key, lim := joinWhileFetchHeld(t)

	// The check can wait half of its 400 ms: A answers later.
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	var out [1]Result
	if err := c.r.Check(ctx, []Check{{Key: key, Limit: lim, Cost: 1}}, out[:]); err != nil {
		t.Fatal(err)
	}
	if res := out[0]; !res.Degraded {
		t.Fatalf("check on C while A's answer is on its way: %+v, want decided in its failure mode", res)
	}
	if c.store.Has(key) {
		t.Fatal("C's store holds the key before A's answer came")
	}
	if hold.served.Load() != 1 {
		t.Fatalf("A answered %d fetches, want 1", hold.served.Load())
	}
	close(hold.release)
	testkit.Eventually(t, 10*time.Second, "A's answer merged on C", func() bool {
		_, used, ok := c.store.Used(key, clk.Now())
		return ok && used == 7
	})
	if res := check1(t, c.r, key, lim, 1); res.Owner != "C" || res.Degraded || res.Remaining != 2 {
		t.Fatalf("check on C after A's answer: %+v, want decided by C, 2 left (10-7-1)", res)
	}
	if got := testkit.Metric(t, c.reg, "ringlimit_handoff_fetches_total", "result", "found"); got != 1 {
		t.Fatalf("found fetches on C = %v, want 1", got)
	}
}

// A fetch from a member that fails after the member answered (the answer
// lost on the way) leaves the key to be fetched again, even once the
// member's push of a later spend has given it a copy: A spent 7, answered
// C's fetch (counting 7 as shared) but C never got it; A spent 1 more and
// pushed it (1, what C has not seen). C's next check fetches again (8)
// and leaves 1, not 8.
func TestLostFetchAnswerIsFetchedAgain(t *testing.T) {
	clk := testkit.NewClock(0)
	hold := newFetchHold()
	hold.drop.Store(true)
	a := startNode(t, "A", clk, nil, hold.option())
	b := startNode(t, "B", clk, nil)
	c := startNode(t, "C", clk, func(c *nodeConfig) {
		c.PeerTimeout = 300 * time.Millisecond
		realTransport(c)
	})
	setMembers(membersOf(a, b), a, b)
	clk.Advance(testGrace)
	key, lim := joinedKey(t), hourly(10)
	if res := check1(t, a.r, key, lim, 7); res.Owner != "A" || res.Remaining != 3 {
		t.Fatalf("A's spend: %+v", res)
	}
	c.r.SetMembers(membersOf(a, b, c))
	if res := check1(t, c.r, key, lim, 1); !res.Degraded {
		t.Fatalf("check on C while its fetch fails: %+v, want decided in its failure mode", res)
	}
	testkit.Eventually(t, 10*time.Second, "C's fetch to fail", func() bool {
		return testkit.Metric(t, c.reg, "ringlimit_handoff_fetches_total", "result", "unreachable") == 1
	})
	if hold.served.Load() != 1 || c.store.Has(key) {
		t.Fatalf("A answered %d fetches, C holds the key: %v; want 1, false", hold.served.Load(), c.store.Has(key))
	}
	hold.drop.Store(false)
	close(hold.release)
	// A spends 1 more as the owner it still is in its view, then learns of
	// C and pushes what C has not seen.
	if res := check1(t, a.r, key, lim, 1); res.Owner != "A" || res.Remaining != 2 {
		t.Fatalf("A's second spend: %+v", res)
	}
	setMembers(membersOf(a, b, c), a, b)
	testkit.Eventually(t, 10*time.Second, "A's push to C", func() bool {
		_, used, ok := c.store.Used(key, clk.Now())
		return ok && used == 1
	})
	if res := check1(t, c.r, key, lim, 1); res.Owner != "C" || res.Degraded || res.Remaining != 1 {
		t.Fatalf("check on C after A's push: %+v, want decided by C, 1 left (10-8-1)", res)
	}
	if hold.served.Load() != 2 {
		t.Fatalf("A answered %d fetches, want 2", hold.served.Load())
	}
}

// A fetch outlives the check that started it, whose key may point into a
// buffer the peer server reuses for its next message: the fetch keeps its
// own copy. Here the key's bytes are overwritten as soon as the check
// returns; A's answer (7 spent) must still land on the key, leaving 2.
func TestFetchKeepsItsKey(t *testing.T) {
	clk, hold, c, key, lim := joinWhileFetchHeld(t)

	buf := []byte(key)
	reused := unsafe.String(unsafe.SliceData(buf), len(buf))
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	var out [1]Result
	if err := c.r.Check(ctx, []Check{{Key: reused, Limit: lim, Cost: 1}}, out[:]); err != nil {
		t.Fatal(err)
	}
	if !out[0].Degraded {
		t.Fatalf("check on C while A's answer is on its way: %+v, want decided in its failure mode", out[0])
	}
	for i := range buf {
		buf[i] = 'x' // the buffer holds the next message now
	}
	close(hold.release)
	testkit.Eventually(t, 10*time.Second, "A's answer merged on C", func() bool {
		_, used, ok := c.store.Used(key, clk.Now())
		return ok && used == 7
	})
	if c.store.Has(string(buf)) {
		t.Fatalf("C holds a copy of %q, the bytes that reused the key's buffer", buf)
	}
	if res := check1(t, c.r, key, lim, 1); res.Owner != "C" || res.Degraded || res.Remaining != 2 {
		t.Fatalf("check on C after A's answer: %+v, want decided by C, 2 left (10-7-1)", res)
	}
}
