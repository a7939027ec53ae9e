package bucket

import (
	"github.com/ringlimit/ringlimit/clock"
)

// A Store built with StoreConfig.Track remembers which keys' spend changed
// (a check admitted, a refund, a grant, Set, Charge, a Merge that took the
// other state) until Changed hands them out: what a node replicates to the
// members that take its keys over. Marking happens under the shard lock the
// change already holds and costs one bit test for a key already marked; a
// key's slot is recorded once until the next Changed.

// tracked is a shard's record of changed slots.
type tracked struct {
	on     bool
	bits   []uint64 // one bit per slot: marked since the last Changed
	marked []uint32 // the marked slots, in the order they were marked
}

// mark records that slot i changed; it reports whether i was not marked
// yet.
func (t *tracked) mark(i uint32) bool {
	if !t.on {
		return false
	}
	w := int(i >> 6)
	if w >= len(t.bits) {
		t.bits = append(t.bits, make([]uint64, w+1-len(t.bits))...)
	}
	b := uint64(1) << (i & 63)
	if t.bits[w]&b != 0 {
		return false
	}
	t.bits[w] |= b
	t.marked = append(t.marked, i)
	return true
}

// markSlot marks slot i of sh, at now.
func (s *Store) markSlot(sh *shard, i uint32, now int64) {
	if sh.track.mark(i) {
		s.pending.Add(1)
		s.first.CompareAndSwap(0, now) // the oldest mark since the last Changed
	}
}

// Pending returns how many keys changed since the last Changed (0 without
// StoreConfig.Track).
func (s *Store) Pending() int64 { return s.pending.Load() }

// Changed calls fn with the state at time at of every key that changed
// since the last call, a shard at a time (outside the shard's lock, as
// Range does), and forgets them. It returns when the oldest of them
// changed (0 when none did). A key that changed and was then evicted or
// deleted is not reported; a slot reused by another key reports that key.
// With spentOnly, a key that is full again at time at is not reported
// either: any state of it taken earlier and refilled to at is full too
// (it spent no more), so a copy made from that state needs nothing.
func (s *Store) Changed(at clock.Instant, spentOnly bool, fn func(batch []Snapshot)) (first clock.Instant) {
	now := int64(at)
	first = clock.Instant(s.first.Swap(0))
	var batch []Snapshot
	var slots []uint32
	for i := range s.shards {
		sh := &s.shards[i]
		batch = batch[:0]
		sh.mu.Lock()
		slots, sh.track.marked = sh.track.marked, slots[:0]
		s.pending.Add(-int64(len(slots)))
		for _, j := range slots {
			sh.track.bits[j>>6] &^= 1 << (j & 63)
			e := sh.at(j)
			if e.klen == 0 {
				continue
			}
			l, ok := sh.limits[e.fp]
			if !ok {
				continue
			}
			used := l.used(&e.st, sh.logs[j], now)
			if used == 0 && spentOnly {
				continue
			}
			batch = append(batch, Snapshot{Key: sh.key(j), Limit: l, Used: used})
		}
		sh.mu.Unlock()
		if len(batch) > 0 {
			fn(batch)
		}
	}
	return first
}

// SetTrack turns the tracking of changed keys on or off (see
// StoreConfig.Track); turning it off forgets the keys marked.
func (s *Store) SetTrack(on bool) {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		sh.track.on = on
		if !on {
			s.pending.Add(-int64(len(sh.track.marked)))
			sh.track = tracked{}
		}
		sh.mu.Unlock()
	}
}

// Mark marks key as changed at now, if the store holds it and tracks
// changes: for a change that must be reported again.
func (s *Store) Mark(key string, at clock.Instant) {
	h := s.hash(key)
	sh := s.shard(h)
	sh.mu.Lock()
	if i := sh.lookup(h, key); i != none {
		s.markSlot(sh, i, int64(at))
	}
	sh.mu.Unlock()
}
