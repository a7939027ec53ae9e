package forward

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/clock"
	"github.com/ringlimit/ringlimit/internal/peermsg"
)

// Reservations: a check with Reserve is decided by the key's
// owner, which records the reservation in its table before it spends (so
// that a replication round that carries the spend carries the record too)
// and drops it when the check is refused. Never from a lease: such a check
// always goes to the owner. A settle goes to the owner of the key its id
// names; the owner marks the record settled and adjusts the key's token
// bucket by the difference (bucket.Store.Settle), which marks the key
// changed: the record, settled, travels with the key's state to its
// successors (and with a handoff to a new owner), merged by id, settled
// winning. A check answered in its failure mode (degraded) carries no
// reservation; so does one whose owner's table is full: it is answered as
// a key its owner has no room for, in its failure mode.

// Settler sends a settle to a key's owner (peer.Pool).
type Settler interface {
	// Settle asks name to settle id at cost; with final, whatever its
	// ring says.
	Settle(ctx context.Context, name, id string, cost int64, final bool) (peermsg.SettleAnswer, error)
}

// Errors of Settle; callers map them to 404, 409 and 400.
var (
	ErrReservationNotFound = bucket.ErrReservationNotFound
	ErrAlreadySettled      = bucket.ErrAlreadySettled
)

// SettleResult is the answer to a settle.
type SettleResult struct {
	// Cost is what the reservation's spend now is.
	Cost int64
	// Remaining is what the key has left (0 while in debt), Limit its
	// limit's count.
	Remaining int64
	Limit     int64
	// Owner is the node that settled.
	Owner string
}

// MaxSettleCost bounds the cost of a settle: what the largest limit can
// hold in debt and spend.
const MaxSettleCost = 2 * bucket.MaxCount

// Settle settles the reservation id at cost on its key's owner: the spend
// of the reserving check becomes exactly cost. It returns an error
// wrapping ErrInvalid for a malformed id or a bad cost,
// ErrReservationNotFound, ErrAlreadySettled (nothing changed), or one
// wrapping ErrUnavailable when the owner cannot be reached (a settle is
// idempotent by id: retry it).
func (r *Router) Settle(ctx context.Context, id string, cost int64) (SettleResult, error) {
	key, err := bucket.ParseReservationID(id)
	if err != nil {
		return SettleResult{}, fmt.Errorf("%w: reservation: %w", ErrInvalid, err)
	}
	if cost < 0 || cost > MaxSettleCost {
		return SettleResult{}, fmt.Errorf("%w: cost: must be between 0 and %d, got %d", ErrInvalid, MaxSettleCost, cost)
	}
	v := r.entryView(ctx)
	owner := ownerIn(v.ring, r.cfg.Self, key)
	if v.noOwner() {
		return SettleResult{}, fmt.Errorf("%w: no owner for the key", ErrUnavailable)
	}
	final := false
	for hop := 0; ; hop++ {
		if owner == r.cfg.Self {
			a, err := r.settleLocal(ctx, v, key, id, cost, true)
			if err != nil {
				return SettleResult{}, err
			}
			return settleResult(a, cost)
		}
		if r.cfg.Settler == nil {
			return SettleResult{}, fmt.Errorf("%w: %s", ErrUnavailable, owner)
		}
		a, err := r.cfg.Settler.Settle(ctx, owner, id, cost, final)
		if err != nil {
			if ctx.Err() != nil {
				return SettleResult{}, ctx.Err()
			}
			return SettleResult{}, fmt.Errorf("%w: %s: %w", ErrUnavailable, owner, err)
		}
		if a.Status != peermsg.SettleRedirect || hop >= 1 {
			if a.Status == peermsg.SettleRedirect {
				return SettleResult{}, fmt.Errorf("%w: %s redirected again", ErrUnavailable, owner)
			}
			return settleResult(a, cost)
		}
		owner, final = a.Redirect, true
	}
}

func settleResult(a peermsg.SettleAnswer, cost int64) (SettleResult, error) {
	switch a.Status {
	case peermsg.SettleNotFound:
		return SettleResult{}, ErrReservationNotFound
	case peermsg.SettleAlreadySettled:
		return SettleResult{}, ErrAlreadySettled
	}
	return SettleResult{Cost: cost, Remaining: a.Remaining, Limit: a.Limit, Owner: a.Owner}, nil
}

