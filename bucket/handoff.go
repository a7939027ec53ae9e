package bucket

import (
	"runtime"

	"github.com/ringlimit/ringlimit/clock"
)

// State moves between nodes as the cost spent under a limit ("used"): any
// node can rebuild it on its own clock with setUsed, and merging two states
// keeps the larger used, so a merge never grants more than either side had.

// Has reports whether key has state in the store. It does not touch the LRU
// order.
func (s *Store) Has(key string) bool {
	h := s.hash(key)
	sh := s.shard(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.lookup(h, key) != none
}

// Used returns the limit key's state was built under and the cost spent at
// time now (rounded up), or ok == false if the store has no state for key.
func (s *Store) Used(key string, now clock.Instant) (l Limit, used int64, ok bool) {
	h := s.hash(key)
	sh := s.shard(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i := sh.lookup(h, key)
	if i == none {
		return Limit{}, 0, false
	}
	e := sh.at(i)
	l, ok = sh.limits[e.fp]
	if !ok {
		return Limit{}, 0, false
	}
	return l, l.used(&e.st, sh.logs[i], int64(now)), true
}

// Merge folds a state received from another node into key: afterwards the
// key has spent at least used under l at time now, and no less than it had
// spent before. It returns an error, changing nothing, for a bad key or
// limit, a negative used (ErrSpend), or a new key with no room (ErrFull).
func (s *Store) Merge(key string, l *Limit, at clock.Instant, used int64) error {
	return s.MergeWindow(key, l, at, used, 0)
}

// MergeWindow is Merge of a state whose sender counted used in the fixed
// window starting at window (Snapshot.Window; 0: its own now's). A window
// that starts where this node's current window ends (the sender's clock
// is past a boundary this node's has not reached) holds the key: its
// spend is counted there, not in the window before, which would forget it
// at the boundary. Any other window is this node's current one.
func (s *Store) MergeWindow(key string, l *Limit, at clock.Instant, used, window int64) error {
	if used < 0 {
		s.invalid.Add(1)
		return ErrSpend
	}
	return s.adjustWindow(key, l, at, window, func(cur int64, fresh bool) (int64, bool) { return used, fresh || used > cur })
}

// SetWindow is Set of a state counted in the fixed window starting at
// window, as MergeWindow takes it.
func (s *Store) SetWindow(key string, l *Limit, now clock.Instant, used, window int64) error {
	if used < 0 {
		s.invalid.Add(1)
		return ErrSpend
	}
	return s.adjustWindow(key, l, now, window, func(int64, bool) (int64, bool) { return used, true })
}

// Delete drops key's state. It reports whether the key was held.
func (s *Store) Delete(key string) bool {
	h := s.hash(key)
	sh := s.shard(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i := sh.lookup(h, key)
	if i == none {
		return false
	}
	sh.remove(i)
	sh.free = append(sh.free, i)
	return true
}

// Snapshot is one key's state as Range reports it.
type Snapshot struct {
	Key   string
	Limit Limit
	Used  int64
	// Unacked, from Changed only, is the tokens the key admitted that this
	// hand-out carries and no acknowledged round did: what Mark gives back
	// if its copy is not acknowledged.
	Unacked int64
	// ResetAt is the key's tombstone when the state was read (read under
	// the same lock): 0 for none. See tombstone.go.
	ResetAt int64
	// Window, for a fixed window, is the start of the window Used counts
	// in (Unix nanoseconds on this node's clock); 0 for other algorithms.
	// A receiver whose clock is still in the window before keeps the key
	// in this one (MergeWindow): a key never moves back a period.
	Window int64
}

// Range calls fn with the state of every key, one shard at a time: each
// shard is copied under its lock and fn runs outside it, so fn may call the
// store or block. Keys added or removed during Range may or may not be seen.
// Range stops early when fn returns false.
func (s *Store) Range(at clock.Instant, fn func(batch []Snapshot) bool) {
	s.rangeKeys(at, false, fn)
}

// RangeHeld is Range of the keys that hold spend at time at: every key
// Range would report with Used > 0 is reported, and a key whose spend has
// refilled or whose window has passed (one the store could drop to make
// room) is skipped without being read, so that a walk for what a node must
// keep costs little for the keys it holds only to remember.
func (s *Store) RangeHeld(at clock.Instant, fn func(batch []Snapshot) bool) {
	s.rangeKeys(at, true, fn)
}

// rangeChunk is how many slots a walk reads under a shard's lock at a
// time. Between two chunks it lets the lock go and lets other goroutines
// run (runtime.Gosched): a node walking a million keys for its state file
// then delays a check by one chunk (tens of microseconds), not by a whole
// shard, nor (with one processor) by the scheduler's 10 ms time slice.
const rangeChunk = 1024

func (s *Store) rangeKeys(at clock.Instant, held bool, fn func(batch []Snapshot) bool) {
	now := int64(at)
	var batch []Snapshot
	for i := range s.shards {
		sh := &s.shards[i]
		batch = batch[:0]
		// Slots in page order: the walk reads the pages one after the
		// other (the LRU order would visit them at random).
		for from := uint32(0); ; from += rangeChunk {
			sh.mu.Lock()
			end := min(sh.used, from+rangeChunk)
			for j := from; j < end; j++ {
				if held && j&(pageSize-1) == 0 && sh.pageIdle[j>>pageBits] <= now {
					j |= pageSize - 1 // no entry of the page holds spend
					continue
				}
				e := sh.at(j)
				if e.klen == 0 || held && e.idle <= now {
					continue // a free slot, or nothing held
				}
				l, ok := sh.limits[e.fp]
				if !ok {
					continue
				}
				key := sh.key(j)
				batch = append(batch, Snapshot{Key: key, Limit: l, Used: l.used(&e.st, sh.logs[j], now), ResetAt: sh.tombs.get(key, now),
					Window: l.windowOf(&e.st, now)})
			}
			more := end < sh.used
			sh.mu.Unlock()
			runtime.Gosched()
			if !more {
				break
			}
		}
		if len(batch) > 0 && !fn(batch) {
			return
		}
	}
}

func (s *Store) shard(h uint64) *shard { return &s.shards[s.shardIndex(h)] }

func (s *Store) shardIndex(h uint64) int { return int(h >> s.shift & uint64(len(s.shards)-1)) }

// Refund gives back cost that an earlier admitted check of key spent under
// l, at time now: a request rejected by another layer must not keep the
// tokens it took here. A refund never makes a key more than full, does
// nothing for a key the store no longer holds (an evicted key is full), and
// does nothing when the key's state belongs to another limit.
func (s *Store) Refund(key string, l *Limit, at clock.Instant, cost int64) error {
	now := int64(at)
	if err := s.CheckKey(key); err != nil {
		return err
	}
	if !l.Valid() {
		return ErrLimit
	}
	if l.alg == Concurrency {
		return errAcquired
	}
	if err := l.CheckCost(cost); err != nil {
		return err
	}
	h := s.hash(key)
	sh := s.shard(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i := sh.lookup(h, key)
	if i == none {
		return nil
	}
	e := sh.at(i)
	if e.fp != l.fp {
		return nil
	}
	if l.alg == SlidingWindowLog {
		log := sh.logs[i]
		l.refundLog(&log, cost)
		sh.setLog(i, log)
		sh.setIdle(i, e, l.idleAt(&e.st, log))
	} else {
		l.refund(&e.st, now, cost)
		sh.setIdle(i, e, l.idleAt(&e.st, nil))
	}
	s.markSlot(sh, i, now, 0)
	return nil
}

// Grant takes up to most whole tokens of key's token bucket at time now and
// returns how many it took (0 when the key is empty or not a token bucket
// under l): the owner's side of a token lease. A key never seen starts full.
func (s *Store) Grant(key string, l *Limit, now clock.Instant, most int64) int64 {
	if l.alg != TokenBucket || most < 1 || s.CheckKey(key) != nil || !l.Valid() {
		return 0
	}
	h := s.hash(key)
	sh := s.shard(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i, e, fresh, ok := sh.entry(h, key, l, int64(now), false)
	if !ok {
		return 0
	}
	level, at := l.refill(&e.st, fresh, int64(now))
	n := min(max(level, 0)/l.den, most) // nothing from a key in debt
	e.st.a, e.st.b = level-n*l.den, at
	sh.setIdle(i, e, l.idleAt(&e.st, nil))
	if n > 0 {
		s.markSlot(sh, i, int64(now), n)
	}
	return n
}
