package forward

import (
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/clock"
	"github.com/ringlimit/ringlimit/internal/peermsg"
)

// A node's state across a restart (a node's --data-dir): Export reads
// what a restart must keep, Restore puts it back before the node joins.
//
// Each node keeps the keys it owns when it writes its file. When a whole
// cluster stops one node after the other, each hands its keys to the ones
// left, so the last files written may hold copies of one key: after the
// restart their holders hand them to the key's owner, which may have
// restored the key too. A whole copy so handed over is counted by an
// owner that restored the key only for what it holds beyond the most the
// owner has counted of the key's restored copies (restored.take), not
// whole: the copies of one key are counted once. Spend made since is
// handed over as before.

// A reset survives a restart as its tombstone does: Export writes every
// tombstone this node holds (of any key: every live member records a
// reset) as a state with nothing spent and ResetAt set, and the states it
// writes carry the key's tombstone, replicas included. Restore admits
// each state as one received from a peer (Router.admit): one older than
// a tombstone restored or held is refused, and a tombstone later than
// what the node holds resets the key first. A file written before a reset
// still holds the spend: the reset comes back from the members that
// recorded it, each of which sends every tombstone it holds to a member
// that joins its ring (tellJoined).
//
// A file of an earlier build has no tombstone states and restores as
// before; an earlier build reading this one skips them (nothing spent).

// Saved is what Export read: when, every key this node holds with what it
// spent (and its reservation records), every lease set, every tombstone,
// and its replicas of each other member's keys, by member.
type Saved struct {
	At       clock.Instant
	Own      []peermsg.State
	Replicas map[string][]peermsg.State
}

// restoreWindow is how long after Restore a whole copy handed over for a
// restored key is counted against its restored copies: long enough for
// the nodes of a cluster restarted together to find each other.
const restoreWindow = time.Minute

// restored is, for each key Restore put back, the most of it counted so
// far from restored copies, until restoreWindow after Restore.
type restored struct {
	mu    sync.Mutex
	base  map[string]int64
	until clock.Instant
}

// take returns how much of a whole copy of key holding used is new to this
// node: all of it for a key not restored (or past the window), else what
// it holds beyond the key's base, which it then raises.
func (t *restored) take(key string, used int64, now clock.Instant) int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.base == nil {
		return used
	}
	if now >= t.until {
		t.base = nil
		return used
	}
	base, ok := t.base[key]
	if !ok {
		return used
	}
	t.base[key] = max(base, used)
	return max(used-base, 0)
}

