package bucket

import (
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/clock"
)

// BenchmarkStorePeek is BenchmarkStoreTake's check as a peek, on the same
// keys and limits: `go test -bench 'StoreTake$|StorePeek'` gives both in
// one run. A peek copies the key's state (and a log's runs) instead of
// updating it in place.
func BenchmarkStorePeek(b *testing.B) {
	for _, n := range benchSizes {
		keys := benchKeyNames(n)
		for alg := range rateAlgorithms {
			count, per := int64(1_000_000), time.Second
			if alg == SlidingWindowLog {
				count, per = 100, time.Millisecond
			}
			lim := MustLimit(alg, count, per, 0)
			s := filledStore(b, keys, &lim)
			b.Run(fmt.Sprintf("keys=%d/%v", n, alg), func(b *testing.B) {
				benchTake(b, keys, func(k string, now clock.Instant) { s.Peek(k, &lim, now, 1) })
			})
		}
	}
}
