package main

import (
	"fmt"
	"math/rand/v2"
	"strconv"
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

// makeKeys returns the key strings prefix0 … prefix(n-1), built once so that
// the load loop does not format keys.
func makeKeys(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = prefix + strconv.Itoa(i)
	}
	return keys
}
