package bucket

import (
	"fmt"
	"math"
	"math/bits"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"

	"github.com/ringlimit/ringlimit/clock"
)

// Store holds the state of many keys, each under the limit its checks name.
// It is sharded by the xxhash of the key so that concurrent callers on
// different keys rarely share a lock, and each shard is an LRU with a size
// cap. Store is safe for concurrent use.
type Store struct {
	shards []shard
	shift  uint // the top bits of a key's hash pick its shard

	// With StoreConfig.Track: keys marked since the last Changed, and when
	// the first of them was.
	pending atomic.Int64
	first   atomic.Int64
	round   atomic.Uint32 // the last Changed's round
	acked   atomic.Uint32 // the last round acknowledged (Acked)
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
	}
	per := cfg.MaxKeys / cfg.Shards
	for i := range s.shards {
		s.shards[i].init(per)
		s.shards[i].track.on = cfg.Track
	}
	return s, nil
}

// Take applies one check of cost to key under limit l at time now and
// returns the decision. It returns an error, and changes no state, when the
// key is empty or longer than MaxKeyLen, l was not built by NewLimit, or cost
// is not between 1 and l.Capacity().
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
	if err := CheckKey(key); err != nil {
		return Decision{}, 0, err
	}
	if !l.Valid() {
		return Decision{}, 0, fmt.Errorf("%w: limit was not built by NewLimit", ErrLimit)
	}
	if err := l.CheckCost(cost); err != nil {
		return Decision{}, 0, err
	}
	h := xxhash.Sum64String(key)
	sh := s.shard(h)
	sh.mu.Lock()
	i, d := sh.take(h, key, l, int64(now), cost)
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

// Evictions returns how many keys were evicted to keep the store bounded.
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
)

// entry is one key's slot: one 64-byte cache line. Entries live in fixed
// pages and link into the shard's LRU list by index, so that moving a key to
// the front allocates nothing. A key of up to inlineKey bytes is held in the
// entry itself, so that finding it reads one line, not two, and the pages
// hold no pointers for the garbage collector to scan; a longer key is held
// beside the entries, in the shard's long pages, and its klen is longKey.
type entry struct {
	st         state
	fp         uint64 // fingerprint of the limit st belongs to
	prev, next uint32 // LRU neighbours; none at the ends
	klen       uint8  // 0 for a free slot, longKey for a key in shard.long
	kb         [inlineKey]byte
}

const (
	inlineKey = 31
	longKey   = math.MaxUint8
)

// is reports whether slot i, whose entry is e, holds key.
func (sh *shard) is(e *entry, i uint32, key string) bool {
	if len(key) <= inlineKey {
		return int(e.klen) == len(key) && string(e.kb[:len(key)]) == key
	}
	return e.klen == longKey && sh.longKey(i) == key
}

// longKey returns the long key of slot i.
func (sh *shard) longKey(i uint32) string {
	return sh.long[i>>pageBits][i&(pageSize-1)]
}

// key returns the key slot i holds; "" for a free slot.
func (sh *shard) key(i uint32) string {
	e := sh.at(i)
	if e.klen == longKey {
		return sh.longKey(i)
	}
	return string(e.kb[:e.klen])
}

// hash returns the xxhash of the key slot i holds.
func (sh *shard) hash(i uint32) uint64 {
	e := sh.at(i)
	if e.klen == longKey {
		return xxhash.Sum64String(sh.longKey(i))
	}
	return xxhash.Sum64(e.kb[:e.klen])
}

// setKey stores key in the free slot i, whose entry is e.
func (sh *shard) setKey(e *entry, i uint32, key string) {
	if len(key) <= inlineKey {
		e.klen = uint8(copy(e.kb[:], key))
		return
	}
	e.klen = longKey
	for int(i>>pageBits) >= len(sh.long) {
		sh.long = append(sh.long, nil)
	}
	p := &sh.long[i>>pageBits]
	if *p == nil {
		*p = make([]string, pageSize)
	}
	(*p)[i&(pageSize-1)] = strings.Clone(key)
}

// shard is one lock's worth of keys: an index by key hash, entries in pages,
// and an LRU list (head most recent).
type shard struct {
	mu sync.Mutex // guards every field below

	// idx maps a key's hash to its slot.
	idx index

	pages      [][]entry
	free       []uint32 // slots released by Delete
	n          int      // keys held
	used       uint32   // slots ever handed out
	capacity   int
	head, tail uint32
	evictions  uint64

	logs   map[uint32][]logRun // sliding window log runs by slot
	limits map[uint64]Limit    // limits seen, by fingerprint, for conversion

	// long holds the keys longer than inlineKey, by page and slot. A page's
	// strings are allocated when it first holds a long key and kept after
	// (16 bytes a slot); pages that never held one stay nil.
	long [][]string

	track tracked

	_ [64]byte // keep neighbouring shards' locks off one cache line
}

