package bucket

import (
	"slices"
	"strings"

	"github.com/ringlimit/ringlimit/clock"
)

// What replication and handoff need of a lease table: a key's absolute
// set of leases, a replica's replacement of it, a handoff's union by id,
// and the keys held.

// Held returns key's unexpired leases at now (copies), in the order they
// were acquired.
func (t *Leases) Held(key string, now clock.Instant) []Lease {
	if t.Empty() {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	live := t.prune(key, now)
	out := make([]Lease, len(live))
	for i, ls := range live {
		out[i] = *ls
	}
	return out
}

// Keys returns the keys that hold leases (some may have expired).
func (t *Leases) Keys() []string {
	if t.Empty() {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]string, 0, len(t.keys))
	for k := range t.keys {
		out = append(out, k)
	}
	return out
}

// Replace makes key's leases exactly set, less what expired at now or
// does not name key (a replica: the set sent is the set held). It returns
// how many it holds; a lease that finds no room is left out.
func (t *Leases) Replace(key string, set []Lease, now clock.Instant) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, ls := range t.keys[key] {
		t.remove(ls)
	}
	return t.merge(key, set, now)
}

// Unknown counts key's live leases at now that set does not name and that
// did not come from from: granted or restored here, or brought by another
// member. A replica of from's set would drop them, though from may never
// have counted them.
func (t *Leases) Unknown(key string, set []Lease, from string, now clock.Instant) int {
	if t.Empty() {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, ls := range t.prune(key, now) {
		if ls.From != from && !slices.ContainsFunc(set, func(in Lease) bool { return in.ID == ls.ID }) {
			n++
		}
	}
	return n
}

// Merge folds set into key's leases by id (a handoff): a lease not held is
// added, one held keeps the later expiry. It returns how many of set it
// took.
func (t *Leases) Merge(key string, set []Lease, now clock.Instant) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.merge(key, set, now)
}

func (t *Leases) merge(key string, set []Lease, now clock.Instant) int {
	t.prune(key, now)
	n := 0
	for i := range set {
		in := &set[i]
		if in.Key != key || in.Expires <= now || !in.Limit.Valid() || in.Limit.alg != Concurrency || len(in.RequestID) > MaxRequestIDLen {
			continue
		}
		if ls, ok := t.ids[in.ID]; ok {
			if ls.Key == key {
				ls.Expires = max(ls.Expires, in.Expires)
				if ls.MaxTTL == 0 {
					ls.MaxTTL = in.MaxTTL
				}
				n++
			}
			continue
		}
		c := *in
		c.ID, c.Key, c.RequestID = strings.Clone(c.ID), strings.Clone(key), strings.Clone(c.RequestID)
		if !t.room(&c, now) {
			continue
		}
		t.insert(&c)
		n++
	}
	return n
}

// prune drops key's expired leases and returns its live ones; the caller
// holds t.mu.
func (t *Leases) prune(key string, now clock.Instant) []*Lease {
	live := t.keys[key]
	for _, ls := range live {
		if ls.Expires <= now {
			t.remove(ls)
		}
	}
	return t.keys[key]
}

// room reports whether ls fits, sweeping every key's expired leases when
// the table is at its bound and one may have expired.
func (t *Leases) room(ls *Lease, now clock.Instant) bool {
	fits := func() bool { return len(t.ids) < t.max && t.bytes+leaseBytes(ls) <= MaxLeaseBytes }
	if fits() {
		return true
	}
	if now < t.sweepAt {
		return false
	}
	next := clock.Instant(1<<63 - 1)
	for key := range t.keys {
		for _, l := range t.prune(key, now) {
			next = min(next, l.Expires)
		}
	}
	t.sweepAt = next
	return fits()
}

func (t *Leases) insert(ls *Lease) {
	t.sweepAt = min(t.sweepAt, ls.Expires) // a sweep may find it expired from then
	t.ids[ls.ID] = ls
	t.keys[ls.Key] = append(t.keys[ls.Key], ls)
	t.bytes += leaseBytes(ls)
	t.n.Add(1)
}

func (t *Leases) remove(ls *Lease) {
	if t.ids[ls.ID] != ls {
		return
	}
	delete(t.ids, ls.ID)
	t.bytes -= leaseBytes(ls)
	t.n.Add(-1)
	list := t.keys[ls.Key]
	for i, x := range list {
		if x == ls {
			list = append(list[:i:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(t.keys, ls.Key)
	} else {
		t.keys[ls.Key] = list
	}
}
