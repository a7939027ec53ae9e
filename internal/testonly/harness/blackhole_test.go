package harness_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/clock"
	"github.com/ringlimit/ringlimit/forward"
	"github.com/ringlimit/ringlimit/internal/testonly/harness"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
	"github.com/ringlimit/ringlimit/ring"
)

// A node whose peer is a blackhole (it accepts connections and never says
// a word) answers every one of 5,000 concurrent checks on the peer's keys
// within its deadline, with the node's production peer deadline (500ms):
// the checks that find the peer's queue full at once, the ones queued when
// their batch fails, and the ones after by the successor. Each check has
// 5 s: none waits on the blackhole past the peer deadline, and 5,000
// goroutines under -race on a loaded machine took more than 2 s to be
// answered (165 and 910 of them in two busy suites).
func TestBlackholedOwnerAnswersEveryCheck(t *testing.T) {
	const (
		checks       = 5000
		peerTimeout  = 500 * time.Millisecond
		checkTimeout = 5 * time.Second
	)
	a := harness.StartNode(t, "A", harness.Options{PeerTimeout: peerTimeout, Clock: clock.System()}, nil)
	a.Router.SetMembers([]forward.Member{{Name: "A", Addr: a.Addr}, {Name: "B", Addr: testkit.Blackhole(t)}})
	rg, err := ring.New(ring.DefaultConfig(), []string{"A", "B"})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for i := 0; len(keys) < checks; i++ {
		k := fmt.Sprintf("bh-%d", i)
		if o, _ := rg.Owner(k); o == "B" {
			keys = append(keys, k)
		}
	}
	lim := bucket.MustLimit(bucket.TokenBucket, 10, time.Hour, 10)
	var (
		mu                                  sync.Mutex
		answered, allowed, degraded, failed int
		late                                []time.Duration
		errs                                []error
		wg                                  sync.WaitGroup
	)
	start := make(chan struct{})
	for i := range checks {
		wg.Go(func() {
			<-start
			ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
			defer cancel()
			began := time.Now()
			out := make([]forward.Result, 1)
			err := a.Router.Check(ctx, []forward.Check{{Key: keys[i], Limit: lim, Cost: 1, Mode: bucket.FailOpen}}, out)
			took := time.Since(began)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed++
				if len(errs) < 5 {
					errs = append(errs, err)
				}
				return
			}
			answered++
			if out[0].Allowed {
				allowed++
			}
			if out[0].Degraded {
				degraded++
			}
			if took >= checkTimeout {
				late = append(late, took)
			}
		})
	}
	close(start)
	wg.Wait()
	busy := testkit.Metric(t, a.Reg, "ringlimit_forward_busy_checks_total")
	t.Logf("%d answered (%d allowed, %d degraded; %v found the queue full), %d failed", answered, allowed, degraded, busy, failed)
	if answered != checks || failed != 0 {
		t.Fatalf("%d answered and %d failed (first errors %v), want %d and 0", answered, failed, errs, checks)
	}
	if len(late) != 0 {
		t.Fatalf("%d checks answered after their deadline (%v), e.g. %v", len(late), checkTimeout, late[0])
	}
}
