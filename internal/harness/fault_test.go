package harness_test

import (
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/internal/harness"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A limit of 30 a day: nothing refills while a test runs, and the Local
// failure mode's share on three members is 10.
var daily = bucket.MustLimit(bucket.TokenBucket, 30, 24*time.Hour, 30)

const (
	peerTimeout  = 200 * time.Millisecond
	checkTimeout = 3 * time.Second // longer than any peer deadline: no check fails
)

func start(t *testing.T) *harness.Cluster {
	t.Helper()
	return harness.Start(t, harness.Options{PeerTimeout: peerTimeout}, "A", "B", "C")
}

func want(t *testing.T, step string, got, want harness.Tally) {
	t.Helper()
	if got != want {
		t.Fatalf("%s: %+v, want %+v", step, got, want)
	}
}

// TestIsolateOneOfThreeThenHeal cuts the owner of two keys off from the
// other two nodes and heals it: while it is cut off, the others answer in
// each key's failure mode (fail_closed admits nothing; local admits the
// node's share, 10 of 30); the owner keeps deciding its own checks; after
// the heal every node reaches the owner again, which still has what it
// counted, and nothing more is admitted on the exhausted keys.
func TestIsolateOneOfThreeThenHeal(t *testing.T) {
	c := start(t)
	a, b, own := c.Node("A"), c.Node("B"), c.Node("C")
	closed, local := c.KeyOwnedBy("C", "closed"), c.KeyOwnedBy("C", "local")

	want(t, "exhaust through A", a.Check(closed, daily, bucket.FailClosed, 32, checkTimeout), harness.Tally{Allowed: 30, Rejected: 2})
	want(t, "exhaust through B", b.Check(local, daily, bucket.Local, 32, checkTimeout), harness.Tally{Allowed: 30, Rejected: 2})

	c.Net.Isolate("C")
	want(t, "fail_closed through A, C cut off", a.Check(closed, daily, bucket.FailClosed, 3, checkTimeout), harness.Tally{Rejected: 3, Degraded: 3})
	want(t, "local through A, C cut off", a.Check(local, daily, bucket.Local, 12, checkTimeout), harness.Tally{Allowed: 10, Rejected: 2, Degraded: 12})
	want(t, "local through B, C cut off", b.Check(local, daily, bucket.Local, 11, checkTimeout), harness.Tally{Allowed: 10, Rejected: 1, Degraded: 11})
	want(t, "the owner itself, cut off", own.Check(local, daily, bucket.Local, 2, checkTimeout), harness.Tally{Rejected: 2})

	c.Net.Restore("C")
	for _, n := range []*harness.Node{a, b} {
		want(t, "after the heal through "+n.Name, n.Check(local, daily, bucket.Local, 3, checkTimeout), harness.Tally{Rejected: 3})
		want(t, "after the heal through "+n.Name, n.Check(closed, daily, bucket.FailClosed, 3, checkTimeout), harness.Tally{Rejected: 3})
	}
}

// TestAsymmetricLink cuts one direction of one link at a time. With C→A
// cut, C decides A's checks (and spends) but its answers never arrive: A
// answers them locally, and what C spent shows when checks come through B.
// With A→C cut, C never hears A's checks: A answers them locally and C's
// count does not move (the connection is reset before the heal, so the
// checks held on the cut link are dropped rather than delivered late).
func TestAsymmetricLink(t *testing.T) {
	c := start(t)
	a, b := c.Node("A"), c.Node("B")
	k := c.KeyOwnedBy("C", "asym")
	want(t, "through A, before", a.Check(k, daily, bucket.Local, 1, checkTimeout), harness.Tally{Allowed: 1})

	c.Net.CutOneWay("C", "A")
	want(t, "through A, C→A cut", a.Check(k, daily, bucket.Local, 4, checkTimeout), harness.Tally{Allowed: 4, Degraded: 4})
	want(t, "through B, C→A cut", b.Check(k, daily, bucket.Local, 5, checkTimeout), harness.Tally{Allowed: 5})
	c.Net.Heal("A", "C")

	c.Net.CutOneWay("A", "C")
	want(t, "through A, A→C cut", a.Check(k, daily, bucket.Local, 4, checkTimeout), harness.Tally{Allowed: 4, Degraded: 4})
	c.Net.Reset("A", "C")
	c.Net.Heal("A", "C")
	// C spent 1 + 4 (A's, answers lost) + 5 (B's): 20 left.
	want(t, "through B after", b.Check(k, daily, bucket.Local, 22, checkTimeout), harness.Tally{Allowed: 20, Rejected: 2})
	want(t, "through A after", a.Check(k, daily, bucket.Local, 2, checkTimeout), harness.Tally{Rejected: 2})
}

// TestSlowLink delays the link between A and the owner: within the peer
// deadline the owner still decides every check, exactly; past it A answers
// in the failure mode.
func TestSlowLink(t *testing.T) {
	c := start(t)
	a, b := c.Node("A"), c.Node("B")
	k := c.KeyOwnedBy("C", "slow")

	c.Net.Delay("A", "C", 30*time.Millisecond)
	c.Net.Delay("C", "A", 30*time.Millisecond)
	want(t, "through A, 60ms round trip", a.Check(k, daily, bucket.FailClosed, 20, checkTimeout), harness.Tally{Allowed: 20})

	c.Net.Delay("A", "C", 150*time.Millisecond)
	c.Net.Delay("C", "A", 150*time.Millisecond)
	want(t, "through A, 300ms round trip", a.Check(k, daily, bucket.FailClosed, 3, checkTimeout), harness.Tally{Rejected: 3, Degraded: 3})

	c.Net.Delay("A", "C", 0)
	c.Net.Delay("C", "A", 0)
	// The owner decided the 20 quick checks and the 3 slow ones it received
	// after their deadline: 7 left.
	want(t, "through B after", b.Check(k, daily, bucket.FailClosed, 9, checkTimeout), harness.Tally{Allowed: 7, Rejected: 2})
}
