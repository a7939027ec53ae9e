package harness_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/forward"
	"github.com/ringlimit/ringlimit/internal/testonly/harness"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
)

// holding is one lease as its holder saw it: [from, to] is within the
// time the owner held it (from: the acquire's answer, to: the start of
// its first release, or the acquire's start plus its TTL if that is
// earlier); asked is when the acquire began.
type holding struct {
	asked, from, to time.Time
	owner           string
	phase           int32
}

// TestConcurrencyPartition: 12 holders (4 through each node) acquire a
// limit of 5 on a key C owns and release it through a random node, while
// C is cut off from A and B (each side told what failure detection would
// say) and then healed. From the log of grants and releases, the leases
// live at any instant never number more than 5; C grants nothing while cut
// off, the majority keeps granting, and so does C after the heal.
func TestConcurrencyPartition(t *testing.T) {
	const (
		holders  = 12
		rounds   = 150 // per holder
		deadline = 20 * time.Second
		ttl      = time.Second
	)
	c := start(t)
	a, b, own := c.Node("A"), c.Node("B"), c.Node("C")
	nodes := []*harness.Node{a, b, own}
	key := slotKey(t, "C", "B", "part")
	var (
		mu                                   sync.Mutex
		log                                  []holding
		phase                                atomic.Int32
		ops                                  atomic.Int64
		grants                               [3]atomic.Int64
		attempts, refused, degraded, failed  [3]int
		released, unknown, unreleased, grant [3]int
	)
	stop := time.Now().Add(deadline)
	var wg sync.WaitGroup
	for h := range holders {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(h), 33))
			via := nodes[h%3]
			for range rounds {
				if time.Now().After(stop) {
					return
				}
				p := phase.Load()
				start := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
				res, err := via.Router.Acquire(ctx, forward.Acquire{Key: key, Limit: five, Mode: bucket.FailClosed, TTL: ttl})
				cancel()
				got := time.Now()
				ops.Add(1)
				mu.Lock()
				attempts[p]++
				switch {
				case err != nil:
					failed[p]++
				case res.Degraded:
					degraded[p]++
				case !res.Allowed:
					refused[p]++
				default:
					grant[p]++
				}
				mu.Unlock()
				if err != nil || !res.Allowed || res.Degraded {
					// A refused holder waits as told, at most 20ms: it
					// paces the load, it synchronises nothing.
					time.Sleep(min(max(res.RetryAfter, time.Millisecond), 20*time.Millisecond))
					continue
				}
				grants[p].Add(1)
				hold := holding{asked: start, from: got, to: start.Add(res.ExpiresIn), owner: res.Owner, phase: p}
				time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond) // the work the lease covers
				rel := time.Now()
				outcome := 2 // unreleased
				for try := range 3 {
					ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
					r, err := nodes[(rng.IntN(3)+try)%3].Router.Release(ctx, res.Lease, forward.OutcomeOK, time.Since(got))
					cancel()
					if err == nil {
						outcome = map[bool]int{true: 0, false: 1}[r.Released]
						break
					}
				}
				// Whatever the answers, the lease was held until the first
				// release began (a release whose answer was lost may have
				// ended it there).
				if rel.Before(hold.to) {
					hold.to = rel
				}
				mu.Lock()
				switch outcome {
				case 0:
					released[p]++
				case 1:
					unknown[p]++
				default:
					unreleased[p]++
				}
				log = append(log, hold)
				mu.Unlock()
			}
		})
	}
	// The faults follow the traffic: the cut once a third of it ran and
	// 10 leases were granted, the heal after two thirds and 10 grants by
	// the majority.
	total := int64(holders * rounds)
	testkit.WaitFor(t, deadline, "a third of the acquires", func() error {
		return errors.Join(progress(ops.Load(), total/3), progress(grants[0].Load(), 10))
	})
	c.Net.Isolate("C")
	harness.SetView([]*harness.Node{a, b}, []*harness.Node{a, b}, "C")
	harness.SetView([]*harness.Node{own}, []*harness.Node{own}, "A", "B")
	cutAt := time.Now()
	phase.Store(1)
	testkit.WaitFor(t, deadline, "two thirds of the acquires", func() error {
		return errors.Join(progress(ops.Load(), 2*total/3), progress(grants[1].Load(), 10))
	})
	healAt := time.Now()
	c.Net.Restore("C")
	c.SetMembers(a, b, own)
	phase.Store(2)
	wg.Wait()

	for p, name := range []string{"before the cut", "during the cut", "after the heal"} {
		t.Logf("%s: %d acquires: %d granted (%d released, %d answered not held, %d not released), %d refused, %d degraded, %d failed",
			name, attempts[p], grant[p], released[p], unknown[p], unreleased[p], refused[p], degraded[p], failed[p])
		if attempts[p] != grant[p]+refused[p]+degraded[p]+failed[p] || grant[p] != released[p]+unknown[p]+unreleased[p] {
			t.Errorf("%s: totals do not add up", name)
		}
		if failed[p] != 0 {
			t.Errorf("%s: %d acquires failed (an error, not an answer)", name, failed[p])
		}
	}
	if grant[2] == 0 {
		t.Error("nothing granted after the heal")
	}
	for _, h := range log {
		// An acquire C began while cut off may be answered once healed,
		// when its successor acknowledged it; one answered before the heal
		// was granted while cut off. One asked before the cut may be
		// answered after it (on a busy machine, milliseconds after): C
		// had its successor's acknowledgement before the cut.
		if h.owner == "C" && h.asked.After(cutAt) && h.from.Before(healAt) {
			t.Errorf("C granted a lease while cut off: asked %v and answered %v after the cut", h.asked.Sub(cutAt), h.from.Sub(cutAt))
		}
	}
	if most, at := maxLive(log); most > five.Count() {
		for _, h := range log {
			if !h.from.After(at) && h.to.After(at) {
				t.Logf("live then: %v .. %v by %s (phase %d)", h.from.Sub(at), h.to.Sub(at), h.owner, h.phase)
			}
		}
		t.Fatalf("%d leases live at %v, the limit is %d", most, at, five.Count())
	} else {
		t.Logf("%d leases logged; at most %d live at once", len(log), most)
	}
}

func progress(got, want int64) error {
	if got < want {
		return fmt.Errorf("%d of %d", got, want)
	}
	return nil
}

// maxLive returns the most holdings live at one instant, and that instant.
func maxLive(log []holding) (int64, time.Time) {
	type edge struct {
		at time.Time
		d  int64
	}
	var edges []edge
	for _, h := range log {
		if h.to.After(h.from) {
			edges = append(edges, edge{h.from, 1}, edge{h.to, -1})
		}
	}
	slices.SortFunc(edges, func(x, y edge) int {
		if c := x.at.Compare(y.at); c != 0 {
			return c
		}
		return int(x.d - y.d) // an end before a start at the same instant
	})
	var live, most int64
	var at time.Time
	for _, e := range edges {
		if live += e.d; live > most {
			most, at = live, e.at
		}
	}
	return most, at
}
