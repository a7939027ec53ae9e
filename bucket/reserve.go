package bucket

import (
	"errors"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringlimit/ringlimit/clock"
)

// Bounds of a reservation's TTL.
const (
	// MinReserveTTL and MaxReserveTTL bound how long a reservation can be
	// settled.
	MinReserveTTL = time.Second
	MaxReserveTTL = 24 * time.Hour
	// DefaultReserveTTL is the TTL of a reservation that names none.
	DefaultReserveTTL = 5 * time.Minute
	// DefaultMaxReservations is the records one node holds at most, by
	// default.
	DefaultMaxReservations = 1 << 16
	// MaxReservationBytes bounds the bytes a table's records count
	// (recordBytes: the id, the key and a fixed share): 32 MiB, 65,536
	// records of keys up to about 200 bytes, fewer of longer keys.
	MaxReservationBytes = 32 << 20
)

// Errors of the reservation table.
var (
	// ErrReservationNotFound: no such record (unknown, forged or expired).
	ErrReservationNotFound = errors.New("bucket: reservation not found")
	// ErrAlreadySettled: the record was settled before; nothing changed.
	ErrAlreadySettled = errors.New("bucket: reservation already settled")
	// ErrReservationsFull: the table holds its bound of unexpired records.
	ErrReservationsFull = errors.New("bucket: reservation table full")
	// ErrReservationID: the id is malformed.
	ErrReservationID = errors.New("bucket: malformed reservation id")
)

// CheckReserveTTL returns an error, a *FieldError for field, unless ttl is
// within MinReserveTTL and MaxReserveTTL.
func CheckReserveTTL(field string, ttl time.Duration) error {
	if ttl < MinReserveTTL || ttl > MaxReserveTTL {
		return fieldErr(ErrLimit, field, "must be between %v and %v, got %v", MinReserveTTL, MaxReserveTTL, ttl)
	}
	return nil
}

// CheckReserve returns an error, a *FieldError for "limit.algorithm",
// unless a limit of alg can be reserved: only a token bucket can.
func CheckReserve(alg Algorithm) error {
	if alg != TokenBucket {
		return fieldErr(ErrLimit, "limit.algorithm", "reserve needs a token_bucket limit, not %v", alg)
	}
	return nil
}

// Reservation is an owner's record of one reservation.
type Reservation struct {
	ID    string
	Key   string
	Limit Limit
	// Reserved is the cost the reserving check spent.
	Reserved int64
	// Expires is when the record stops being settleable, on the holding
	// node's clock.
	Expires clock.Instant
	// Settled is true once settled, with the cost it settled at.
	Settled     bool
	SettledCost int64
	// unsent is true for a record added or settled since AppendChanged
	// last handed it out.
	unsent bool
}

// Reservations is a node's table of reservations, bounded in records:
// records expire lazily (a lookup or a sweep drops them), a settled record
// is kept until its expiry so that a second settle still answers
// ErrAlreadySettled. It is safe for concurrent use.
type Reservations struct {
	max   int
	n     atomic.Int64 // len(ids), read without the lock
	mu    sync.Mutex   // guards the fields below
	bytes int64        // what the records count (recordBytes)
	ids   map[string]*Reservation
	// byKey indexes the ids of each key, for the states that carry a key's
	// records to other nodes.
	byKey map[string][]string
	// sweepAt is the earliest expiry at the last sweep: a full table is not
	// swept again before it.
	sweepAt clock.Instant
}

// NewReservations returns an empty table of at most max records
// (DefaultMaxReservations when max ≤ 0).
func NewReservations(max int) *Reservations {
	if max <= 0 {
		max = DefaultMaxReservations
	}
	return &Reservations{max: max, ids: make(map[string]*Reservation), byKey: make(map[string][]string)}
}

// Max returns the table's bound in records.
func (t *Reservations) Max() int { return t.max }

// Len returns the records held, expired ones not yet dropped included.
func (t *Reservations) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.ids)
}

// recordBytes is what a record counts against MaxReservationBytes: its
// id, its key, and the record and index entries around them.
func recordBytes(r *Reservation) int64 { return int64(len(r.ID)+len(r.Key)) + 256 }

// full reports whether r finds no room: max records, or
// MaxReservationBytes, that have not expired at now.
func (t *Reservations) full(r *Reservation, now clock.Instant) bool {
	fits := func() bool { return len(t.ids) < t.max && t.bytes+recordBytes(r) <= MaxReservationBytes }
	return !fits() && (!t.sweep(now) || !fits())
}

// Add records r (its ID set). It returns ErrReservationsFull, adding
// nothing, when the table holds max records, or MaxReservationBytes, that
// have not expired at now.
func (t *Reservations) Add(r Reservation, now clock.Instant) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.full(&r, now) {
		return ErrReservationsFull
	}
	t.insert(&r)
	return nil
}

// sweep drops the expired records, if the earliest may have expired, and
// reports whether it looked.
func (t *Reservations) sweep(now clock.Instant) bool {
	if now < t.sweepAt {
		return false
	}
	next := clock.Instant(1<<63 - 1)
	keys := map[string]bool{} // keys that lost records: their index is filtered once
	for id, r := range t.ids {
		if r.Expires <= now {
			delete(t.ids, id)
			t.bytes -= recordBytes(r)
			t.n.Add(-1)
			keys[r.Key] = true
		} else {
			next = min(next, r.Expires)
		}
	}
	for key := range keys {
		ids := slices.DeleteFunc(t.byKey[key], func(id string) bool { _, held := t.ids[id]; return !held })
		if len(ids) == 0 {
			delete(t.byKey, key)
		} else {
			t.byKey[key] = ids
		}
	}
	t.sweepAt = next
	return true
}

