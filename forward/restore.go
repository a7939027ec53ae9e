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
// Every copy of a key a node held is kept, its own keys and the ones it
// held for others alike, so after a whole cluster restarts several nodes
// may hold a copy of one key, each taken at its last state file. A copy a
// node restored holds no more than the key's owner has seen, unless the
// owner's own file lacks it: so when another node hands the owner its
// whole copy of a key the owner restored, the owner adds only what that
// copy has beyond the most it has counted of the key's restored copies
// (restoredBase), instead of the whole copy. Spend made since is handed
// over as before.

// Saved is what Export read: when, every key this node holds with what it
// spent (and its reservation records), every lease set, and its replicas
// of each other member's keys, by member.
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

// Export returns what a restart of this node must keep. Keys that are full
// (nothing spent, no reservation) are left out.
func (r *Router) Export() Saved {
	now := r.cfg.Clock.Now()
	s := Saved{At: now, Replicas: map[string][]peermsg.State{}}
	r.cfg.Store.Range(now, func(batch []bucket.Snapshot) bool {
		for i := range batch {
			b := &batch[i]
			recs := appendRecords(r.resv, nil, b.Key, now, false)
			if b.Used <= 0 && len(recs) == 0 {
				continue
			}
			s.Own = append(s.Own, peermsg.State{Key: b.Key, Limit: b.Limit, Used: max(b.Used, 0), ResetAt: b.ResetAt, Window: b.Window,
				Reservations: recs})
		}
		return true
	})
	for _, key := range r.slots.Keys() {
		if held := r.slots.Held(key, now); len(held) > 0 {
			s.Own = append(s.Own, leaseState(r.slots, key, held[0].Limit, now))
		}
	}
	for _, member := range slices.Sorted(maps.Keys(*r.shared.stores.Load())) {
		r.shared.each(member, now, func(st *bucket.Snapshot) {
			if st.Used > 0 {
				s.Replicas[member] = append(s.Replicas[member], peermsg.State{Key: st.Key, Limit: st.Limit, Used: st.Used, Window: st.Window})
			}
		})
	}
	return s
}

// Restore puts back what Export read, s.At ago on this node's clock:
// spends as of s.At (a window or refill since then applies), reservations
// and leases with what was left of their TTL then, less the time since
// (those that ran out meanwhile are dropped). Call it before the node
// joins its cluster. It returns how many keys, lease sets and replicas
// it put back.
func (r *Router) Restore(s Saved) (keys, leaseSets, replicas int) {
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
		importRecords(r.resv, st, now)
		if st.Used > 0 && r.cfg.Store.MergeWindow(st.Key, &st.Limit, s.At, st.Used, st.Window) == nil {
			base[st.Key] = max(base[st.Key], st.Used)
			keys++
		}
	}
	for member, states := range s.Replicas {
		for i := range states {
			st := &states[i]
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
	return keys, leaseSets, replicas
}
