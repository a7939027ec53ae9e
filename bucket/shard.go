package bucket

import (
	"math"
	"sync"
)

// entry is one key's slot: one 64-byte cache line. Entries live in fixed
// pages and link into the shard's LRU list by index, so that moving a key to
// the front allocates nothing. A key of up to inlineKey bytes is held in the
// entry itself, so that finding it reads one line, not two; a longer key is
// held in its page's long-key buffer (see longPage), its klen is longKey and
// kb holds where. Neither holds a pointer: the garbage collector marks a
// page and a buffer as one object each, whatever the keys they hold.
type entry struct {
	st         state
	fp         uint64 // fingerprint of the limit st belongs to
	prev, next uint32 // LRU neighbours; none at the ends
	// idle is the instant from which the key holds nothing (full again,
	// or past its window), set at each change: a key may be dropped to
	// make room only from then on.
	idle int64
	klen uint8 // 0 for a free slot, longKey for a key in shard.long
	kb   [inlineKey]byte
}

const (
	inlineKey = 23
	longKey   = math.MaxUint8
)

// shard is one lock's worth of keys: an index by key hash, entries in pages,
// and an LRU list (head most recent).
type shard struct {
	mu sync.Mutex // guards every field below

	// idx maps a key's hash to its slot.
	idx index

	pages [][]entry
	// pageIdle is, by page, an instant from which none of its entries
	// holds spend: at least the latest idle instant set in it (setIdle).
	// A walk for the keys that hold spend skips a page whose instant has
	// passed without reading its entries.
	pageIdle   []int64
	free       []uint32 // slots released by Delete and eviction
	n          int      // keys held
	used       uint32   // slots ever handed out
	capacity   int
	budget     int64 // bytes
	bytes      int64 // bytes the keys held count
	hasher     hasher
	head, tail uint32
	evictions  uint64

	logs   map[uint32][]logRun // sliding window log runs by slot
	limits map[uint64]Limit    // limits seen, by fingerprint, for conversion

	// long holds the keys longer than inlineKey, by page (see longPage).
	// A page's buffer is allocated when it first holds a long key and let go
	// when it holds none; pages that never held one have none.
	long []longPage

	track tracked
	tombs tombs // keys reset (see tombstone.go)

	_ [64]byte // keep neighbouring shards' locks off one cache line
}

