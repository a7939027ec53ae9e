package bucket

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringlimit/ringlimit/clock"
)

// Lease is one slot of a Concurrency limit held until Expires (on the
// holding node's clock) or its release.
type Lease struct {
	ID        string
	Key       string
	Limit     Limit
	Expires   clock.Instant
	RequestID string // "" for none
	// MaxTTL is the most a renew may make it live for (its layer's
	// max_lease_ttl); 0 is MaxLeaseTTL.
	MaxTTL time.Duration
	// From is the member whose replica or handoff brought the lease to
	// this table, "" for one granted or restored here (Unknown). Not
	// counted in the table's bytes: callers pass one shared name.
	From string
}

// LeaseGrant is the answer to Leases.Acquire.
type LeaseGrant struct {
	// Granted says whether the acquire holds a slot: Lease names it.
	Granted bool
	Lease   Lease
	// Repeated is true when the acquire repeated a live lease's request
	// id: Lease is that lease, and no second slot was taken.
	Repeated bool
	// InFlight is the key's live leases after the acquire.
	InFlight int64
	// RetryAfter, when refused, is the time until the key's earliest
	// lease expires: at least one millisecond, rounded up to one.
	RetryAfter time.Duration
}

// Leases is a node's table of concurrency leases, by key: those of the
// keys it owns and the replicas of its predecessors'. It is pure (time is
// a parameter), bounded in records (max) and bytes (MaxLeaseBytes), and
// an expired lease counts for nothing from the instant it expires (it is
// dropped lazily). It is safe for concurrent use.
type Leases struct {
	max   int
	n     atomic.Int64 // len(ids), read without the lock
	mu    sync.Mutex   // guards the fields below
	bytes int64
	ids   map[string]*Lease
	keys  map[string][]*Lease // each key's leases, in the order acquired
	// sweepAt is the earliest expiry at the last sweep: a full table is not
	// swept again before it.
	sweepAt clock.Instant
}

// NewLeases returns an empty table of at most max leases
// (DefaultMaxLeases when max ≤ 0).
func NewLeases(max int) *Leases {
	if max <= 0 {
		max = DefaultMaxLeases
	}
	return &Leases{max: max, ids: make(map[string]*Lease), keys: make(map[string][]*Lease)}
}

// Len returns the leases held, expired ones not yet dropped included.
func (t *Leases) Len() int { return int(t.n.Load()) }

// Empty reports whether the table holds no lease, without its lock.
func (t *Leases) Empty() bool { return t.n.Load() == 0 }

func leaseBytes(l *Lease) int64 { return int64(len(l.ID)+len(l.Key)+len(l.RequestID)) + 192 }

// Acquire grants a lease of key under l for ttl at now iff the key's
// unexpired leases number fewer than l's count; refused, RetryAfter is the
// time to the earliest expiry. An acquire repeating the request id of a
// live lease of key answers that lease (Repeated). Its error wraps
// ErrLimit for a limit that is not Concurrency, a ttl out of range or a
// request id too long, or is ErrLeasesFull (nothing granted). The lease
// may be renewed for up to MaxLeaseTTL (AcquireCapped sets less).
func (t *Leases) Acquire(key string, l Limit, ttl time.Duration, requestID string, now clock.Instant) (LeaseGrant, error) {
	return t.AcquireCapped(key, l, ttl, 0, requestID, now)
}

