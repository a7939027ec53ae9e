package bucket

import (
	"fmt"
	"math"
)

// StoreConfig configures a Store.
type StoreConfig struct {
	// MaxKeys bounds the number of keys held, split evenly across shards.
	// Zero means DefaultMaxKeys.
	MaxKeys int
	// MaxMemory bounds the bytes the keys take, split evenly across
	// shards. A key counts 104 bytes (its 64-byte entry, 24 of index, 16
	// of long-key header), a key longer than 23 bytes its bytes too
	// (rounded up to the allocator's size class), and a sliding window log
	// 1,088 (64 runs of 16 and their headers, reserved when the key takes
	// the log). Measured on the heap (BenchmarkMemoryPerKey) a short key
	// takes 81 bytes and a 1 KiB key 1,127: the count is an upper bound.
	// Pages of entries are allocated 256 at a time and kept. Zero means
	// DefaultMaxMemory.
	//
	// When a new key would pass MaxKeys or MaxMemory, the store drops keys
	// that hold nothing (full again, or past their window), least recently
	// used first, scanning at most evictScan of them; a key that has spent
	// is never dropped to make room. When none can be dropped, Take refuses
	// the new key with ErrFull (keys held keep working). State from peers
	// (Set, Charge, Merge, MergeEach) may take a shard an eighth over its
	// bounds, so that a replica being promoted never needs a spent key's
	// room; beyond that it is refused with ErrFull and counted (Refused).
	MaxMemory int64
	// MaxKeyBytes is the longest key accepted, at most MaxKeyLen; a longer
	// one is refused with an error wrapping ErrKeyTooLong. Zero means
	// MaxKeyLen.
	MaxKeyBytes int
	// Shards is the number of independently locked shards, a power of two.
	// More shards mean less lock contention between cores. Zero means
	// DefaultShards.
	Shards int
	// Seed pins the hash that places keys in shards and index cells to
	// xxhash under this seed, for tests. Zero (production) means
	// hash/maphash under a random seed drawn by NewStore, so that no
	// caller can aim keys at one shard.
	Seed uint64
	// Track makes the store remember which keys' spend changed, for
	// Changed (see track.go).
	Track bool
}

// Defaults for StoreConfig.
const (
	DefaultMaxKeys   = 1 << 20
	DefaultMaxMemory = 512 << 20
	DefaultShards    = 64
	maxShards        = 1 << 16
)

// DefaultStoreConfig returns the defaults: 1,048,576 keys and 512 MiB over
// 64 shards.
func DefaultStoreConfig() StoreConfig {
	return StoreConfig{MaxKeys: DefaultMaxKeys, MaxMemory: DefaultMaxMemory, Shards: DefaultShards}
}

// Validate reports the first invalid field, taking zero fields as their
// defaults. It does not modify c; NewStore fills the defaults.
func (c *StoreConfig) Validate() error {
	v := c.withDefaults()
	return v.check()
}

func (c StoreConfig) withDefaults() StoreConfig {
	if c.MaxKeys == 0 {
		c.MaxKeys = DefaultMaxKeys
	}
	if c.MaxMemory == 0 {
		c.MaxMemory = DefaultMaxMemory
	}
	if c.MaxKeyBytes == 0 {
		c.MaxKeyBytes = MaxKeyLen
	}
	if c.Shards == 0 {
		c.Shards = DefaultShards
	}
	return c
}

func (c *StoreConfig) check() error {
	if c.Shards < 1 || c.Shards > maxShards || c.Shards&(c.Shards-1) != 0 {
		return fmt.Errorf("bucket: shards must be a power of two between 1 and %d, got %d", maxShards, c.Shards)
	}
	if c.MaxKeys < c.Shards || c.MaxKeys > math.MaxUint32/2 {
		return fmt.Errorf("bucket: max keys must be between the shard count %d and %d, got %d", c.Shards, math.MaxUint32/2, c.MaxKeys)
	}
	if min := int64(c.Shards) * minShardMemory; c.MaxMemory < min || c.MaxMemory > 1<<50 {
		return fmt.Errorf("bucket: max memory must be between %d bytes (%d per shard) and 2^50, got %d", min, minShardMemory, c.MaxMemory)
	}
	if c.MaxKeyBytes < 1 || c.MaxKeyBytes > MaxKeyLen {
		return fmt.Errorf("bucket: max key bytes must be between 1 and %d, got %d", MaxKeyLen, c.MaxKeyBytes)
	}
	return nil
}