// SettleFor implements peer.Settler: a settle another node sent. A
// receiver whose ring names another owner redirects it, unless final. Its
// error (wrapping ErrUnavailable) says the settle could not be applied
// now and changed nothing.
func (r *Router) SettleFor(ctx context.Context, from, id string, cost int64, final bool) (peermsg.SettleAnswer, error) {
	key, err := bucket.ParseReservationID(id)
	if err != nil || cost < 0 || cost > MaxSettleCost {
		return peermsg.SettleAnswer{Status: peermsg.SettleNotFound}, nil
	}
	v := r.awaitMember(ctx, from)
	if owner := ownerIn(v.ring, r.cfg.Self, key); owner != r.cfg.Self && !final {
		return peermsg.SettleAnswer{Status: peermsg.SettleRedirect, Redirect: owner}, nil
	}
	return r.settleLocal(ctx, v, key, id, cost, !final)
}

// settleLocal settles id on this node, the key's owner. Just after a ring
// change (the grace period) the record may not have come with the key's
// handoff yet: with ask, a record this node does not hold is settled by
// the key's previous owner, as the last hop, whose handoff then brings
// the settled record and the key's state here.
func (r *Router) settleLocal(ctx context.Context, v *view, key, id string, cost int64, ask bool) (peermsg.SettleAnswer, error) {
	now := r.cfg.Clock.Now()
	if _, held := r.resv.Get(id, now); !held && ask && r.cfg.Settler != nil && v.inGrace(now, r.cfg.Grace) {
		if prev := prevOwner(v, r.cfg.Self, key); prev != "" && !v.isDown(prev) {
			if a, err := r.cfg.Settler.Settle(ctx, prev, id, cost, true); err == nil && a.Status != peermsg.SettleRedirect {
				if a.Status == peermsg.SettleOK || a.Status == peermsg.SettleAlreadySettled {
					r.settledBy(key, id, cost, now)
				}
				return a, nil
			}
		}
	}
	if rec, ok := r.resv.Get(id, now); ok && rec.Settled {
		return peermsg.SettleAnswer{Status: peermsg.SettleAlreadySettled}, nil
	}
	// A key this node took over may hold no state yet: get it from where
	// it is, as a check does. (Its records came with its replicas, or come
	// with the previous owner's handoff.)
	if r.mustRecover(v, key, now) {
		if rec, ok := r.resv.Get(id, now); ok && !r.recover(ctx, v, key, &rec.Limit, now, true) {
			return peermsg.SettleAnswer{}, fmt.Errorf("%w: %s cannot settle now: the key's state has not come from its previous owner", ErrUnavailable, r.cfg.Self)
		}
	}
	rec, err := r.resv.Settle(id, cost, now)
	switch {
	case errors.Is(err, bucket.ErrAlreadySettled):
		return peermsg.SettleAnswer{Status: peermsg.SettleAlreadySettled}, nil
	case err != nil:
		return peermsg.SettleAnswer{Status: peermsg.SettleNotFound}, nil
	}
	d, err := r.cfg.Store.Settle(key, &rec.Limit, now, cost-rec.Reserved)
	if err != nil { // no room for the key: nothing changes, the settle may be retried
		r.resv.Unsettle(id)
		r.log.Warn("settle failed", "key", key, "err", err)
		return peermsg.SettleAnswer{}, fmt.Errorf("%w: %s cannot settle now: %w", ErrUnavailable, r.cfg.Self, err)
	}
	r.repl.dirty(key)
	if ownerIn(v.ring, r.cfg.Self, key) != r.cfg.Self {
		r.handoff.trigger() // the key's owner gets the settled record and the state
	}
	return peermsg.SettleAnswer{Status: peermsg.SettleOK, Remaining: d.Remaining, Limit: d.Limit, Owner: r.cfg.Self}, nil
}

// settledBy records here that the key's previous owner settled id: a
// push it made before, still on its way, carries the record unsettled,
// and would let it be settled a second time here. The record held is
// settled (a merge never unsettles one) for as long as such a push can
// come: two grace periods and peer deadlines. Its reserved amount is not
// known here; a settled record's is not used.
func (r *Router) settledBy(key, id string, cost int64, now clock.Instant) {
	r.resv.Merge([]bucket.Reservation{{ID: id, Key: key, Reserved: 1, Settled: true, SettledCost: cost,
		Expires: now.Add(2 * (r.cfg.Grace + r.cfg.PeerTimeout))}}, now)
}

