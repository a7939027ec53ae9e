package bucket

import (
	"errors"
	"math/bits"

	"github.com/ringlimit/ringlimit/clock"
)

// A token bucket can hold a debt: a settle whose true cost overran what its
// reservation spent (see Reservations) charges the overrun past zero, down
// to one full capacity below it (a used of up to twice the capacity). Later
// checks wait the debt out: the level refills from below zero at the
// limit's rate, so retry-after is the usual ceil((cost - tokens) / rate)
// with tokens negative. Only Settle makes a debt; the states that carry it
// to other nodes (Set, Merge, MergeEach, Charge) keep it instead of
// clamping it to the capacity.

// maxUsed is the most a key's state can have spent under l: twice the
// capacity for a token bucket (a full debt), the capacity otherwise.
func (l *Limit) maxUsed() int64 {
	if l.alg == TokenBucket {
		return 2 * l.burst
	}
	return l.burst
}

// debtUnits returns the units a token bucket's level refills in e
// nanoseconds, capped at limit, for a level in debt (limit > capUnits):
// elapsedUnits' slow path.
func (l *Limit) debtUnits(e, limit int64) int64 {
	if e-l.fillNs >= l.fillNs { // e×num ≥ 2×capUnits ≥ limit
		return limit
	}
	hi, lo := bits.Mul64(uint64(e), uint64(l.num))
	if hi != 0 || lo >= uint64(limit) {
		return limit
	}
	return int64(lo)
}

// ErrNotToken refuses a settle of a limit that is not a token bucket.
var ErrNotToken = errors.New("bucket: only a token bucket can settle")

// Settle adjusts key's token bucket under l at time now by delta tokens: a
// negative delta gives -delta back (never above full), a positive one
// charges delta even past zero, down to a debt of one capacity at most.
// It returns the key's decision afterwards (Allowed true; Remaining 0 in
// debt) and marks the key changed for replication. A give-back to a key
// the store does not hold does nothing (it is full). It returns an error,
// changing nothing, for a bad key or limit, a limit that is not a token
// bucket (ErrNotToken), or a new key with no room (ErrFull).
func (s *Store) Settle(key string, l *Limit, at clock.Instant, delta int64) (Decision, error) {
	now := int64(at)
	if err := s.CheckKey(key); err != nil {
		return Decision{}, err
	}
	if !l.Valid() {
		return Decision{}, ErrLimit
	}
	if l.alg == Concurrency {
		return Decision{}, errAcquired
	}
	if l.alg != TokenBucket {
		return Decision{}, ErrNotToken
	}
	delta = max(min(delta, 2*l.burst), -2*l.burst) // beyond either bound saturates anyway
	h := s.hash(key)
	sh := s.shard(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if delta <= 0 && sh.lookup(h, key) == none {
		return Decision{Allowed: true, Limit: l.limit, Remaining: l.burst}, nil
	}
	i, e, fresh, ok := sh.entry(h, key, l, now, false)
	if !ok {
		if fresh {
			s.full.Add(1)
			return Decision{}, ErrFull
		}
		return Decision{}, ErrFull // no room to convert it: it keeps its state
	}
	level, at2 := l.refill(&e.st, fresh, now)
	level = min(max(level-delta*l.den, -l.capUnits), l.capUnits)
	e.st.a, e.st.b = level, at2
	sh.setIdle(i, e, l.idleAt(&e.st, nil))
	s.markSlot(sh, i, now, max(delta, 0))
	d := Decision{Allowed: true, Limit: l.limit, Remaining: max(level, 0) / l.den}
	d.ResetAfter = roundUpMs(ceilDiv(l.capUnits-level, l.num))
	return d, nil
}
