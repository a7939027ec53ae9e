package main

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"unsafe"
)

// distKind is a key distribution.
type distKind int

const (
	distUniform distKind = iota // every key equally likely
	distHot                     // always key 0
	distZipf                    // key k with probability ∝ (1+k)^-s
)

func parseDist(name string, zipfS float64) (distKind, error) {
	switch name {
	case "uniform":
		return distUniform, nil
	case "hot":
		return distHot, nil
	case "zipf":
		if !(zipfS > 1) {
			return 0, fmt.Errorf("--zipf-s: must be greater than 1, got %v", zipfS)
		}
		return distZipf, nil
	}
	return 0, fmt.Errorf("--dist: uniform, hot or zipf, got %q", name)
}

// keyPicker picks key indexes in [0, n). One per goroutine: not safe for
// concurrent use.
type keyPicker struct {
	kind distKind
	n    int
	rng  *rand.Rand
	zipf *rand.Zipf
}

func newKeyPicker(kind distKind, n int, zipfS float64, seed uint64) *keyPicker {
	p := &keyPicker{kind: kind, n: n, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	if kind == distZipf {
		p.zipf = rand.NewZipf(p.rng, zipfS, 1, uint64(n-1))
	}
	return p
}

func (p *keyPicker) next() int {
	switch p.kind {
	case distHot:
		return 0
	case distZipf:
		return int(p.zipf.Uint64())
	}
	return p.rng.IntN(p.n)
}

// keySet is the key strings prefix0 … prefix(n-1), built once so that the
// load loop does not format keys, back to back in one buffer: 2,000,000
// keys held as strings of their own were 2,000,000 objects for the load
// generator's collector to mark on every cycle (about 40 ms of a cycle at
// one processor), which delayed the requests it timed, whichever side it
// measured. The buffer holds no pointer.
type keySet struct {
	buf  []byte
	ends []uint32 // ends[i]: where key i ends in buf
}

func makeKeys(prefix string, n int) keySet {
	ks := keySet{ends: make([]uint32, n)}
	ks.buf = make([]byte, 0, n*(len(prefix)+len(strconv.Itoa(n))))
	for i := range n {
		ks.buf = strconv.AppendInt(append(ks.buf, prefix...), int64(i), 10)
		ks.ends[i] = uint32(len(ks.buf))
	}
	return ks
}

// at returns key i, a string over the buffer, which is never written again.
func (ks keySet) at(i int) string {
	start := uint32(0)
	if i > 0 {
		start = ks.ends[i-1]
	}
	return unsafe.String(&ks.buf[start], ks.ends[i]-start)
}

// n is how many keys ks holds.
func (ks keySet) n() int { return len(ks.ends) }