func (t *Reservations) insert(r *Reservation) {
	r.unsent = true
	if _, ok := t.ids[r.ID]; !ok {
		t.byKey[r.Key] = append(t.byKey[r.Key], r.ID)
		t.n.Add(1)
		t.bytes += recordBytes(r)
		t.sweepAt = min(t.sweepAt, r.Expires) // a sweep may find it expired from then
	}
	t.ids[r.ID] = r
}

func (t *Reservations) remove(id, key string) {
	r, ok := t.ids[id]
	if !ok {
		return
	}
	t.bytes -= recordBytes(r)
	t.n.Add(-1)
	delete(t.ids, id)
	ids := t.byKey[key]
	for i := len(ids) - 1; i >= 0; i-- { // from the newest: a refused reserve removes the record it just added
		if ids[i] == id {
			ids = append(ids[:i], ids[i+1:]...)
			break
		}
	}
	if len(ids) == 0 {
		delete(t.byKey, key)
	} else {
		t.byKey[key] = ids
	}
}

// Settle marks id settled at cost and returns its record as it was before:
// ErrReservationNotFound for an id not held or expired at now (dropped),
// ErrAlreadySettled for one settled before (nothing changes).
func (t *Reservations) Settle(id string, cost int64, now clock.Instant) (Reservation, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r, ok := t.ids[id]
	if !ok {
		return Reservation{}, ErrReservationNotFound
	}
	if r.Expires <= now {
		t.remove(id, r.Key)
		return Reservation{}, ErrReservationNotFound
	}
	if r.Settled {
		return *r, ErrAlreadySettled
	}
	prev := *r
	r.Settled, r.SettledCost, r.unsent = true, cost, true
	return prev, nil
}

// Unsettle undoes a Settle whose spend could not be applied.
func (t *Reservations) Unsettle(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if r, ok := t.ids[id]; ok {
		r.Settled, r.SettledCost = false, 0
	}
}

// Get returns id's record, if held and unexpired at now.
func (t *Reservations) Get(id string, now clock.Instant) (Reservation, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r, ok := t.ids[id]
	if !ok || r.Expires <= now {
		return Reservation{}, false
	}
	return *r, true
}

// AppendKey appends key's unexpired records at now to dst.
func (t *Reservations) AppendKey(dst []Reservation, key string, now clock.Instant) []Reservation {
	if t.Empty() {
		return dst
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, id := range t.byKey[key] {
		if r := t.ids[id]; r.Expires > now {
			dst = append(dst, *r)
		}
	}
	return dst
}

// AppendChanged appends to dst key's unexpired records at now that were
// added or settled since it last handed them out, and marks them handed
// out: a replication round carries each change once (Resend puts back what
// a round failed to deliver).
func (t *Reservations) AppendChanged(dst []Reservation, key string, now clock.Instant) []Reservation {
	if t.Empty() {
		return dst
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, id := range t.byKey[key] {
		if r := t.ids[id]; r.unsent && r.Expires > now {
			r.unsent = false
			dst = append(dst, *r)
		}
	}
	return dst
}

// Resend marks the records ids as changed again (their copy was lost).
func (t *Reservations) Resend(ids []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, id := range ids {
		if r, ok := t.ids[id]; ok {
			r.unsent = true
		}
	}
}

// Empty reports whether the table holds no record, without its lock.
func (t *Reservations) Empty() bool { return t.n.Load() == 0 }

// Remove drops id's record (a reserving check that was refused after all).
func (t *Reservations) Remove(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if r, ok := t.ids[id]; ok {
		t.remove(id, r.Key)
	}
}

// Keys returns the keys the table holds records of that have not expired
// at now. It drops the expired records first (a sweep), so that a table
// whose records have all expired is Empty again.
func (t *Reservations) Keys(now clock.Instant) []string {
	if t.Empty() {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sweep(now)
	return slices.Collect(maps.Keys(t.byKey))
}

// HasKey reports whether the table holds records of key.
func (t *Reservations) HasKey(key string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.byKey[key]) > 0
}

// Merge folds records another node sent (replication, handoff) into the
// table, by id: a record not held is added (while there is room, unless
// expired), and a settled record wins over an unsettled one. The later
// expiry is kept. It returns how many records it took.
func (t *Reservations) Merge(rs []Reservation, now clock.Instant) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for i := range rs {
		in := &rs[i]
		if in.Expires <= now || in.Reserved < 0 || in.SettledCost < 0 {
			continue
		}
		r, ok := t.ids[in.ID]
		if !ok {
			if t.full(in, now) {
				continue
			}
			c := *in
			t.insert(&c)
			n++
			continue
		}
		if in.Settled && !r.Settled {
			r.Settled, r.SettledCost, r.unsent = true, in.SettledCost, true
		}
		r.Expires = max(r.Expires, in.Expires)
		n++
	}
	return n
}