// AcquireCapped is Acquire of a lease whose renewals are capped at maxTTL
// (0: MaxLeaseTTL; else within MinLeaseTTL and MaxLeaseTTL, or its error
// wraps ErrLimit); a ttl above maxTTL is capped too.
func (t *Leases) AcquireCapped(key string, l Limit, ttl, maxTTL time.Duration, requestID string, now clock.Instant) (LeaseGrant, error) {
	if maxTTL != 0 {
		if err := CheckLeaseTTL("max_ttl", maxTTL); err != nil {
			return LeaseGrant{}, err
		}
		ttl = min(ttl, maxTTL)
	}
	if !l.Valid() || l.alg != Concurrency {
		return LeaseGrant{}, fmt.Errorf("%w: %v is not a concurrency limit", ErrLimit, l.alg)
	}
	if err := CheckKey(key); err != nil {
		return LeaseGrant{}, err
	}
	if err := CheckLeaseTTL("ttl", ttl); err != nil {
		return LeaseGrant{}, err
	}
	if len(requestID) > MaxRequestIDLen {
		return LeaseGrant{}, fieldErr(ErrLimit, "request_id", "must be at most %d bytes, got %d", MaxRequestIDLen, len(requestID))
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	live := t.prune(key, now)
	if requestID != "" {
		for _, ls := range live {
			if ls.RequestID == requestID {
				return LeaseGrant{Granted: true, Repeated: true, Lease: *ls, InFlight: int64(len(live))}, nil
			}
		}
	}
	if int64(len(live)) >= l.limit {
		first := live[0].Expires
		for _, ls := range live[1:] {
			first = min(first, ls.Expires)
		}
		return LeaseGrant{InFlight: int64(len(live)), RetryAfter: max(roundUpMs(int64(first.Sub(now))), time.Millisecond)}, nil
	}
	ls := &Lease{ID: NewLeaseID(key), Key: strings.Clone(key), Limit: l, Expires: now.Add(ttl), RequestID: strings.Clone(requestID),
		MaxTTL: maxTTL}
	if !t.room(ls, now) {
		return LeaseGrant{InFlight: int64(len(live))}, ErrLeasesFull
	}
	t.insert(ls)
	return LeaseGrant{Granted: true, Lease: *ls, InFlight: int64(len(live)) + 1}, nil
}

// Renew makes id's lease expire ttl after now, ttl capped at the lease's
// MaxTTL, and returns it as it was and as it is: ErrLeaseNotFound for a
// lease not held, released or expired at now.
func (t *Leases) Renew(id string, ttl time.Duration, now clock.Instant) (prev, cur Lease, err error) {
	if err := CheckLeaseTTL("ttl", ttl); err != nil {
		return Lease{}, Lease{}, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	ls, ok := t.ids[id]
	if !ok || ls.Expires <= now {
		if ok {
			t.remove(ls)
		}
		return Lease{}, Lease{}, ErrLeaseNotFound
	}
	prev = *ls
	if ls.MaxTTL > 0 {
		ttl = min(ttl, ls.MaxTTL)
	}
	ls.Expires = now.Add(ttl)
	return prev, *ls, nil
}

// Restore puts a lease's expiry back to what prev had (a renew its
// successor did not acknowledge), if the lease is still held.
func (t *Leases) Restore(prev Lease) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if ls, ok := t.ids[prev.ID]; ok {
		ls.Expires = prev.Expires
		t.sweepAt = min(t.sweepAt, prev.Expires)
	}
}

// Release drops id's lease and returns it; it reports whether it removed
// a live lease at now (a second release, or one of an expired lease,
// changes nothing and reports false).
func (t *Leases) Release(id string, now clock.Instant) (Lease, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ls, ok := t.ids[id]
	if !ok {
		return Lease{}, false
	}
	t.remove(ls)
	if ls.Expires <= now {
		return Lease{}, false
	}
	return *ls, true
}

// Remove drops id's lease whatever its state (an acquire its successor
// did not acknowledge).
func (t *Leases) Remove(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if ls, ok := t.ids[id]; ok {
		t.remove(ls)
	}
}

// Get returns id's lease, if held and unexpired at now.
func (t *Leases) Get(id string, now clock.Instant) (Lease, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ls, ok := t.ids[id]
	if !ok || ls.Expires <= now {
		return Lease{}, false
	}
	return *ls, true
}

// InFlight returns key's live leases at now.
func (t *Leases) InFlight(key string, now clock.Instant) int64 {
	if t.Empty() {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return int64(len(t.prune(key, now)))
}
