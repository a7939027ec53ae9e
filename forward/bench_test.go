package forward

import (
	"context"
	"fmt"
	"testing"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/internal/testkit"
)

// benchLimit never rejects within a benchmark: the production clock refills
// it far faster than any loop spends.
var benchLimit = bucket.MustLimit(bucket.TokenBucket, bucket.MaxCount, 1e9, 0)

// BenchmarkForwardedCheck is one check through router A for a key owned by
// B, over loopback gRPC, with the callers running in parallel: GOMAXPROCS
// callers, then 32 per P, where concurrent checks share RPCs.
func BenchmarkForwardedCheck(b *testing.B) {
	for _, par := range []int{1, 32} {
		b.Run(fmt.Sprintf("callers=%dxP", par), func(b *testing.B) {
			na := startNode(b, "A", nil, nil)
			nb := startNode(b, "B", nil, nil)
			setMembers(membersOf(na, nb), na, nb)
			key := keysOwnedBy(b, na.r, "B", "bench", 1)[0]
			b.SetParallelism(par)
			benchChecks(b, na.r, key, "B")
			rpcs := testkit.Metric(b, na.reg, "ringlimit_forward_rpcs_total")
			checks := testkit.Metric(b, na.reg, "ringlimit_forward_checks_total")
			if rpcs > 0 {
				b.ReportMetric(checks/rpcs, "checks/rpc")
			}
		})
	}
}

// BenchmarkLocalCheck is the same check on the owner itself.
func BenchmarkLocalCheck(b *testing.B) {
	na := startNode(b, "A", nil, nil)
	nb := startNode(b, "B", nil, nil)
	setMembers(membersOf(na, nb), na, nb)
	key := keysOwnedBy(b, na.r, "B", "bench", 1)[0]
	benchChecks(b, nb.r, key, "B")
}

func benchChecks(b *testing.B, r *Router, key, owner string) {
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		checks := []Check{{Key: key, Limit: benchLimit, Cost: 1}}
		out := make([]Result, 1)
		ctx := context.Background()
		for pb.Next() {
			if err := r.Check(ctx, checks, out); err != nil {
				b.Error(err)
				return
			}
			if out[0].Owner != owner || out[0].Degraded {
				b.Errorf("%+v", out[0])
				return
			}
		}
	})
}