func (sh *shard) init(capacity int) {
	sh.capacity = capacity
	sh.idx.init(min(capacity, 1024))
	sh.logs = make(map[uint32][]logRun)
	sh.limits = make(map[uint64]Limit)
	sh.head, sh.tail = none, none
}

func (sh *shard) at(i uint32) *entry {
	return &sh.pages[i>>pageBits][i&(pageSize-1)]
}

// lookup returns the slot holding key, or none.
func (sh *shard) lookup(h uint64, key string) uint32 {
	cells := sh.idx.cells
	mask := uint32(len(cells) - 1)
	tag := uint32(h)
	for p := tag & mask; ; p = (p + 1) & mask {
		c := cells[p]
		if c == 0 {
			return none
		}
		if uint32(c>>32) == tag {
			if i := uint32(c) - 1; sh.is(sh.at(i), i, key) {
				return i
			}
		}
	}
}

// entry returns key's slot, made most recent, with its state under l at
// time now: inserted (fresh, meaning full) if the key is new, converted if
// its state belongs to another limit.
func (sh *shard) entry(h uint64, key string, l *Limit, now int64) (i uint32, e *entry, fresh bool) {
	i = sh.lookup(h, key)
	fresh = i == none
	if fresh {
		i = sh.insert(h, key)
		e = sh.at(i)
		e.fp = l.fp
		sh.remember(l)
		return i, e, true
	}
	sh.touch(i)
	e = sh.at(i)
	if e.fp != l.fp {
		sh.convert(e, i, l, now)
	}
	return i, e, false
}

func (sh *shard) take(h uint64, key string, l *Limit, now, cost int64) (uint32, Decision) {
	i, e, fresh := sh.entry(h, key, l, now)
	if l.alg == SlidingWindowLog {
		log := sh.logs[i]
		d := l.takeLog(&log, now, cost)
		sh.logs[i] = log
		return i, d
	}
	return i, l.take(&e.st, nil, fresh, now, cost)
}

// convert rewrites e's state, built under another limit, for l: see
// convert.go for the rule.
func (sh *shard) convert(e *entry, i uint32, l *Limit, now int64) {
	var used int64
	log := sh.logs[i]
	if old, ok := sh.limits[e.fp]; ok {
		used = old.used(&e.st, log, now)
	} else {
		// The old limit fell out of the table: assume the worst, everything
		// spent, rather than grant a refill.
		used = l.burst
	}
	e.st = state{}
	l.setUsed(&e.st, &log, now, used)
	if l.alg == SlidingWindowLog {
		sh.logs[i] = log
	} else {
		delete(sh.logs, i)
	}
	e.fp = l.fp
	sh.remember(l)
}

func (sh *shard) remember(l *Limit) {
	if _, ok := sh.limits[l.fp]; ok {
		return
	}
	if len(sh.limits) >= maxLimitsPerShard {
		clear(sh.limits)
	}
	sh.limits[l.fp] = *l
}

// insert puts key in a fresh slot at the head of the LRU list, evicting the
// least recently used key if the shard is full.
func (sh *shard) insert(h uint64, key string) uint32 {
	var i uint32
	switch {
	case sh.n >= sh.capacity:
		i = sh.tail
		sh.remove(i)
		sh.evictions++
	case len(sh.free) > 0:
		i = sh.free[len(sh.free)-1]
		sh.free = sh.free[:len(sh.free)-1]
	default:
		i = sh.used
		sh.used++
		if int(i>>pageBits) == len(sh.pages) {
			sh.pages = append(sh.pages, make([]entry, pageSize))
		}
	}
	e := sh.at(i)
	*e = entry{prev: none, next: sh.head}
	sh.setKey(e, i, key)
	if sh.head != none {
		sh.at(sh.head).prev = i
	}
	sh.head = i
	if sh.tail == none {
		sh.tail = i
	}
	sh.idx.insert(uint32(h), i)
	sh.n++
	return i
}

// remove unlinks slot i, drops it from the index and frees its key; its
// state stays until the slot is reused.
func (sh *shard) remove(i uint32) {
	sh.unlink(i)
	sh.idx.remove(uint32(sh.hash(i)), i)
	delete(sh.logs, i)
	e := sh.at(i)
	if e.klen == longKey {
		sh.long[i>>pageBits][i&(pageSize-1)] = ""
	}
	e.klen = 0
	sh.n--
}

func (sh *shard) unlink(i uint32) {
	e := sh.at(i)
	if e.prev != none {
		sh.at(e.prev).next = e.next
	} else {
		sh.head = e.next
	}
	if e.next != none {
		sh.at(e.next).prev = e.prev
	} else {
		sh.tail = e.prev
	}
	e.prev, e.next = none, none
}

// touch moves slot i to the head of the LRU list.
func (sh *shard) touch(i uint32) {
	if sh.head == i {
		return
	}
	sh.unlink(i)
	e := sh.at(i)
	e.next = sh.head
	sh.at(sh.head).prev = i
	sh.head = i
}
