package bucket

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/ringlimit/ringlimit/clock"
)

// benchSizes are the numbers of distinct existing keys a benchmark cycles
// through: one key, a set that stays in cache, and one that does not.
var benchSizes = []int{1, 1 << 10, 1 << 16}

func benchKeyNames(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i)
	}
	return keys
}

// benchTake runs take over keys, from one goroutine and from all. Each
// goroutine keeps its own time, advancing 1µs a check from a common base, so
// that the benchmark itself shares no memory between cores.
func benchTake(b *testing.B, keys []string, take func(key string, now clock.Instant)) {
	mask := len(keys) - 1
	const base = clock.Instant(1e15)
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			take(keys[i&mask], base.Add(time.Duration(i)*time.Microsecond))
			i++
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		var seed atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			i, off := 0, int(seed.Add(7919))
			for pb.Next() {
				take(keys[(i+off)&mask], base.Add(time.Duration(i)*time.Microsecond))
				i++
			}
		})
	})
}

// filledStore returns a store with one admitted check of each key under lim.
func filledStore(b *testing.B, keys []string, lim *Limit) *Store {
	s, err := NewStore(DefaultStoreConfig())
	if err != nil {
		b.Fatal(err)
	}
	for _, k := range keys {
		if _, err := s.Take(k, lim, 1e15, 1); err != nil {
			b.Fatal(err)
		}
	}
	return s
}

// BenchmarkStoreTake is one check on an existing key, for each algorithm
// and key-set size. Time advances by 1µs a check without reading a clock
// (BenchmarkClock measures that on its own). The limit is high enough that
// every check is admitted, so each one does the full update.
func BenchmarkStoreTake(b *testing.B) {
	for _, n := range benchSizes {
		keys := benchKeyNames(n)
		for alg := range rateAlgorithms {
			count, per := int64(1_000_000), time.Second
			if alg == SlidingWindowLog {
				count, per = 100, time.Millisecond // keep the log short
			}
			lim := MustLimit(alg, count, per, 0)
			s := filledStore(b, keys, &lim)
			b.Run(fmt.Sprintf("keys=%d/%v", n, alg), func(b *testing.B) {
				benchTake(b, keys, func(k string, now clock.Instant) { s.Take(k, &lim, now, 1) })
			})
		}
	}
}

// BenchmarkStoreTakeShuffled is BenchmarkStoreTake's token bucket over
// 65,536 keys visited in a random order instead of the order they were
// inserted in: the hardware cannot prefetch the next key's memory, as it can
// when keys are cycled in the order they were allocated. Real traffic looks
// more like this.
func BenchmarkStoreTakeShuffled(b *testing.B) {
	keys := benchKeyNames(1 << 16)
	lim := MustLimit(TokenBucket, 1_000_000, time.Second, 0)
	s := filledStore(b, keys, &lim)
	r := rand.New(rand.NewPCG(1, 2))
	r.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	benchTake(b, keys, func(k string, now clock.Instant) { s.Take(k, &lim, now, 1) })
}

// BenchmarkBaselineXRate is the baseline in the same run: one
// golang.org/x/time/rate limiter per key, in a map guarded by one mutex,
// over the same keys, at the same rate.
func BenchmarkBaselineXRate(b *testing.B) {
	for _, n := range benchSizes {
		keys := benchKeyNames(n)
		var mu sync.Mutex
		m := make(map[string]*rate.Limiter, n)
		for _, k := range keys {
			m[k] = rate.NewLimiter(1_000_000, 1_000_000)
		}
		epoch := time.Unix(0, 0)
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			benchTake(b, keys, func(k string, now clock.Instant) {
				t := epoch.Add(now.Sub(0))
				mu.Lock()
				m[k].AllowN(t, 1)
				mu.Unlock()
			})
		})
	}
}

// BenchmarkClock is the cost of one reading of the production clock, which
// a node pays once per check on top of BenchmarkStoreTake.
func BenchmarkClock(b *testing.B) {
	c := clock.System()
	var sink int64
	for b.Loop() {
		sink += c.Now().UnixNano()
	}
	_ = sink
}

