package forward

import (
	"context"
	"testing"

	"github.com/ringlimit/ringlimit/clock"
)

// BenchmarkPeek is BenchmarkLocalCheck and BenchmarkForwardedCheck's
// check as a peek, on the same two nodes and key: `go test -bench
// 'LocalCheck|ForwardedCheck|Peek'` gives the cost of each in one run.
func BenchmarkPeek(b *testing.B) {
	for _, tc := range []struct {
		name  string
		entry string // the node the peek is asked of; B owns the key
	}{{"local", "B"}, {"forwarded", "A"}} {
		b.Run(tc.name, func(b *testing.B) {
			na := startNode(b, "A", clock.System(), nil)
			nb := startNode(b, "B", clock.System(), nil)
			setMembers(membersOf(na, nb), na, nb)
			key := keysOwnedBy(b, na.r, "B", "bench", 1)[0]
			r := nb.r
			if tc.entry == "A" {
				r = na.r
			}
			out := make([]Result, 1)
			if err := r.Check(context.Background(), []Check{{Key: key, Limit: benchLimit, Cost: 1}}, out); err != nil {
				b.Fatal(err) // the key exists, as the check benchmarks' does
			}
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				checks := []Check{{Key: key, Limit: benchLimit, Cost: 1, Peek: true}}
				out := make([]Result, 1)
				ctx := context.Background()
				for pb.Next() {
					if err := r.Check(ctx, checks, out); err != nil {
						b.Error(err)
						return
					}
					if out[0].Owner != "B" || out[0].Degraded || !out[0].Allowed {
						b.Errorf("%+v", out[0])
						return
					}
				}
			})
		})
	}
}
