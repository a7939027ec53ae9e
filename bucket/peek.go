package bucket

import (
	"fmt"
	"slices"
	"time"

	"github.com/ringlimit/ringlimit/clock"
)

// Peek returns the decision Take would return for a check of cost on key
// under l at time now, and changes nothing: a key the store does not hold
// is answered as a full key and not inserted, a key held keeps its place in
// the LRU order, its state, its log and its change mark (no replication).
// It returns an error, as Take does, for a bad key, limit or cost. A key
// held under another limit is answered as Take would after converting it;
// a key Take could not convert for want of room is answered as Take
// answers it then (refused for the limit's period), and a new key the
// store has no room for is answered full (Take would return ErrFull: what
// the key would be asked is a full key's answer). Peek is safe for
// concurrent use.
func (s *Store) Peek(key string, l *Limit, now clock.Instant, cost int64) (Decision, error) {
	if err := s.CheckKey(key); err != nil {
		return Decision{}, err
	}
	if !l.Valid() {
		return Decision{}, fmt.Errorf("%w: limit was not built by NewLimit", ErrLimit)
	}
	if l.alg == Concurrency {
		return Decision{}, errAcquired
	}
	if err := l.CheckCost(cost); err != nil {
		return Decision{}, err
	}
	h := s.hash(key)
	sh := s.shard(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.peek(h, key, l, int64(now), cost), nil
}

// peek is take on a copy of key's state.
func (sh *shard) peek(h uint64, key string, l *Limit, now, cost int64) Decision {
	i := sh.lookup(h, key)
	if i == none {
		var st state
		var log []logRun
		return l.take(&st, &log, true, now, cost)
	}
	e := sh.at(i)
	st := e.st
	log := slices.Clone(sh.logs[i])
	if e.fp != l.fp {
		if _, has := sh.logs[i]; l.alg == SlidingWindowLog && !has && !sh.wouldFit(logReserve, now, i) {
			return Decision{Limit: l.limit, RetryAfter: roundUpMs(int64(l.per)), ResetAfter: roundUpMs(int64(l.per))}
		}
		var used int64
		if old, ok := sh.limits[e.fp]; ok {
			used = old.used(&st, log, now)
		} else {
			used = l.burst
		}
		st = state{}
		if l.alg != SlidingWindowLog {
			log = nil
		}
		l.setUsed(&st, &log, now, used)
	}
	return l.take(&st, &log, false, now, cost)
}

// wouldFit reports whether makeRoom(need, now, false, keep) would succeed,
// without dropping or moving anything: the same walk from the LRU tail,
// counting what it would drop and skipping what it would move.
func (sh *shard) wouldFit(need, now int64, keep uint32) bool {
	n, bytes := sh.n, sh.bytes
	if keep != none {
		n--
	}
	scanned := 0
	for j := sh.tail; n >= sh.capacity || bytes+need > sh.budget; j = sh.at(j).prev {
		if j == none || scanned >= evictScan {
			return false
		}
		if e := sh.at(j); j != keep && e.idle <= now {
			n--
			bytes -= keyBytes(sh.keyLen(e, j))
			if _, ok := sh.logs[j]; ok {
				bytes -= logReserve
			}
			continue
		}
		scanned++
	}
	return true
}

// Reset puts key back to full: the store forgets it (and records no
// tombstone: see ResetAt). It returns what a check of cost 1 under l at now
// found remaining before (the limit's capacity for a key the store did not
// hold), and whether the key was held. It returns an error, changing
// nothing, for a bad key or limit.
func (s *Store) Reset(key string, l *Limit, now clock.Instant) (previous int64, held bool, err error) {
	if err := s.CheckKey(key); err != nil {
		return 0, false, err
	}
	if !l.Valid() {
		return 0, false, fmt.Errorf("%w: limit was not built by NewLimit", ErrLimit)
	}
	if l.alg == Concurrency {
		return 0, false, errAcquired
	}
	h := s.hash(key)
	sh := s.shard(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	previous, held = sh.reset(h, key, l, int64(now))
	return previous, held, nil
}

// reset drops key's state; see Reset.
func (sh *shard) reset(h uint64, key string, l *Limit, now int64) (previous int64, held bool) {
	d := sh.peek(h, key, l, now, 1)
	previous = d.Remaining
	if d.Allowed {
		previous++
	}
	i := sh.lookup(h, key)
	if i == none {
		return previous, false
	}
	sh.remove(i)
	sh.free = append(sh.free, i)
	return previous, true
}

// RefillTime returns how long a key under l takes from empty (everything
// spent) back to full: ⌈burst/rate⌉ for the buckets, the window for the
// fixed window and the log, two windows for the sliding window counter
// (whose previous window still weighs). After it, no state built before
// holds any spend.
func (l Limit) RefillTime() time.Duration {
	switch l.alg {
	case TokenBucket, LeakyBucket:
		return time.Duration(l.fillNs)
	case SlidingWindowCounter:
		return 2 * l.per
	}
	return l.per
}
