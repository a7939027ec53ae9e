package bucket

import (
	"github.com/ringlimit/ringlimit/clock"
)

// A reset key leaves a tombstone: the instant of the reset on the clock of
// the node that decided it (the key's owner), kept until the key's limit
// could have refilled from empty (Limit.RefillTime) since, after which no
// state built before the reset still holds spend. States that move between
// nodes carry their sender's tombstone (Snapshot.ResetAt, read under the
// same lock as the state, so that a state read before a reset never
// carries that reset's tombstone), and Admit refuses a state older than
// the receiver's tombstone: a late replica, a handoff or a fetch from
// before the reset does not bring the spend back.
//
// The tombstones are bounded per shard in count (maxTombsPerShard) and in
// key bytes (maxTombBytesPerShard): 1,024 and 256 KiB a shard, 65,536 and
// 16 MiB with the default 64 shards. Past a bound the oldest tombstone of
// the shard is dropped first (expired ones before): a state from before
// that reset arriving later could then bring its spend back. A tombstone
// keeps the key's limit (RangeTombstones), so that a node's state file can
// carry it across a restart (see forward's Export and Restore): at most
// 1,024 limits (about 100 bytes each) a shard more.

const (
	maxTombsPerShard     = 1024
	maxTombBytesPerShard = 256 << 10
)

// tomb is one key's tombstone.
type tomb struct {
	at    int64 // the reset, on the resetting node's clock
	until int64 // when it stops mattering
	l     Limit // the limit it was recorded under (its RefillTime gave until)
}

// tombs is a shard's tombstones; guarded by the shard's lock.
type tombs struct {
	m     map[string]tomb
	order []string // keys in the order they were recorded (may repeat, or name dropped keys)
	bytes int
}

// get returns key's tombstone at now, 0 for none.
func (t *tombs) get(key string, now int64) int64 {
	tb, ok := t.m[key]
	if !ok || now >= tb.until {
		return 0
	}
	return tb.at
}

// record sets key's tombstone to at, unless it has a later one.
func (t *tombs) record(key string, l *Limit, at, until, now int64) {
	if t.m == nil {
		t.m = map[string]tomb{}
	}
	if old, ok := t.m[key]; ok && now < old.until {
		if old.at >= at {
			return
		}
		t.m[key] = tomb{at: at, until: max(until, old.until), l: *l}
		return
	}
	for len(t.m) > 0 && (len(t.m) >= maxTombsPerShard || t.bytes+len(key) > maxTombBytesPerShard) {
		t.dropOldest(now)
	}
	if len(t.order) > 4*maxTombsPerShard { // stale entries: rebuild
		t.order = t.order[:0]
		for k := range t.m {
			t.order = append(t.order, k)
		}
	}
	key = string([]byte(key))
	t.m[key] = tomb{at: at, until: until, l: *l}
	t.order = append(t.order, key)
	t.bytes += len(key)
}

// dropOldest drops the expired tombstones, or, when none expired, the
// oldest recorded.
func (t *tombs) dropOldest(now int64) {
	expired := false
	for k, tb := range t.m {
		if now >= tb.until {
			t.drop(k)
			expired = true
		}
	}
	if expired {
		return
	}
	for len(t.order) > 0 {
		k := t.order[0]
		t.order = t.order[1:]
		if _, ok := t.m[k]; ok {
			t.drop(k)
			return
		}
	}
}

func (t *tombs) drop(key string) {
	delete(t.m, key)
	t.bytes -= len(key)
}

