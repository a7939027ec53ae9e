package node_test

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/clock"
	"github.com/ringlimit/ringlimit/internal/statefile"
	"github.com/ringlimit/ringlimit/node"
)

// BenchmarkStateFile: a node holding n spent keys writes its state file:
// the time a write takes (ms/write), its bytes per key, and the checks a
// second its store answers (2 goroutines, 10 s) while the node's own write
// loop runs, against the same with the loop stopped: ratio_checks_during.
//
//	go test -run '^$' -bench StateFile -benchtime 3x ./node
func BenchmarkStateFile(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			dir := b.TempDir()
			nd := startStateNode(b, dir, n, time.Second)
			lim := bucket.MustLimit(bucket.TokenBucket, 1000, 8784*time.Hour, 0) // no token back within the run
			now := clock.System().Now()
			keys := make([]string, n)
			for i := range keys {
				keys[i] = fmt.Sprintf("user:%d", i)
				if _, err := nd.Store().Take(keys[i], &lim, now, 1); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			start := time.Now()
			writes := 0
			for b.Loop() {
				if err := node.WriteState(nd); err != nil {
					b.Fatal(err)
				}
				writes++
			}
			perWrite := time.Since(start) / time.Duration(writes)
			b.StopTimer()
			fi, err := os.Stat(filepath.Join(dir, statefile.Name))
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(perWrite.Microseconds())/1000, "ms/write")
			b.ReportMetric(float64(fi.Size())/float64(n), "bytes/key")
			// Checks a second (2 goroutines, 10 s): with the node's own
			// write loop running (a write every second, or 4 times the last
			// write's duration when longer), and with no write at all.
			checks := func() float64 {
				var stop atomic.Bool
				var done atomic.Int64
				var cw sync.WaitGroup
				for g := range 2 {
					cw.Go(func() {
						c := clock.System()
						for i := g; !stop.Load(); i += 2 {
							nd.Store().Take(keys[i%n], &lim, c.Now(), 1)
							done.Add(1)
						}
					})
				}
				time.Sleep(10 * time.Second) // a measuring window (at least one write at 1M keys), not a wait for a condition
				stop.Store(true)
				cw.Wait()
				return float64(done.Load()) / 10
			}
			during := checks()
			node.StopStateLoop(nd)
			without := checks()
			b.ReportMetric(without, "checks/s")
			b.ReportMetric(during/without, "ratio_checks_during")
		})
	}
}

// startStateNode starts a node alone keeping its state file in dir every
// interval, with room for 2n keys; the benchmark closes it.
func startStateNode(b *testing.B, dir string, n int, interval time.Duration) *node.Node {
	cfg := node.DefaultLocalConfig()
	cfg.Name, cfg.DataDir, cfg.SnapshotInterval = "bench", dir, interval
	cfg.MaxKeys, cfg.MaxMemory = 2*n, 1<<30
	nd, err := node.Start(b.Context(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { closeNodeB(b, nd) })
	return nd
}

func closeNodeB(b *testing.B, n *node.Node) {
	ctx, cancel := contextWithTimeout(15 * time.Second)
	defer cancel()
	if err := n.Close(ctx); err != nil {
		b.Errorf("close: %v", err)
	}
}

// BenchmarkStateFileRefilled: a node holding n keys whose spend has
// refilled (nothing for the file to carry) writes its state file: the time
// a write takes, which is what the node's write loop spends every second
// on keys it keeps after their spend is gone.
//
//	go test -run '^$' -bench StateFileRefilled -benchtime 10x ./node
func BenchmarkStateFileRefilled(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			nd := startStateNode(b, b.TempDir(), n, time.Hour)
			lim := bucket.MustLimit(bucket.TokenBucket, 1000, time.Millisecond, 0) // a token back every microsecond
			then := clock.System().Now()
			for i := range n {
				if _, err := nd.Store().Take(fmt.Sprintf("user:%d", i), &lim, then, 1); err != nil {
					b.Fatal(err)
				}
			}
			for clock.System().Now().Sub(then) < time.Millisecond { // every key full again
				time.Sleep(time.Millisecond)
			}
			b.ResetTimer()
			for b.Loop() {
				if err := node.WriteState(nd); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/write")
		})
	}
}
