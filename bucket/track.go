package bucket

import (
	"math"

	"github.com/ringlimit/ringlimit/clock"
)

// A Store built with StoreConfig.Track remembers which keys' spend changed
// (a check admitted, a refund, a grant, Set, Charge, a Merge that took the
// other state) until Changed hands them out: what a node replicates to the
// members that take its keys over. Marking happens under the shard lock the
// change already holds and costs one bit test for a key already marked; a
// key's slot is recorded once until the next Changed.
//
// Each key also counts the tokens it admitted that no acknowledged copy
// holds yet (TakeUnsent): the spend a crash of this node would lose. The
// count is the tokens admitted since Changed last handed the key out, plus,
// while the round of that Changed is not acknowledged (Acked), the tokens
// that round carries. Rounds are numbered by Changed; 12 bytes a slot, and
// only with Track.

// tracked is a shard's record of changed slots.
type tracked struct {
	on     bool
	bits   []uint64    // one bit per slot: marked since the last Changed
	marked []uint32    // the marked slots, in the order they were marked
	counts []slotCount // by slot
}

// slotCount is what one slot admitted and not yet acknowledged, in tokens
// (saturating).
type slotCount struct {
	unsent uint32 // admitted since the last Changed that handed the slot out
	sent   uint32 // handed out by round, not acknowledged when round was
	round  uint32 // the round that last handed the slot out; 0: none
}

// after reports whether round a comes after round b (wrapping).
func after(a, b uint32) bool { return int32(a-b) > 0 }

// unacked is the tokens c admitted that no round up to acked (the last
// acknowledged one) carries.
func (c *slotCount) unacked(acked uint32) int64 {
	n := int64(c.unsent)
	if after(c.round, acked) {
		n += int64(c.sent)
	}
	return n
}

// mark records that slot i changed, spending spent tokens; it reports
// whether i was not marked yet, and the tokens i admitted that no
// acknowledged round carries (acked: the last acknowledged round).
func (t *tracked) mark(i uint32, spent int64, acked uint32) (fresh bool, unacked int64) {
	if !t.on {
		return false, 0
	}
	w := int(i >> 6)
	if w >= len(t.bits) {
		t.bits = append(t.bits, make([]uint64, w+1-len(t.bits))...)
		t.counts = append(t.counts, make([]slotCount, len(t.bits)*64-len(t.counts))...)
	}
	c := &t.counts[i]
	c.unsent = uint32(min(int64(c.unsent)+max(spent, 0), math.MaxUint32))
	b := uint64(1) << (i & 63)
	if t.bits[w]&b != 0 {
		return false, c.unacked(acked)
	}
	t.bits[w] |= b
	t.marked = append(t.marked, i)
	return true, c.unacked(acked)
}

// handOut records that round hands slot j out with what it admitted, and
// returns those tokens; or (spent false) that j holds nothing a copy could
// lack.
func (t *tracked) handOut(j, round, acked uint32, spent bool) int64 {
	c := &t.counts[j]
	switch {
	case !spent:
		*c = slotCount{}
		return 0
	case after(c.round, acked): // the last round's tokens are not acknowledged either
		c.sent = uint32(min(int64(c.sent)+int64(c.unsent), math.MaxUint32))
	default:
		c.sent = c.unsent
	}
	c.unsent, c.round = 0, round
	return int64(c.sent)
}

// markSlot marks slot i of sh, at now, spending spent tokens (0 for a
// change that admits nothing: a refund, a merge, a Set), and returns the
// tokens i admitted that no acknowledged round carries.
func (s *Store) markSlot(sh *shard, i uint32, now int64, spent int64) int64 {
	fresh, unacked := sh.track.mark(i, spent, s.acked.Load())
	if fresh {
		s.pending.Add(1)
		s.first.CompareAndSwap(0, now) // the oldest mark since the last Changed
	}
	return unacked
}

// Round returns the number of the last Changed call, the round it handed
// out (0 before the first; it wraps).
func (s *Store) Round() uint32 { return s.round.Load() }

// Acked records that round, and every round before it, is acknowledged:
// the copies made of what it handed out are safe, except those of keys
// given back with Mark before. The caller acknowledges rounds in order.
func (s *Store) Acked(round uint32) {
	for {
		old := s.acked.Load()
		if !after(round, old) || s.acked.CompareAndSwap(old, round) {
			return
		}
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
// batch is reused once fn returns; the Snapshots' keys may be kept.
func (s *Store) Changed(at clock.Instant, spentOnly bool, fn func(batch []Snapshot)) (first clock.Instant) {
	now := int64(at)
	round := s.round.Add(1)
	if round == 0 { // 0 means no round
		round = s.round.Add(1)
	}
	acked := s.acked.Load()
	first = clock.Instant(s.first.Swap(0))
	pooled, _ := s.changed.Get().(*[]Snapshot)
	if pooled == nil {
		pooled = new([]Snapshot)
	}
	batch := *pooled
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
				sh.track.handOut(j, round, acked, false)
				continue
			}
			l, ok := sh.limits[e.fp]
			if !ok {
				sh.track.handOut(j, round, acked, false)
				continue
			}
			used := l.used(&e.st, sh.logs[j], now)
			// A key full again holds nothing a copy could lack.
			unacked := sh.track.handOut(j, round, acked, used > 0)
			if used == 0 && spentOnly {
				continue
			}
			k := sh.key(j)
			batch = append(batch, Snapshot{Key: k, Limit: l, Used: used, Unacked: unacked, ResetAt: sh.tombs.get(k, now),
				Window: l.windowOf(&e.st, now)})
		}
		sh.mu.Unlock()
		if len(batch) > 0 {
			fn(batch)
			clear(batch) // its keys are not kept past the call
		}
	}
	if cap(batch) <= maxPooledBatch {
		*pooled = batch[:0]
		s.changed.Put(pooled)
	}
	return first
}

// maxPooledBatch bounds the batches Changed keeps for its next call: a
// shard's marked keys are usually far fewer.
const maxPooledBatch = 4096

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
// changes: for a change that must be reported again. unacked gives back
// the tokens of a hand-out whose copy was not acknowledged
// (Snapshot.Unacked): they count as admitted since the last Changed again.
func (s *Store) Mark(key string, at clock.Instant, unacked int64) {
	h := s.hash(key)
	sh := s.shard(h)
	sh.mu.Lock()
	if i := sh.lookup(h, key); i != none {
		s.markSlot(sh, i, int64(at), unacked)
	}
	sh.mu.Unlock()
}
