package forward

import (
	"context"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/clock"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
)

// TestCalendarNeverMovesBack: 3 a month in Berlin on a key A owns. A's
// clock reads 2025-03-31T22:00:01Z (a second into April there), its
// successor B's two seconds earlier (still March). A's 3 spends, each
// acknowledged by B, exhaust April. A dies and B takes the key over from
// its replica: B refuses it in March's last second, and still refuses it
// once its own clock reaches April: the spend stays in April's window,
// where A made it, instead of moving back to March and being forgotten at
// the boundary (3 more admitted).
func TestCalendarNeverMovesBack(t *testing.T) {
	april := clock.Instant(time.Date(2025, 3, 31, 22, 0, 0, 0, time.UTC).UnixNano())
	clkA := testkit.NewClock(april + clock.Instant(time.Second) - clock.Instant(testGrace))
	clkB := testkit.NewClock(april - clock.Instant(time.Second) - clock.Instant(testGrace))
	a, b := startNode(t, "A", clkA, nil), startNode(t, "B", clkB, nil)
	setMembers(membersOf(a, b), a, b)
	clkA.Advance(testGrace)
	clkB.Advance(testGrace)
	set, err := (&bucket.LimitSpec{Limit: 3, Calendar: "month", Timezone: "Europe/Berlin"}).Parse("limit")
	if err != nil {
		t.Fatal(err)
	}
	l := set.Limit
	key := keysOwnedBy(t, a.r, "A", "cal", 1)[0]
	for i := range 3 {
		var out [1]Result
		if err := a.r.Check(context.Background(), []Check{{Key: key, Limit: l, Cost: 1, Sync: true}}, out[:]); err != nil ||
			!out[0].Allowed || out[0].Owner != "A" || out[0].Degraded {
			t.Fatalf("spend %d on A: %+v %v", i+1, out[0], err)
		}
	}
	if st, ok := b.r.shared.state("A", key, clkB.Now()); !ok || st.Used != 3 || st.Window != int64(april) {
		t.Fatalf("B's replica: %+v held %v; want 3 used in the window from %d", st, ok, april)
	}
	a.stop()
	setMembers(membersOf(b), b)
	if res := check1(t, b.r, key, l, 1); res.Allowed || res.Owner != "B" || res.ResetAfter != 720*time.Hour+time.Second {
		t.Fatalf("B in March's last second: %+v; want refused, reset after April's 720h and 1s", res)
	}
	clkB.Advance(2 * time.Second)
	if res := check1(t, b.r, key, l, 1); res.Allowed {
		t.Fatalf("B in April: %+v; want refused (A's 3 spends were April's)", res)
	}
}
