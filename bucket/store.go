package bucket

import (
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"

	"github.com/ringlimit/ringlimit/clock"
)

// Store holds the state of many keys, each under the limit its checks name.
// It is sharded by a seeded xxhash of the key so that concurrent callers on
// different keys rarely share a lock, and each shard is an LRU bounded in
// keys and bytes that drops only keys holding nothing (see
// StoreConfig.MaxMemory). Store is safe for concurrent use.
type Store struct {
	shards []shard
	shift  uint // the top bits of a key's hash pick its shard
	hasher hasher
	maxKey int   // StoreConfig.MaxKeyBytes
	memory int64 // StoreConfig.MaxMemory

	full    atomic.Uint64 // new keys Take refused: no room
	refused atomic.Uint64 // peer states refused: no room
	invalid atomic.Uint64 // peer values refused: negative

	// With StoreConfig.Track: keys marked since the last Changed, and when
	// the first of them was.
	pending atomic.Int64
	first   atomic.Int64
	round   atomic.Uint32 // the last Changed's round
	acked   atomic.Uint32 // the last round acknowledged (Acked)
	changed sync.Pool     // *[]Snapshot: the batches Changed hands out
}

// NewStore validates cfg and returns an empty Store.
func NewStore(cfg StoreConfig) (*Store, error) {
	cfg = cfg.withDefaults()
	if err := cfg.check(); err != nil {
		return nil, err
	}
	s := &Store{
		shards: make([]shard, cfg.Shards),
		shift:  uint(64 - bits.TrailingZeros(uint(cfg.Shards))),
		hasher: hasher{m: maphash.MakeSeed(), x: cfg.Seed},
		maxKey: cfg.MaxKeyBytes,
		memory: cfg.MaxMemory,
	}
	per := cfg.MaxKeys / cfg.Shards
	for i := range s.shards {
		s.shards[i].init(per, cfg.MaxMemory/int64(cfg.Shards), s.hasher)
		s.shards[i].track.on = cfg.Track
	}
	return s, nil
}

// ErrFull is returned, with no state changed, for a key the store does not
// hold and has no room for: every key it could drop still holds spend.
var ErrFull = errors.New("bucket: store full: every key held has spent")

// ErrSpend is returned, with no state changed, for a negative spend or used
// value (from a peer).
var ErrSpend = errors.New("bucket: negative spend")

// hash is the seeded hash of key that picks its shard and index cell.
func (s *Store) hash(key string) uint64 { return s.hasher.sum(key) }

// hasher is a store's seeded hash of keys: hash/maphash (the runtime's
// hash, made against hash flooding) under a random seed drawn at NewStore,
// or, with StoreConfig.Seed pinned, xxhash under that seed, so that tests
// can place keys by hand.
type hasher struct {
	m maphash.Seed
	x uint64 // StoreConfig.Seed; 0: maphash
}

func (h hasher) sum(key string) uint64 {
	if h.x == 0 {
		return maphash.String(h.m, key)
	}
	var d xxhash.Digest
	d.ResetWithSeed(h.x)
	d.WriteString(key)
	return d.Sum64()
}

func (h hasher) sumBytes(key []byte) uint64 {
	if h.x == 0 {
		return maphash.Bytes(h.m, key)
	}
	var d xxhash.Digest
	d.ResetWithSeed(h.x)
	d.Write(key)
	return d.Sum64()
}

// CheckKey returns an error unless key is a valid stored key (CheckKey)
// whose part a request named (the key after its namespace and, for an
// inline key, its limit's Spec) is at most StoreConfig.MaxKeyBytes bytes;
// a longer one's wraps ErrKeyTooLong.
func (s *Store) CheckKey(key string) error {
	if err := CheckKey(key); err != nil {
		return err
	}
	if n := requestLen(key); n > s.maxKey {
		return tooLong{n, s.maxKey}
	}
	return nil
}

// Take applies one check of cost to key under limit l at time now and
// returns the decision. It returns an error, and changes no state, when the
// key is empty or longer than MaxKeyBytes, l was not built by NewLimit, cost
// is not between 1 and l.Capacity(), or the key is new and the store has no
// room for it (ErrFull, counted by Full).
func (s *Store) Take(key string, l *Limit, now clock.Instant, cost int64) (Decision, error) {
	d, _, err := s.TakeUnsent(key, l, now, cost)
	return d, err
}

