package main

import (
	"fmt"
	"strconv"
	"strings"
)

// minShardMemory is the smallest --max-memory share a shard of the store
// accepts (bucket: a few keys of the longest length).
const minShardMemory = 4096

// byteSize is a flag value in bytes: a whole number, optionally followed
// by KiB, MiB or GiB.
type byteSize int64

func (b *byteSize) String() string {
	switch v := int64(*b); {
	case v != 0 && v%(1<<30) == 0:
		return strconv.FormatInt(v>>30, 10) + "GiB"
	case v != 0 && v%(1<<20) == 0:
		return strconv.FormatInt(v>>20, 10) + "MiB"
	case v != 0 && v%(1<<10) == 0:
		return strconv.FormatInt(v>>10, 10) + "KiB"
	default:
		return strconv.FormatInt(v, 10)
	}
}

func (b *byteSize) Set(s string) error {
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}} {
		if rest, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = rest, u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 1 || n > (1<<50)/mult || n*mult < minShardMemory {
		return fmt.Errorf("want bytes from %d to 2^50, optionally with KiB, MiB or GiB, got %q", minShardMemory, s)
	}
	*b = byteSize(n * mult)
	return nil
}
