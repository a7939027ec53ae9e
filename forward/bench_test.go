package forward

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/clock"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
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
			na := startNode(b, "A", clock.System(), nil)
			nb := startNode(b, "B", clock.System(), nil)
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
	na := startNode(b, "A", clock.System(), nil)
	nb := startNode(b, "B", clock.System(), nil)
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

// BenchmarkReplicationModes is a check on the owner of its key, B, with
// A as the key's successor over loopback gRPC, in three modes in one run:
// interval (no bound in tokens: rounds every 20ms only, the baseline),
// maxloss=10 (the default: an answer waits for a round once a key has more
// than 5 tokens unsent) and sync (every admitted check waits for its
// replica). Callers spend one hot key, or 1024 keys; p99-µs is the 99th
// percentile of a check's latency.
func BenchmarkReplicationModes(b *testing.B) {
	// Spent, never refilled within a run: every round has states to send.
	lim := bucket.MustLimit(bucket.TokenBucket, 1<<30, 1024*time.Hour, 0)
	for _, keys := range []int{1, 1024} {
		for _, par := range []int{1, 32} {
			for _, mode := range []struct {
				name    string
				maxLoss int64
				sync    bool
			}{{"interval", -1, false}, {"maxloss=10", 10, false}, {"sync", 10, true}} {
				b.Run(fmt.Sprintf("keys=%d/callers=%dxP/%s", keys, par, mode.name), func(b *testing.B) {
					tweak := func(c *nodeConfig) { c.Replication.MaxLoss = mode.maxLoss }
					na := startNode(b, "A", clock.System(), tweak)
					nb := startNode(b, "B", clock.System(), tweak)
					setMembers(membersOf(na, nb), na, nb)
					owned := keysOwnedBy(b, nb.r, "B", "bench", keys)
					b.SetParallelism(par)
					var mu sync.Mutex
					var lat []time.Duration
					var worker atomic.Int64
					b.ReportAllocs()
					b.ResetTimer()
					b.RunParallel(func(pb *testing.PB) {
						w := int(worker.Add(1))
						checks := []Check{{Limit: lim, Cost: 1, Sync: mode.sync}}
						out := make([]Result, 1)
						mine := make([]time.Duration, 0, 1024)
						for i := w; pb.Next(); i++ {
							checks[0].Key = owned[i%len(owned)]
							start := time.Now()
							if err := nb.r.Check(context.Background(), checks, out); err != nil || !out[0].Allowed {
								b.Errorf("%+v %v", out[0], err)
								return
							}
							mine = append(mine, time.Since(start))
						}
						mu.Lock()
						lat = append(lat, mine...)
						mu.Unlock()
					})
					b.StopTimer()
					slices.Sort(lat)
					if len(lat) > 0 {
						b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "p99-µs")
					}
					b.ReportMetric(testkit.Metric(b, nb.reg, "ringlimit_replication_waits_total")/float64(b.N), "waits/op")
				})
			}
		}
	}
}