// Export returns what a restart of this node must keep: the keys it owns
// on its ring now (a copy it holds of another member's key is that
// member's to keep: restored here after a restart of this node alone, it
// would be handed back and counted twice), and its replicas. Keys that
// are full (nothing spent, no reservation) are left out; every tombstone
// of a key not written so is written alone (Used 0, ResetAt set).
func (r *Router) Export() Saved {
	now := r.cfg.Clock.Now()
	v := r.view.Load()
	s := Saved{At: now, Replicas: map[string][]peermsg.State{}}
	tombs := map[string]bucket.Tomb{}
	if r.tombs.Load() {
		r.cfg.Store.RangeTombstones(now, func(batch []bucket.Tomb) bool {
			for _, t := range batch {
				tombs[t.Key] = t
			}
			return true
		})
	}
	// A key is saved for its spend or for its reservations: the walk skips
	// keys holding no spend (most of a store, often), and the keys with
	// reservations it did not meet are looked up after it.
	reserved := map[string]bool{}
	if r.resv != nil {
		for _, key := range r.resv.Keys(now) {
			reserved[key] = true
		}
	}
	own := func(b *bucket.Snapshot) {
		if ownerIn(v.ring, r.cfg.Self, b.Key) != r.cfg.Self {
			return
		}
		recs := appendRecords(r.resv, nil, b.Key, now, false)
		if b.Used <= 0 && len(recs) == 0 {
			return
		}
		delete(tombs, b.Key) // the state carries it
		s.Own = append(s.Own, peermsg.State{Key: b.Key, Limit: b.Limit, Used: max(b.Used, 0), ResetAt: b.ResetAt, Window: b.Window,
			Reservations: recs})
	}
	r.cfg.Store.RangeHeld(now, func(batch []bucket.Snapshot) bool {
		for i := range batch {
			delete(reserved, batch[i].Key)
			own(&batch[i])
		}
		return true
	})
	for _, key := range slices.Sorted(maps.Keys(reserved)) {
		if b, ok := r.cfg.Store.Lookup(key, now); ok {
			own(&b)
		}
	}
	for _, key := range r.slots.Keys() {
		if ownerIn(v.ring, r.cfg.Self, key) != r.cfg.Self {
			continue
		}
		if held := r.slots.Held(key, now); len(held) > 0 {
			s.Own = append(s.Own, leaseState(r.slots, key, held[0].Limit, now))
		}
	}
	for _, key := range slices.Sorted(maps.Keys(tombs)) {
		t := tombs[key]
		s.Own = append(s.Own, peermsg.State{Key: key, Limit: t.Limit, ResetAt: t.At})
	}
	// A replica held was admitted after the key's last tombstone here (a
	// reset drops the replicas): it carries that tombstone.
	for _, member := range slices.Sorted(maps.Keys(*r.shared.stores.Load())) {
		r.shared.eachHeld(member, now, func(st *bucket.Snapshot) {
			if st.Used > 0 {
				var at int64
				if r.tombs.Load() {
					at = r.cfg.Store.Tombstone(st.Key, now)
				}
				s.Replicas[member] = append(s.Replicas[member], peermsg.State{Key: st.Key, Limit: st.Limit, Used: st.Used, ResetAt: at,
					Window: st.Window})
			}
		})
	}
	return s
}

// Restore puts back what Export read, s.At ago on this node's clock:
// spends as of s.At (a window or refill since then applies), reservations
// and leases with what was left of their TTL then, less the time since
// (those that ran out meanwhile are dropped), tombstones until they would
// have ended. A state older than a tombstone restored or held is refused
// (see above). Call it before the node joins its cluster. It returns how
// many keys, lease sets, replicas and tombstones it put back.
func (r *Router) Restore(s Saved) (keys, leaseSets, replicas, tombstones int) {
	now := r.cfg.Clock.Now()
	elapsed := max(now.Sub(s.At), 0)
	base := map[string]int64{}
	for i := range s.Own {
		st := &s.Own[i]
		st.Reservations = slices.DeleteFunc(st.Reservations, func(m peermsg.Reservation) bool { return m.TTL <= elapsed })
		for j := range st.Reservations {
			st.Reservations[j].TTL -= elapsed
		}
		if st.LeaseSet {
			st.Leases = slices.DeleteFunc(st.Leases, func(l peermsg.Lease) bool { return l.TTL <= elapsed })
			for j := range st.Leases {
				st.Leases[j].TTL -= elapsed
			}
			r.importLeases("", s.Own[i:i+1], now, false)
			leaseSets++
			continue
		}
		if !r.admit(st, now) {
			continue
		}
		if st.ResetAt != 0 {
			tombstones++
		}
		importRecords(r.resv, st, now)
		if st.Used > 0 && r.cfg.Store.MergeWindow(st.Key, &st.Limit, s.At, st.Used, st.Window) == nil {
			base[st.Key] = max(base[st.Key], st.Used)
			keys++
		}
	}
	for member, states := range s.Replicas {
		for i := range states {
			st := &states[i]
			if !r.admit(st, now) {
				continue
			}
			r.shared.set(member, st.Key, &st.Limit, s.At, st.Used, st.Window)
			replicas++
		}
	}
	r.restored.mu.Lock()
	r.restored.base, r.restored.until = base, now.Add(restoreWindow)
	r.restored.mu.Unlock()
	if keys > 0 {
		r.handoff.mayHoldForeign() // the ring may give some to others: the next pass hands them over
	}
	return keys, leaseSets, replicas, tombstones
}