// TakeUnsent is Take that also returns, when the check is admitted and the
// store tracks changes (StoreConfig.Track), the tokens key admitted that no
// acknowledged round carries (see Acked), this check's included, or the
// key's spend now if that is less: at least what a crash would lose of it
// now. It is 0 otherwise.
func (s *Store) TakeUnsent(key string, l *Limit, now clock.Instant, cost int64) (d Decision, unsent int64, err error) {
	if err := s.CheckKey(key); err != nil {
		return Decision{}, 0, err
	}
	if !l.Valid() {
		return Decision{}, 0, fmt.Errorf("%w: limit was not built by NewLimit", ErrLimit)
	}
	if l.alg == Concurrency {
		return Decision{}, 0, errAcquired
	}
	if err := l.CheckCost(cost); err != nil {
		return Decision{}, 0, err
	}
	h := s.hash(key)
	sh := s.shard(h)
	sh.mu.Lock()
	i, d, ok := sh.take(h, key, l, int64(now), cost)
	if !ok {
		sh.mu.Unlock()
		s.full.Add(1)
		return Decision{}, 0, ErrFull
	}
	if d.Allowed {
		unsent = s.markSlot(sh, i, int64(now), cost)
		// A crash loses at most what the key holds spent now: a key that
		// refills faster than it spends has little to lose, however many
		// tokens it admitted. (A log's spend is not looked up: it costs a
		// walk of the log.)
		if unsent > 1 && l.alg != SlidingWindowLog {
			unsent = min(unsent, l.used(&sh.at(i).st, nil, int64(now)))
		}
	}
	sh.mu.Unlock()
	return d, unsent, nil
}

// Len returns the number of keys held.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.n
		sh.mu.Unlock()
	}
	return n
}

// Bytes returns the bytes the keys held count (see StoreConfig.MaxMemory).
func (s *Store) Bytes() int64 {
	var n int64
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.bytes
		sh.mu.Unlock()
	}
	return n
}

// MaxMemory returns StoreConfig.MaxMemory.
func (s *Store) MaxMemory() int64 { return s.memory }

// Full returns how many new keys Take refused with ErrFull.
func (s *Store) Full() uint64 { return s.full.Load() }

// Refused returns how many states from peers (Set, Charge, Merge,
// MergeEach) were refused with ErrFull: new keys beyond the allowance.
func (s *Store) Refused() uint64 { return s.refused.Load() }

// Invalid returns how many states or spends from peers were refused as
// negative (ErrSpend).
func (s *Store) Invalid() uint64 { return s.invalid.Load() }

// Evictions returns how many keys that held nothing were dropped to make
// room for others.
func (s *Store) Evictions() uint64 {
	var n uint64
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.evictions
		sh.mu.Unlock()
	}
	return n
}

// Shards returns how many shards the store has.
func (s *Store) Shards() int { return len(s.shards) }

// Capacity returns the most keys the store holds: MaxKeys rounded down to a
// multiple of the shard count.
func (s *Store) Capacity() int {
	return len(s.shards) * s.shards[0].capacity
}

const (
	pageBits = 8
	pageSize = 1 << pageBits
	none     = math.MaxUint32
	// maxLimitsPerShard bounds the table of limits kept to convert a key's
	// state when its limit changes.
	maxLimitsPerShard = 1024
	// evictScan bounds the keys a new key's insertion looks at, from the
	// LRU tail, for one that holds nothing; those that still hold spend
	// move to the head, so that the next insertion looks at others.
	evictScan = 16
	// peerAllowance: state from peers may take a shard 1/peerAllowance
	// over its bounds.
	peerAllowance = 8
	// minShardMemory is the smallest byte budget of a shard: a few keys of
	// MaxKeyLen bytes.
	minShardMemory = 4096
	// Bytes a key counts (see StoreConfig.MaxMemory).
	entryBytes = 64 + 24 + 16 // entry, index share (8-byte cells at most 3/4 full, doubling), margin
	// logReserve is what a key under a sliding window log counts for its
	// log, reserved whole when it takes one: its map entry and slice
	// header (64), and maxLogRuns runs of 16 bytes.
	logReserve = 64 + 16*maxLogRuns
)

// keyBytes returns the bytes a key of n bytes counts, its log apart: a
// long key's own bytes, and a quarter more for the room its page's buffer
// keeps (see renewLong).
func keyBytes(n int) int64 {
	if n <= inlineKey {
		return entryBytes
	}
	return entryBytes + int64(n) + int64(n+3)/4
}