// ResetAt resets key at the instant at (on the resetting node's clock,
// Unix ns: the key's owner's) under l: the store forgets the key's state
// and records the tombstone at until l's RefillTime after at (so that
// every node that records it drops it at the same instant, clocks
// agreeing). It returns
// what a check of cost 1 found remaining before and whether the key was
// held. A later tombstone already recorded is kept.
func (s *Store) ResetAt(key string, l *Limit, now clock.Instant, at int64) (previous int64, held bool, err error) {
	if err := s.CheckKey(key); err != nil {
		return 0, false, err
	}
	if !l.Valid() {
		return 0, false, ErrLimit
	}
	if l.alg == Concurrency {
		return 0, false, errAcquired
	}
	h := s.hash(key)
	sh := s.shard(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	previous, held = sh.reset(h, key, l, int64(now))
	sh.tombs.record(key, l, at, satAdd(at, int64(l.RefillTime())), int64(now))
	return previous, held, nil
}

// Tombstone returns key's tombstone at now: the instant it was last reset,
// 0 for none (or one that no longer matters).
func (s *Store) Tombstone(key string, now clock.Instant) int64 {
	h := s.hash(key)
	sh := s.shard(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.tombs.get(key, int64(now))
}

// Admit decides whether a state of key received from another node, which
// carries its sender's tombstone resetAt, may be merged at now: not when
// the store's tombstone for key is later (the state predates a reset this
// store knows of). A later resetAt than the store's first resets the key
// here (the sender knows of a reset this store missed) and records it,
// until l's RefillTime after resetAt; the state is then merged onto a full
// key: reset is then true.
func (s *Store) Admit(key string, l *Limit, now clock.Instant, resetAt int64) (ok, reset bool) {
	h := s.hash(key)
	sh := s.shard(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	t := sh.tombs.get(key, int64(now))
	switch {
	case resetAt < t:
		return false, false
	case resetAt > t:
		if i := sh.lookup(h, key); i != none {
			sh.remove(i)
			sh.free = append(sh.free, i)
		}
		sh.tombs.record(key, l, resetAt, satAdd(resetAt, int64(l.RefillTime())), int64(now))
		return true, true
	}
	return true, false
}

// Tomb is one key's tombstone as RangeTombstones reads it.
type Tomb struct {
	Key   string
	Limit Limit // the limit it was recorded under
	At    int64 // the reset, on the resetting node's clock (Unix ns)
}

// RangeTombstones calls fn with the tombstones that still matter at now,
// a shard at a time (read under the shard's lock, fn called after it;
// the slice is reused: fn must not keep it), until fn returns false. Recording a tombstone read here with Admit (resetAt
// At, under Limit) gives it the same end, but for a tombstone whose limit
// changed to one that refills sooner.
func (s *Store) RangeTombstones(now clock.Instant, fn func([]Tomb) bool) {
	var batch []Tomb
	for i := range s.shards {
		sh := &s.shards[i]
		batch = batch[:0]
		sh.mu.Lock()
		for k, tb := range sh.tombs.m {
			if int64(now) < tb.until {
				batch = append(batch, Tomb{Key: k, Limit: tb.l, At: tb.at})
			}
		}
		sh.mu.Unlock()
		if len(batch) > 0 && !fn(batch) {
			return
		}
	}
}

// Tombstones returns how many tombstones the store holds (expired ones
// not yet dropped included).
func (s *Store) Tombstones() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.tombs.m)
		sh.mu.Unlock()
	}
	return n
}

// UsedReset is Used with the key's tombstone, read under the same lock: a
// state read before a reset never carries that reset's tombstone. A key
// not held may still have a tombstone (ok false, resetAt set).
func (s *Store) UsedReset(key string, now clock.Instant) (l Limit, used, resetAt int64, ok bool) {
	snap, ok := s.Lookup(key, now)
	return snap.Limit, snap.Used, snap.ResetAt, ok
}

// Lookup is UsedReset as a Snapshot, with its Window.
func (s *Store) Lookup(key string, now clock.Instant) (snap Snapshot, ok bool) {
	h := s.hash(key)
	sh := s.shard(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	snap = Snapshot{Key: key, ResetAt: sh.tombs.get(key, int64(now))}
	i := sh.lookup(h, key)
	if i == none {
		return snap, false
	}
	e := sh.at(i)
	l, ok := sh.limits[e.fp]
	if !ok {
		return snap, false
	}
	snap.Limit, snap.Used, snap.Window = l, l.used(&e.st, sh.logs[i], int64(now)), l.windowOf(&e.st, int64(now))
	return snap, true
}
