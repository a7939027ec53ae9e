package forward

import (
	"context"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/clock"
)

// BenchmarkSettle is the cost of reserve and settle against a plain check
// in one run, on the key's owner (local) and through another node
// (forwarded): check is the baseline; reserve is a check that records a
// reservation; reserve+settle adds the settle of it.
func BenchmarkSettle(b *testing.B) {
	big := func(c *nodeConfig) { c.MaxReservations = 1 << 22 } // settled records stay for their TTL
	na := startNode(b, "A", clock.System(), big)
	nb := startNode(b, "B", clock.System(), big)
	setMembers(membersOf(na, nb), na, nb)
	key := keysOwnedBy(b, na.r, "B", "bench", 1)[0]
	for _, entry := range []struct {
		name string
		r    *Router
	}{{"local", nb.r}, {"forwarded", na.r}} {
		r := entry.r
		run := func(name string, reserve, settle bool) {
			b.Run(name+"/"+entry.name, func(b *testing.B) {
				b.ReportAllocs()
				ctx := context.Background()
				checks := []Check{{Key: key, Limit: benchLimit, Cost: 2}}
				if reserve {
					checks[0].Reserve = time.Second
				}
				out := make([]Result, 1)
				for b.Loop() {
					if err := r.Check(ctx, checks, out); err != nil || !out[0].Allowed {
						b.Fatalf("%+v, %v", out[0], err)
					}
					if !settle {
						continue
					}
					if _, err := r.Settle(ctx, out[0].Reservation, 1); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
		run("check", false, false)
		run("reserve", true, false)
		run("reserve+settle", true, true)
	}
}