func (sh *shard) init(capacity int, budget int64, h hasher) {
	sh.capacity, sh.budget, sh.hasher = capacity, budget, h
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
// its state belongs to another limit. A new key that finds no room is not
// inserted: ok is false. peer says the state comes from another node (see
// StoreConfig.MaxMemory).
func (sh *shard) entry(h uint64, key string, l *Limit, now int64, peer bool) (i uint32, e *entry, fresh, ok bool) {
	i = sh.lookup(h, key)
	fresh = i == none
	if fresh {
		if i = sh.insert(h, key, now, peer, l.alg == SlidingWindowLog); i == none {
			return none, nil, true, false
		}
		e = sh.at(i)
		e.fp = l.fp
		sh.remember(l)
		return i, e, true, true
	}
	sh.touch(i)
	e = sh.at(i)
	if e.fp != l.fp {
		if _, has := sh.logs[i]; l.alg == SlidingWindowLog && !has && !sh.makeRoom(logReserve, now, peer, i) {
			return i, e, false, false // no room for the log: the key keeps its state
		}
		sh.convert(e, i, l, now)
	}
	return i, e, false, true
}

// take applies a check. A new key with no room is not taken: ok is false.
// A key held whose state cannot be converted to l for want of room is
// refused, with a retry-after of l's period, and keeps its state.
func (sh *shard) take(h uint64, key string, l *Limit, now, cost int64) (uint32, Decision, bool) {
	i, e, fresh, ok := sh.entry(h, key, l, now, false)
	if !ok {
		if fresh {
			return none, Decision{}, false
		}
		return i, Decision{Limit: l.limit, RetryAfter: roundUpMs(int64(l.per)), ResetAfter: roundUpMs(int64(l.per))}, true
	}
	if l.alg == SlidingWindowLog {
		log := sh.logs[i]
		d := l.takeLog(&log, now, cost)
		sh.setLog(i, log)
		sh.setIdle(i, e, l.idleAt(&e.st, log))
		return i, d, true
	}
	d := l.take(&e.st, nil, fresh, now, cost)
	sh.setIdle(i, e, l.idleAt(&e.st, nil))
	return i, d, true
}

// setIdle sets the idle instant of slot i, whose entry is e, raising its
// page's (pageIdle) to it.
func (sh *shard) setIdle(i uint32, e *entry, idle int64) {
	e.idle = idle
	if p := &sh.pageIdle[i>>pageBits]; idle > *p {
		*p = idle
	}
}

// setLog makes log slot i's sliding window log; a slot that had none
// counts logReserve from now on.
func (sh *shard) setLog(i uint32, log []logRun) {
	if _, ok := sh.logs[i]; !ok {
		sh.bytes += logReserve
	}
	sh.logs[i] = log
}

// dropLog deletes slot i's log, if any.
func (sh *shard) dropLog(i uint32) {
	if _, ok := sh.logs[i]; ok {
		sh.bytes -= logReserve
		delete(sh.logs, i)
	}
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
		sh.setLog(i, log)
	} else {
		sh.dropLog(i)
		log = nil
	}
	sh.setIdle(i, e, l.idleAt(&e.st, log))
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

// insert puts key in a fresh slot at the head of the LRU list, first
// dropping keys that hold nothing at now if the shard is full. It returns
// none, inserting nothing, when it finds no room.
func (sh *shard) insert(h uint64, key string, now int64, peer, log bool) uint32 {
	need := keyBytes(len(key))
	if log {
		need += logReserve
	}
	if !sh.makeRoom(need, now, peer, none) {
		return none
	}
	var i uint32
	switch {
	case len(sh.free) > 0:
		i = sh.free[len(sh.free)-1]
		sh.free = sh.free[:len(sh.free)-1]
	default:
		i = sh.used
		sh.used++
		if int(i>>pageBits) == len(sh.pages) {
			sh.pages = append(sh.pages, make([]entry, pageSize))
			sh.pageIdle = append(sh.pageIdle, 0)
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
	sh.bytes += need
	if log {
		sh.logs[i] = nil // the log's reserve, counted in need
	}
	return i
}

// makeRoom drops keys that hold nothing at now, least recently used first,
// until need more bytes fit (and a new key, unless keep names the slot
// that needs them), looking at most at evictScan keys that still hold
// spend (each moved to the head) or are keep. It reports whether they fit:
// within the shard's bounds, or for peer within the allowance.
func (sh *shard) makeRoom(need, now int64, peer bool, keep uint32) bool {
	n := sh.n
	if keep != none {
		n-- // no new key
	}
	for scanned := 0; n >= sh.capacity || sh.bytes+need > sh.budget; {
		i := sh.tail
		if i == none || scanned >= evictScan {
			return peer && n < sh.capacity+sh.capacity/peerAllowance &&
				sh.bytes+need <= sh.budget+sh.budget/peerAllowance
		}
		if i != keep && sh.at(i).idle <= now {
			sh.remove(i)
			sh.free = append(sh.free, i)
			sh.evictions++
			n--
			continue
		}
		scanned++
		sh.touch(i)
	}
	return true
}

// remove unlinks slot i, drops it from the index and frees its key; its
// state stays until the slot is reused.
func (sh *shard) remove(i uint32) {
	sh.unlink(i)
	sh.idx.remove(uint32(sh.hash(i)), i)
	sh.dropLog(i)
	e := sh.at(i)
	sh.bytes -= keyBytes(sh.keyLen(e, i))
	if e.klen == longKey {
		sh.dropLong(i)
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
