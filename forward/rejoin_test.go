package forward

import (
	"context"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
	peerv1 "github.com/ringlimit/ringlimit/proto/peerv1"
)

// TestBackFromMinorityCountsTheCut: C, cut off from A and B, keeps its
// ring and decides its key on its copy (5 of it); the majority's ring
// gives the key to A, which spends 60 on C's replica (10 spent before the
// cut). When C has a majority again, whether it hears from both others
// (its ring as before the cut) or from A alone (a new ring that still
// gives it the key), what A spent reaches C's copy before C's next
// decision:
//   - by A's push, when it comes while C is still in its minority (C then
//     does not ask again);
//   - else by a fetch from A at C's first check: A's push, once A's own
//     ring gives the key back, is held back here, so nothing else would
//     bring it. C's resync has put its copy (15) on A's by then, so the
//     answer (85) counts C's spend a second time: C admits nothing more,
//     less than the 25 left, never more.
//
// Before, C decided on its own copy alone and admitted 85 more.
func TestBackFromMinorityCountsTheCut(t *testing.T) {
	for _, tc := range []struct {
		name      string
		cSeesB    bool
		pushFirst bool
		want      int
	}{
		{"ring before the cut, push first", true, true, 15},
		{"ring without B, push first", false, true, 15},
		{"ring before the cut, fetched", true, false, 0},
		{"ring without B, fetched", false, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk, a, b, c, key := rejoinCluster(t, "t|rejoin-", !tc.pushFirst)
			l := bucket.MustLimit(bucket.TokenBucket, 100, 24*time.Hour, 0) // a minute refills none
			used := func(n *node) int64 {
				_, u, _ := n.store.Used(key, clk.Now())
				return u
			}
			if n := admitted(t, c.r, key, l, 10); n != 10 {
				t.Fatalf("C admitted %d of 10 before the cut", n)
			}
			advanceUntil(t, clk, 20*time.Millisecond, 10*time.Second, "C's spend replicated on A", func() bool {
				st, ok := a.r.shared.state("C", key, clk.Now())
				return ok && st.Used == 10
			})

			setMembers([]Member{member(a, false), member(b, false), member(c, true)}, a, b)
			setMembers([]Member{member(a, true), member(b, true), member(c, false)}, c)
			clk.Advance(time.Minute) // past every grace period of the cut
			if n := admitted(t, a.r, key, l, 60); n != 60 {
				t.Fatalf("A admitted %d of 60 during the cut", n)
			}
			if n := admitted(t, c.r, key, l, 5); n != 5 {
				t.Fatalf("C admitted %d of 5 during the cut", n)
			}

			setMembers(membersOf(a, b, c), a)
			if tc.pushFirst {
				testkit.Eventually(t, 10*time.Second, "A's push on C's copy", func() bool { return used(c) == 85 })
			}
			setMembers([]Member{member(a, false), member(b, !tc.cSeesB), member(c, false)}, c)
			if !tc.pushFirst {
				advanceUntil(t, clk, time.Millisecond, 10*time.Second, "C's resync on A's copy", func() bool { return used(a) == 85 })
			}
			if n := admitted(t, c.r, key, l, 100); n != tc.want {
				t.Errorf("C admitted %d after coming back, want %d (of 100: 10 before the cut, 5 on C and 60 on A during it)", n, tc.want)
			}
		})
	}
}

// TestMinorityBackToPartOfTheRingWaitsForLeases: a node cut off from the
// two others keeps its ring while it is in a minority; the majority's ring
// gives its key to one of them, which grants leases. When the node hears
// from only one of the two again, its ring changes (the other still dead
// to it) and it owns the key as before the cut: it must not grant from
// what it held before the cut while the leases granted meanwhile live.
// A's push of the key's set, once A sees C again, is held back.
func TestMinorityBackToPartOfTheRingWaitsForLeases(t *testing.T) {
	clk, a, b, c, key := rejoinCluster(t, "c|rejoin-", true)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const limit = 5
	acq := Acquire{Key: key, Limit: concurrency(limit), Mode: bucket.FailClosed, TTL: 30 * time.Second}

	// The cut: C alone, A and B the majority; A owns the key meanwhile.
	setMembers([]Member{member(a, false), member(b, false), member(c, true)}, a, b)
	setMembers([]Member{member(a, true), member(b, true), member(c, false)}, c)
	clk.Advance(time.Minute) // past every grace period
	for i := range 3 {
		if res, err := a.r.Acquire(ctx, acq); err != nil || !res.Allowed {
			t.Fatalf("acquire %d through A during the cut: %+v %v", i, res, err)
		}
	}
	// C hears from A again, not yet from B; A sees C back.
	setMembers(membersOf(a, b, c), a)
	setMembers([]Member{member(a, false), member(b, true), member(c, false)}, c)
	granted := 0
	for i := range 6 {
		res, err := c.r.Acquire(ctx, acq)
		if err != nil {
			t.Fatalf("acquire %d through C: %v", i, err)
		}
		if res.Allowed {
			granted++
		}
	}
	if granted != limit-3 {
		t.Errorf("C granted %d leases after coming back, want %d: A granted 3 during the cut, all live", granted, limit-3)
	}
}

// rejoinCluster starts A, B and C, C refusing every handoff while held is
// set, and finds a key (named prefix and a number) that C owns on the ring
// of the three and on A and C's, that A owns on A and B's, and whose
// successor is A.
func rejoinCluster(t *testing.T, prefix string, held bool) (clk *testkit.Clock, a, b, c *node, key string) {
	t.Helper()
	clk = testkit.NewClock(0)
	hold := grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if info.FullMethod == peerv1.Peer_Handoff_FullMethodName && held {
			return nil, status.Error(codes.Unavailable, "handoffs held")
		}
		return handler(ctx, req)
	})
	a, b, c = startNode(t, "A", clk, nil), startNode(t, "B", clk, nil), startNode(t, "C", clk, nil, hold)
	setMembers(membersOf(a, b, c), a, b, c)
	all, ab, ac := mustRing(t, "A", "B", "C"), mustRing(t, "A", "B"), mustRing(t, "A", "C")
	for i := 0; key == ""; i++ {
		k := prefix + strconv.Itoa(i)
		if ownerIn(all, "", k) == "C" && ownerIn(ac, "", k) == "C" && ownerIn(ab, "", k) == "A" &&
			all.AppendSuccessors(nil, k, 1)[0] == "A" {
			key = k
		}
	}
	return clk, a, b, c, key
}

// member is n as a member list names it, down or up.
func member(n *node, down bool) Member { return Member{Name: n.name, Addr: n.addr, Down: down} }

func mustRing(t *testing.T, names ...string) Owners {
	t.Helper()
	o, err := newRing(names)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// admitted runs n checks of cost 1 through r, one by one, and counts the
// allowed.
func admitted(t *testing.T, r *Router, key string, l bucket.Limit, n int) int {
	t.Helper()
	got := 0
	for range n {
		if check1(t, r, key, l, 1).Allowed {
			got++
		}
	}
	return got
}