// BenchmarkMemoryPerKey fills a store with 1M keys of each algorithm and
// reports the heap bytes per key (runtime.MemStats after a GC). The sliding
// window log is measured at a limit of 10 with every key holding one run
// of 10; its memory grows by 16 bytes per run, up to 64 runs.
func BenchmarkMemoryPerKey(b *testing.B) {
	for alg := range rateAlgorithms {
		b.Run(alg.String(), func(b *testing.B) { benchMemory(b, alg, "user:%d") })
	}
	// A key too long to be held in its entry: "user:" and 35 digits.
	b.Run("token_bucket/40-byte-keys", func(b *testing.B) { benchMemory(b, TokenBucket, "user:%035d") })
	// Keys of 1 KiB (MaxKeyLen), 65,536 of them, in a store shaped like a
	// member's replica store (forward/shared.go: 16 shards).
	b.Run("token_bucket/1KiB-keys", func(b *testing.B) {
		benchMemoryN(b, TokenBucket, "user:%01019d", 1<<16, 16)
	})
	b.Run("token_bucket/short-keys-16-shards", func(b *testing.B) {
		benchMemoryN(b, TokenBucket, "user:%d", 1<<16, 16)
	})
}

// benchMemory reports the heap bytes per key of a store holding 1M keys of
// the form format (with the key's number), under alg.
func benchMemory(b *testing.B, alg Algorithm, format string) {
	benchMemoryN(b, alg, format, 1<<20, DefaultShards)
}

// benchMemoryN reports the heap bytes per key of a store of shards shards
// holding n keys of the form format, and the bytes the store counts per
// key against StoreConfig.MaxMemory.
func benchMemoryN(b *testing.B, alg Algorithm, format string, n, shards int) {
	lim := MustLimit(alg, 10, time.Hour, 0)
	cost := int64(1)
	if alg == SlidingWindowLog {
		cost = 10
	}
	for b.Loop() {
		b.StopTimer()
		var counted int64
		bytes := heapGrowth(b, func() any {
			s, err := NewStore(StoreConfig{MaxKeys: 2 * n, MaxMemory: 1 << 40, Shards: shards}) // room in every shard
			if err != nil {
				b.Fatal(err)
			}
			for i := range n {
				if _, err := s.Take(fmt.Sprintf(format, i), &lim, 1e15, cost); err != nil {
					b.Fatal(err)
				}
			}
			counted = s.Bytes()
			return s
		})
		b.ReportMetric(float64(bytes)/float64(n), "B/key")
		b.ReportMetric(float64(counted)/float64(n), "counted-B/key")
		b.StartTimer()
	}
}

// BenchmarkGCFullStore is one full garbage collection while a store holds
// 1M token-bucket keys: the collector's cost of the store itself, which a
// node pays on every GC cycle. Keys of up to 23 bytes are held in their
// entries; longer ones (a node's keys carry their namespace, so most are)
// in the pages' long-key buffers.
func BenchmarkGCFullStore(b *testing.B) {
	b.Run("short-keys", func(b *testing.B) { benchGCFullStore(b, "user:%d") })
	b.Run("40-byte-keys", func(b *testing.B) { benchGCFullStore(b, "user:%035d") })
}

func benchGCFullStore(b *testing.B, format string) {
	const n = 1 << 20
	lim := MustLimit(TokenBucket, 10, time.Hour, 0)
	s, err := NewStore(StoreConfig{MaxKeys: n, Shards: DefaultShards})
	if err != nil {
		b.Fatal(err)
	}
	for i := range n {
		s.Take(fmt.Sprintf(format, i), &lim, 1e15, 1)
	}
	runtime.GC()
	for b.Loop() {
		runtime.GC()
	}
	runtime.KeepAlive(s)
}

// heapGrowth returns how many heap bytes the value built by fill keeps alive.
func heapGrowth(tb testing.TB, fill func() any) int64 {
	tb.Helper()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	v := fill()
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(v)
	return int64(after.HeapAlloc) - int64(before.HeapAlloc)
}
