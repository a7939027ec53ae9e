package forward

import (
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/adaptive"
	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/clock"
	"github.com/ringlimit/ringlimit/internal/peermsg"
)

func newTestTable(t *testing.T) *adaptiveTable {
	t.Helper()
	m, err := newAdaptiveMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	return newAdaptiveTable(m)
}

// scaled keeps the algorithm and period, scales an explicit burst with
// the count, and leaves a limit it cannot build (or the same count) alone.
func TestScaled(t *testing.T) {
	for i, tc := range []struct {
		base         bucket.Limit
		n            int64
		count, burst int64
	}{
		{bucket.MustLimit(bucket.TokenBucket, 10, time.Second, 0), 4, 4, 4},
		{bucket.MustLimit(bucket.TokenBucket, 10, time.Second, 30), 5, 5, 15},
		{bucket.MustLimit(bucket.TokenBucket, 10, time.Second, 11), 1, 1, 1},
		{bucket.MustLimit(bucket.FixedWindow, 20, time.Minute, 0), 7, 7, 7},
		{bucket.MustLimit(bucket.Concurrency, 5, 0, 0), 9, 9, 9},
		{bucket.MustLimit(bucket.FixedWindow, 20, time.Minute, 0), 20, 20, 20},
		{bucket.MustLimit(bucket.FixedWindow, 20, time.Minute, 0), 0, 20, 20},
	} {
		got := scaled(tc.base, tc.n)
		if got.Count() != tc.count || got.Burst() != tc.burst || got.Algorithm() != tc.base.Algorithm() || got.Per() != tc.base.Per() {
			t.Errorf("step %d: scaled(%v, %d) = %v (burst %d), want count %d burst %d", i, tc.base, tc.n, got, got.Burst(), tc.count, tc.burst)
		}
	}
}

var tableSpec = adaptive.Spec{Algorithm: adaptive.AIMD, Min: 5, Max: 50, Initial: 20, Window: time.Second, MinSamples: 2, Backoff: 0.51}

var tableBase = bucket.MustLimit(bucket.FixedWindow, 20, time.Second, 0)

// cut gives key's controller two errors and closes their window at now+1s.
func cut(tb *adaptiveTable, key string, now clock.Instant) clock.Instant {
	for range 2 {
		tb.observe(key, &tableSpec, "s", tableBase, adaptive.Sample{Outcome: adaptive.Error}, now)
	}
	now = now.Add(time.Second)
	tb.limit(key, &tableSpec, "s", tableBase, now)
	return now
}

// A replicated state resumes on the node that becomes the owner; a node
// sent a replica of a key drops the controller it ran for it; a changed
// spec carries the controller over, clamped into its range.
func TestAdaptiveTableReplica(t *testing.T) {
	owner, succ := newTestTable(t), newTestTable(t)
	now := cut(owner, "k", 0)
	if l := owner.limit("k", &tableSpec, "s", tableBase, now); l.Count() != 10 {
		t.Fatalf("owner's limit after a cut: %d, want 10", l.Count())
	}
	st := owner.state("k", now)
	succ.limit("k", &tableSpec, "s", tableBase, now) // a controller from a time it owned the key
	succ.replica("owner", &peermsg.State{Key: "k", Adaptive: st}, now)
	if succ.state("k", now) != nil {
		t.Fatal("the successor kept its own controller beside the owner's replica")
	}
	if l := succ.limit("k", &tableSpec, "s", tableBase, now.Add(time.Second)); l.Count() != 10 {
		t.Fatalf("successor resumed at %d, want 10", l.Count())
	}
	narrow := tableSpec
	narrow.Max = 8
	if l := owner.limit("k", &narrow, "s", tableBase, now); l.Count() != 8 {
		t.Fatalf("after the spec's max became 8: %d, want 8", l.Count())
	}
	if got := owner.takeDirty(now, false); len(got) != 1 || got[0].Key != "k" || got[0].Adaptive == nil {
		t.Fatalf("dirty controllers %+v, want k's", got)
	}
	if got := owner.takeDirty(now, false); len(got) != 0 {
		t.Fatalf("dirty controllers twice: %+v", got)
	}
}

// The table holds at most maxAdaptive controllers: a full table drops one
// seen least recently (of those it looks at) for each new key.
func TestAdaptiveTableBound(t *testing.T) {
	if testing.Short() {
		t.Skip("fills a table of 65,536 controllers")
	}
	tb := newTestTable(t)
	for i := range maxAdaptive + 100 {
		tb.limit(fmt.Sprint("k", i), &tableSpec, "s", tableBase, clock.Instant(i))
	}
	if n := len(tb.ctl); n != maxAdaptive {
		t.Fatalf("%d controllers, want %d", n, maxAdaptive)
	}
	if n := len(tb.dirty); n != maxAdaptive {
		t.Fatalf("%d dirty controllers, want %d (a dropped controller is not sent)", n, maxAdaptive)
	}
	if _, ok := tb.ctl[fmt.Sprint("k", maxAdaptive+99)]; !ok {
		t.Fatal("the newest key has no controller")
	}
}
