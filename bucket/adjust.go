package bucket

import (
	"github.com/ringlimit/ringlimit/clock"
)

// The entry points below take state from other nodes (replicas, handoff,
// pushes, fetch answers) and hold every value hostile until checked: a
// negative used or spend is refused (ErrSpend) and counted (Invalid), a
// spend past the capacity saturates at it, and a key the store does not
// hold is inserted only when it has spent something, never by dropping a
// key that has (see StoreConfig.MaxMemory; refusals are counted by
// Refused).

// Set makes key's state under l exactly used at time now (clamped to the
// limit's capacity): a copy of another node's state that replaces the one
// held. It returns an error, changing nothing, for a bad key or limit, a
// negative used (ErrSpend), or a new key with no room (ErrFull).
func (s *Store) Set(key string, l *Limit, now clock.Instant, used int64) error {
	if used < 0 {
		s.invalid.Add(1)
		return ErrSpend
	}
	return s.adjust(key, l, now, func(int64, bool) (int64, bool) { return used, true })
}

// Charge adds spend to key's state under l at time now, without an
// admission check and never beyond the limit's capacity: the spend another
// copy of the key made and this one has not seen. A key not held starts
// full, so it ends with spend spent. It returns an error, changing
// nothing, for a bad key or limit, a negative spend (ErrSpend), or a new
// key with no room (ErrFull).
func (s *Store) Charge(key string, l *Limit, now clock.Instant, spend int64) error {
	if spend < 0 {
		s.invalid.Add(1)
		return ErrSpend
	}
	if spend == 0 {
		return nil
	}
	// A spend past the capacity saturates there, unless it carries a debt
	// (settle.go): then it, or the debt held, stands. cur ≤ 2×burst: the
	// sum cannot overflow.
	spend = min(spend, l.maxUsed())
	return s.adjust(key, l, now, func(cur int64, _ bool) (int64, bool) {
		return min(cur+spend, max(l.burst, spend, cur)), true
	})
}

// adjust sets key's used to what fn returns from its current used (0 for
// a key not held, fresh), unless fn says to leave it. A key not held that
// would end with nothing spent is not inserted: it is full either way.
func (s *Store) adjust(key string, l *Limit, at clock.Instant, fn func(cur int64, fresh bool) (used int64, set bool)) error {
	return s.adjustWindow(key, l, at, 0, fn)
}

// adjustWindow is adjust of a state counted in the fixed window that
// starts at window (see MergeWindow).
func (s *Store) adjustWindow(key string, l *Limit, at clock.Instant, window int64, fn func(cur int64, fresh bool) (used int64, set bool)) error {
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
	h := s.hash(key)
	sh := s.shard(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.lookup(h, key) == none {
		if used, set := fn(0, true); !set || used <= 0 {
			return nil
		}
	}
	i, e, fresh, ok := sh.entry(h, key, l, now, true)
	if !ok {
		s.refused.Add(1)
		return ErrFull
	}
	log := sh.logs[i]
	if next := l.nextWindow(now, window); next != 0 {
		var cur int64
		if !fresh && e.st.a == next {
			cur = e.st.b
		}
		used, set := fn(cur, fresh)
		if !set {
			return nil
		}
		s.setNext(sh, i, e, l, log, now, next, used)
		return nil
	}
	var cur int64
	if !fresh {
		cur = l.used(&e.st, log, now)
	}
	used, set := fn(cur, fresh)
	if !set {
		return nil
	}
	l.setUsed(&e.st, &log, now, used)
	if l.alg == SlidingWindowLog {
		sh.setLog(i, log)
	}
	sh.setIdle(i, e, l.idleAt(&e.st, log))
	s.markSlot(sh, i, now, 0)
	return nil
}

// MergeEach merges n states into the store as Merge does, state(i) giving
// the i-th, taking each shard's lock once for all its states. States with
// a bad key or limit or a negative used are skipped (the last counted by
// Invalid), and so are new keys with no room (counted by Refused). It
// returns how many were merged.
func (s *Store) MergeEach(at clock.Instant, n int, state func(i int) (key string, l *Limit, used int64)) int {
	return s.MergeEachWindow(at, n, func(i int) (string, *Limit, int64, int64) {
		key, l, used := state(i)
		return key, l, used, 0
	})
}

// MergeEachWindow is MergeEach of states each counted in a fixed window
// (the fourth value, as MergeWindow takes it).
func (s *Store) MergeEachWindow(at clock.Instant, n int, state func(i int) (key string, l *Limit, used, window int64)) int {
	now := int64(at)
	hashes := make([]uint64, n)
	start := make([]int, len(s.shards)+1) // counting sort of the states by shard
	for i := range n {
		key, l, used, _ := state(i)
		if s.CheckKey(key) != nil || !l.Valid() || l.alg == Concurrency || used < 0 {
			if used < 0 {
				s.invalid.Add(1)
			}
			hashes[i] = 0
			continue
		}
		h := s.hash(key) | 1 // 0 marks a skipped state
		hashes[i] = h
		start[s.shardIndex(h)+1]++
	}
	for j := 1; j < len(start); j++ {
		start[j] += start[j-1]
	}
	order := make([]int32, start[len(s.shards)])
	next := append([]int(nil), start[:len(s.shards)]...)
	for i, h := range hashes {
		if h != 0 {
			j := s.shardIndex(h)
			order[next[j]] = int32(i)
			next[j]++
		}
	}
	merged := 0
	for j := range s.shards {
		if start[j] == start[j+1] {
			continue
		}
		sh := &s.shards[j]
		sh.mu.Lock()
		for _, i := range order[start[j]:start[j+1]] {
			key, l, used, window := state(int(i))
			h := s.hash(key)
			if used == 0 && sh.lookup(h, key) == none {
				merged++ // full either way
				continue
			}
			k, e, fresh, ok := sh.entry(h, key, l, now, true)
			if !ok {
				s.refused.Add(1)
				continue
			}
			merged++
			log := sh.logs[k]
			if next := l.nextWindow(now, window); next != 0 {
				if fresh || e.st.a != next || used > e.st.b {
					s.setNext(sh, k, e, l, log, now, next, used)
				}
				continue
			}
			if fresh || used > l.used(&e.st, log, now) {
				l.setUsed(&e.st, &log, now, used)
				if l.alg == SlidingWindowLog {
					sh.setLog(k, log)
				}
				sh.setIdle(k, e, l.idleAt(&e.st, log))
				s.markSlot(sh, k, now, 0)
			}
		}
		sh.mu.Unlock()
	}
	return merged
}

// setNext makes slot i's state used in the fixed window that starts at
// next, the one after now's (see MergeWindow); sh's lock is held.
func (s *Store) setNext(sh *shard, i uint32, e *entry, l *Limit, log []logRun, now, next, used int64) {
	e.st.a, e.st.b = next, min(used, l.maxUsed())
	sh.setIdle(i, e, l.idleAt(&e.st, log))
	s.markSlot(sh, i, now, 0)
}
