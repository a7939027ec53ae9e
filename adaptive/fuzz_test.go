package adaptive

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/clock"
)

// FuzzController feeds arbitrary specs, samples and ticks (time may go
// backwards) to a controller: it never panics, Limit stays within [Min,
// Max], and a controller resumed from its State has the same Limit.
func FuzzController(f *testing.F) {
	f.Add(uint8(1), int64(1), int64(100), int64(10), 0.9, 0.2, 1.5, int64(time.Second), int64(5), []byte("\x00\x10\x20\x30\x01\xff\xff\x02"))
	f.Add(uint8(2), int64(3), int64(3), int64(0), 0.0, 1.0, 100.0, int64(0), int64(0), []byte("\x01\x00\x00\x00\x00\x00\x00\x09\x03\xff\x00\x00\x00\x00\x00\x00"))
	f.Add(uint8(2), int64(-1), int64(1<<62), int64(-7), -1.0, -0.5, 0.0, int64(-5), int64(-9), []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, alg uint8, lo, hi, initial int64, backoff, smoothing, tolerance float64, window, fallback int64, ops []byte) {
		spec := Spec{Algorithm: Algorithm(alg), Min: lo, Max: hi, Initial: initial, Backoff: backoff, Smoothing: smoothing,
			Tolerance: tolerance, Window: time.Duration(window), Fallback: fallback, MinSamples: 1, LatencyThreshold: time.Millisecond}
		now := clock.Instant(0)
		c := New(spec, now)
		sp := c.Spec()
		for len(ops) >= 8 {
			op := ops[0]
			v := int64(binary.LittleEndian.Uint32(ops[4:8]))
			switch op % 4 {
			case 0, 1:
				lat := time.Duration(v) * time.Duration(1+int64(ops[1])<<24)
				if ops[1]&1 == 1 {
					lat = -lat
				}
				c.Observe(Sample{Outcome: Outcome(ops[2] % 5), Latency: lat, InFlight: int64(ops[3]) << (ops[1] % 40)}, now)
			case 2:
				now = now.Add(time.Duration(v) * time.Millisecond)
				if ops[1]&1 == 1 {
					now = now.Add(-time.Duration(v) * 3 * time.Millisecond) // backwards
				}
				c.Tick(now)
			case 3:
				st := c.State()
				r := Resume(spec, st, now)
				if r.Limit() != c.Limit() {
					t.Fatalf("resumed Limit() = %d, want %d", r.Limit(), c.Limit())
				}
				c = r
			}
			if l := c.Limit(); l < sp.Min || l > sp.Max {
				t.Fatalf("Limit() = %d outside [%d, %d]", l, sp.Min, sp.Max)
			}
			ops = ops[8:]
		}
	})
}

// FuzzParseSpec: any adaptive block either fails to parse or gives a Spec
// that Validate accepts and whose controller starts at Initial.
func FuzzParseSpec(f *testing.F) {
	f.Add("algorithm: aimd\nmin: 2\nmax: 50\nwindow: 500ms\nlatency_threshold: 1s")
	f.Add("{algorithm: gradient2, min: 1, max: 9, tolerance: 2, fallback: 3, fallback_after: 1m}")
	f.Fuzz(func(t *testing.T, src string) {
		s, err := decode(t, src)
		if err != nil {
			return
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("ParseSpec accepted %+v, which Validate refuses: %v", s, err)
		}
		if got, want := New(s, 0).Limit(), s.WithDefaults().Initial; got != want {
			t.Fatalf("New(%+v).Limit() = %d, want Initial %d", s, got, want)
		}
	})
}
