package bucket

import (
	"fmt"
	"math"
)

// StoreConfig configures a Store.
type StoreConfig struct {
	// MaxKeys bounds the number of keys held. When a shard is full, its least
	// recently used key is evicted; that is safe because a key nobody has
	// touched is full anyway. The bound is split evenly across shards.
	// Zero means DefaultMaxKeys.
	MaxKeys int
	// Shards is the number of independently locked shards, a power of two.
	// More shards mean less lock contention between cores. Zero means
	// DefaultShards.
	Shards int
	// Track makes the store remember which keys' spend changed, for
	// Changed (see track.go).
	Track bool
}

// Defaults for StoreConfig.
const (
	DefaultMaxKeys = 1 << 20
	DefaultShards  = 64
	maxShards      = 1 << 16
)

// DefaultStoreConfig returns the defaults: 1,048,576 keys over 64 shards.
func DefaultStoreConfig() StoreConfig {
	return StoreConfig{MaxKeys: DefaultMaxKeys, Shards: DefaultShards}
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
	return nil
}
