package harness_test

import (
	"testing"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/internal/testonly/harness"
)

// A key's owner restarted with an empty store and back on the ring (B,
// which owned the key meanwhile, not yet told): a reset through A reaches
// C, which first fetches the key's state from B, as a check would, and so
// answers the previous remaining 0, not a full bucket; the reset reaches B
// too, and once every ring is whole the key admits exactly 10 again.
func TestResetOnRejoinedOwner(t *testing.T) {
	c := start(t)
	a, b := c.Node("A"), c.Node("B")
	key := c.KeyWith("C", "B", "rejoin")
	c.Node("C").Stop()
	c.SetMembers(a, b) // C left: B owns the key
	want(t, "exhaust through A while C is away", a.Check(key, ten, bucket.Local, 12, checkTimeout), harness.Tally{Allowed: 10, Rejected: 2})
	if got := c.Used("B", key); got != 10 {
		t.Fatalf("B's copy has spent %d, want 10", got)
	}
	own := c.Restart("C", opts)
	harness.SetView([]*harness.Node{a, own}, []*harness.Node{a, b, own}) // B not told yet
	res := reset(t, a, key, ten)
	if res.Previous != 0 || res.Owner != "C" || len(res.Unconfirmed) != 0 {
		t.Fatalf("reset through A of the key C came back to: %+v; want previous 0 (the 10 spent on B), owner C, all confirmed", res)
	}
	c.SetMembers(a, b, own)
	want(t, "after the reset through A", a.Check(key, ten, bucket.Local, 6, checkTimeout), harness.Tally{Allowed: 6})
	want(t, "after the reset through B", b.Check(key, ten, bucket.Local, 6, checkTimeout), harness.Tally{Allowed: 4, Rejected: 2})
}