// reserve records a reservation of c before its check spends; the caller
// removes it when the check is refused. It reports false when the table
// is full.
func (r *Router) reserve(c *Check, now clock.Instant) (string, bool) {
	id := bucket.NewReservationID(c.Key)
	err := r.resv.Add(bucket.Reservation{ID: id, Key: strings.Clone(c.Key), Limit: c.Limit, Reserved: c.Cost,
		Expires: now.Add(c.Reserve)}, now)
	return id, err == nil
}

// takeReserved spends c on this node's store (owner or stand-in) and, for
// a check with Reserve, records its reservation first: a refused check
// keeps none. A full table answers as a full store (ErrFull).
func (r *Router) takeReserved(c *Check, now clock.Instant) (d bucket.Decision, unsent int64, id string, err error) {
	if c.Reserve <= 0 {
		d, unsent, err = r.cfg.Store.TakeUnsent(c.Key, &c.Limit, now, c.Cost)
		return d, unsent, "", err
	}
	id, ok := r.reserve(c, now)
	if !ok {
		return d, 0, "", bucket.ErrFull
	}
	d, unsent, err = r.cfg.Store.TakeUnsent(c.Key, &c.Limit, now, c.Cost)
	if err != nil || !d.Allowed {
		r.resv.Remove(id)
		id = ""
	}
	return d, unsent, id, err
}

// appendRecords appends key's records, for a state read at now, to dst.
func (r *Router) appendRecords(dst []peermsg.Reservation, key string, now clock.Instant) []peermsg.Reservation {
	return appendRecords(r.resv, dst, key, now, false)
}

// appendRecords appends key's records to dst: all of them, or with
// changed only those added or settled since the last call with changed (a
// replication round: a key reserved often would otherwise carry every
// record it holds until their TTL in every round).
func appendRecords(t *bucket.Reservations, dst []peermsg.Reservation, key string, now clock.Instant, changed bool) []peermsg.Reservation {
	if t == nil || t.Empty() {
		return dst
	}
	var buf [4]bucket.Reservation
	recs := buf[:0]
	if changed {
		recs = t.AppendChanged(recs, key, now)
	} else {
		recs = t.AppendKey(recs, key, now)
	}
	for _, rec := range recs {
		dst = append(dst, peermsg.Reservation{ID: rec.ID, Reserved: rec.Reserved, TTL: rec.Expires.Sub(now),
			Settled: rec.Settled, SettledCost: rec.SettledCost})
	}
	return dst
}

// importState merges the records a state carries into this node's table.
func (r *Router) importState(_ string, s *peermsg.State, now clock.Instant) {
	importRecords(r.resv, s, now)
}

// importRecords merges the records a state from another node carries into
// t; a record that does not name the state's key, or whose values no sound
// peer sends, is left out.
func importRecords(t *bucket.Reservations, s *peermsg.State, now clock.Instant) {
	if t == nil || len(s.Reservations) == 0 {
		return
	}
	recs := make([]bucket.Reservation, 0, len(s.Reservations))
	for _, m := range s.Reservations {
		k, err := bucket.ParseReservationID(m.ID)
		if err != nil || k != s.Key || m.TTL <= 0 || m.TTL > bucket.MaxReserveTTL || m.Reserved < 1 || m.SettledCost < 0 {
			continue // hostile or broken: a record must name its key
		}
		recs = append(recs, bucket.Reservation{ID: strings.Clone(m.ID), Key: strings.Clone(s.Key), Limit: s.Limit,
			Reserved: m.Reserved, Expires: now.Add(m.TTL), Settled: m.Settled, SettledCost: m.SettledCost})
	}
	t.Merge(recs, now)
}

// dirtyKeys are keys whose records changed with no spend to mark them (a
// settle that gave everything back leaves the key full, which a
// replication round does not send): the next round sends them anyway.
type dirtyKeys struct {
	mu   sync.Mutex
	keys map[string]struct{}
}

func (d *dirtyKeys) add(key string) {
	d.mu.Lock()
	if d.keys == nil {
		d.keys = map[string]struct{}{}
	}
	d.keys[strings.Clone(key)] = struct{}{}
	d.mu.Unlock()
}

func (d *dirtyKeys) take() map[string]struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	k := d.keys
	d.keys = nil
	return k
}

// reserveTTL is a check's reservation TTL on the wire: 0 for none.
func reserveTTL(c *Check) time.Duration { return max(c.Reserve, 0) }
