package forward

import (
	"context"
	"fmt"
	"time"

	"github.com/ringlimit/ringlimit/adaptive"
	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/internal/peermsg"
)

// Concurrency limits: at most N leases of a key held at once across the
// cluster. The key's owner alone decides, on its own clock, from its
// lease table (bucket.Leases); every acquire and renew it applies is
// acknowledged by the key's successor before it is answered (a
// replication round carries the key's absolute lease set), so a crash of
// the owner neither frees nor duplicates a slot: the successor, owner
// next, counts the set it holds. An acquire the successor does not
// acknowledge is undone and answered as for an unreachable owner, a renew
// is undone (ErrUnavailable). A release stands whatever the round does,
// so it is answered at once and its round started without waiting for it
// (until that round is acknowledged the replica keeps the lease, until
// its TTL if the owner dies: under-admission only). A lease id names its key,
// so any node routes a renew or release to the owner; a receiver whose
// ring names another owner redirects, as for a settle. Nothing is ever
// decided by a stand-in: an owner that cannot be reached answers an
// acquire in its failure mode (fail_open admits with no lease,
// fail_closed refuses) and a renew or release as ErrUnavailable.

// LeaseSender sends concurrency operations to a key's owner (peer.Pool).
type LeaseSender interface {
	// Acquire asks name for a lease; with q.Final, whatever its ring says.
	AcquireLease(ctx context.Context, name string, q peermsg.AcquireRequest) (peermsg.LeaseAnswer, error)
	// Renew asks name to renew the lease id for ttl.
	RenewLease(ctx context.Context, name, id string, ttl time.Duration, final bool) (peermsg.LeaseAnswer, error)
	// Release asks name to release the lease id, with its holder's
	// outcome and latency.
	ReleaseLease(ctx context.Context, name, id string, outcome uint8, latency time.Duration, final bool) (peermsg.LeaseAnswer, error)
}

// Outcome is how the work a lease covered ended, as its holder reports it.
type Outcome uint8

const (
	OutcomeOK Outcome = iota
	OutcomeError
	OutcomeDropped
)

// Acquire asks for one slot of a concurrency limit.
type Acquire struct {
	Key       string             // stored key (namespaced by the caller, as Check.Key)
	Limit     bucket.Limit       // a Concurrency limit
	Mode      bucket.FailureMode // FailOpen or FailClosed
	TTL       time.Duration      // already defaulted and capped by the caller; MinLeaseTTL..MaxLeaseTTL
	RequestID string             // "" none; at most bucket.MaxRequestIDLen
	// Adaptive, when not nil, is the layer's adaptive limit: the key's
	// owner grants up to its controller's current limit in place of
	// Limit's count (adaptive_lease.go), and releases feed the controller.
	// AdaptiveScope names the layer.
	Adaptive      *adaptive.Spec
	AdaptiveScope string
	// MaxTTL is the most a renew of the lease may ask (the layer's
	// max_lease_ttl): the owner keeps it with the lease and caps renewals
	// at it. 0 is bucket.MaxLeaseTTL; else MinLeaseTTL..MaxLeaseTTL.
	MaxTTL time.Duration
}

// LeaseResult is the answer to an acquire or renew.
type LeaseResult struct {
	Allowed    bool
	Lease      string // "" when refused or degraded
	InFlight   int64  // leases live on the key after this answer
	Limit      int64
	ExpiresIn  time.Duration
	RetryAfter time.Duration // refused: until the earliest lease expires (≥ 1ms); degraded refusal: 1s
	Owner      string
	OwnerAddr  string
	Degraded   bool
}

// ReleaseResult is the answer to a release.
type ReleaseResult struct {
	Released        bool
	InFlight, Limit int64
	Owner           string
}

// ErrLeaseNotFound is returned for a renew of a lease that expired, was
// released or never was.
var ErrLeaseNotFound = bucket.ErrLeaseNotFound

// validAcquire returns an error wrapping ErrInvalid for a bad acquire.
func (r *Router) validAcquire(a *Acquire) error {
	if err := r.cfg.Store.CheckKey(a.Key); err != nil {
		return fmt.Errorf("%w: key: %w", ErrInvalid, err)
	}
	if !a.Limit.Valid() || a.Limit.Algorithm() != bucket.Concurrency {
		return fmt.Errorf("%w: limit.algorithm: an acquire needs a concurrency limit, not %v", ErrInvalid, a.Limit.Algorithm())
	}
	if a.Mode != bucket.FailOpen && a.Mode != bucket.FailClosed {
		return fmt.Errorf("%w: limit.failure_mode: want fail_open or fail_closed, got %v", ErrInvalid, a.Mode)
	}
	if err := bucket.CheckLeaseTTL("ttl", a.TTL); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if a.MaxTTL != 0 {
		if err := bucket.CheckLeaseTTL("max_ttl", a.MaxTTL); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
	}
	if len(a.RequestID) > bucket.MaxRequestIDLen {
		return fmt.Errorf("%w: request_id: must be at most %d bytes, got %d", ErrInvalid, bucket.MaxRequestIDLen, len(a.RequestID))
	}
	if a.Adaptive != nil {
		if err := a.Adaptive.Validate(); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
	}
	return nil
}

// Acquire asks the key's owner for a lease of one slot. It returns an
// error wrapping ErrInvalid for bad input; an owner that cannot be
// reached (or cannot have its successor acknowledge the lease) is
// answered in a.Mode, Degraded.
func (r *Router) Acquire(ctx context.Context, a Acquire) (LeaseResult, error) {
	if err := r.validAcquire(&a); err != nil {
		r.m.leaseOp("acquire", "error")
		return LeaseResult{}, err
	}
	v := r.entryView(ctx)
	if v.noOwner() {
		return r.leaseDegraded(&a), nil
	}
	q := peermsg.AcquireRequest{Key: a.Key, Limit: a.Limit, TTL: a.TTL, RequestID: a.RequestID, Adaptive: a.Adaptive, AdaptiveScope: a.AdaptiveScope,
		MaxTTL: a.MaxTTL}
	ans, err := r.routeLease(ctx, v, a.Key, func(owner string, final bool) (peermsg.LeaseAnswer, error) {
		if owner == r.cfg.Self {
			return r.acquireLocal(ctx, v, &q), nil
		}
		q.Final = final
		return r.cfg.Leaser.AcquireLease(ctx, owner, q)
	})
	if err != nil || ans.Status == peermsg.LeaseUnavailable {
		if ctx.Err() != nil {
			return LeaseResult{}, ctx.Err()
		}
		r.log.Debug("acquire answered in its failure mode", "key", a.Key, "err", err)
		return r.leaseDegraded(&a), nil
	}
	res := r.leaseResult(&ans)
	switch ans.Status {
	case peermsg.LeaseOK:
		r.m.leaseOp("acquire", "granted")
	default:
		res.Allowed, res.Lease = false, ""
		r.m.leaseOp("acquire", "refused")
	}
	return res, nil
}

// Renew makes the lease id live for ttl from now on its key's owner, ttl
// capped at the lease's MaxTTL (the answer's ExpiresIn says for how long). It
// returns an error wrapping ErrInvalid for a malformed id or a ttl out of
// range, ErrLeaseNotFound once the lease expired or was released, or one
// wrapping ErrUnavailable when the owner cannot be reached or its
// successor did not acknowledge the renew (nothing changed: retry).
func (r *Router) Renew(ctx context.Context, id string, ttl time.Duration) (LeaseResult, error) {
	key, err := bucket.ParseLeaseID(id)
	if err != nil {
		return LeaseResult{}, fmt.Errorf("%w: lease: %w", ErrInvalid, err)
	}
	if err := bucket.CheckLeaseTTL("ttl", ttl); err != nil {
		return LeaseResult{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	v := r.entryView(ctx)
	ans, err := r.routeLease(ctx, v, key, func(owner string, final bool) (peermsg.LeaseAnswer, error) {
		if owner == r.cfg.Self {
			return r.renewLocal(ctx, v, id, ttl), nil
		}
		return r.cfg.Leaser.RenewLease(ctx, owner, id, ttl, final)
	})
	switch {
	case err != nil:
		r.m.leaseOp("renew", "unavailable")
		return LeaseResult{}, err
	case ans.Status == peermsg.LeaseNotFound:
		r.m.leaseOp("renew", "not_found")
		return LeaseResult{}, ErrLeaseNotFound
	case ans.Status != peermsg.LeaseOK:
		r.m.leaseOp("renew", "unavailable")
		return LeaseResult{}, fmt.Errorf("%w: %s could not renew the lease now", ErrUnavailable, ans.Owner)
	}
	r.m.leaseOp("renew", "ok")
	return r.leaseResult(&ans), nil
}

// Release gives the lease id back on its key's owner, telling it how the
// work ended. A second release, or one of an expired lease, answers
// Released false and changes nothing. It returns an error wrapping
// ErrInvalid for a malformed id, or ErrUnavailable when the owner cannot
// be reached (a release is idempotent: retry it).
func (r *Router) Release(ctx context.Context, id string, o Outcome, latency time.Duration) (ReleaseResult, error) {
	key, err := bucket.ParseLeaseID(id)
	if err != nil {
		return ReleaseResult{}, fmt.Errorf("%w: lease: %w", ErrInvalid, err)
	}
	if o > OutcomeDropped {
		return ReleaseResult{}, fmt.Errorf("%w: outcome: want ok, error or dropped, got %d", ErrInvalid, o)
	}
	latency = max(latency, 0)
	v := r.entryView(ctx)
	ans, err := r.routeLease(ctx, v, key, func(owner string, final bool) (peermsg.LeaseAnswer, error) {
		if owner == r.cfg.Self {
			return r.releaseLocal(ctx, v, key, id, o, latency), nil
		}
		return r.cfg.Leaser.ReleaseLease(ctx, owner, id, uint8(o), latency, final)
	})
	if err != nil || ans.Status == peermsg.LeaseUnavailable {
		r.m.leaseOp("release", "unavailable")
		if err == nil {
			err = fmt.Errorf("%w: %s could not release the lease now", ErrUnavailable, ans.Owner)
		}
		return ReleaseResult{}, err
	}
	released := ans.Status == peermsg.LeaseOK
	r.m.leaseOp("release", map[bool]string{true: "released", false: "unknown"}[released])
	return ReleaseResult{Released: released, InFlight: ans.InFlight, Limit: ans.Limit, Owner: ans.Owner}, nil
}

// routeLease runs op on the key's owner: this node, or another member
// through the LeaseSender, following one redirect. Its error wraps
// ErrUnavailable (or is the context's).
func (r *Router) routeLease(ctx context.Context, v *view, key string, op func(owner string, final bool) (peermsg.LeaseAnswer, error)) (peermsg.LeaseAnswer, error) {
	if v.noOwner() {
		return peermsg.LeaseAnswer{}, fmt.Errorf("%w: no owner for the key", ErrUnavailable)
	}
	owner := ownerIn(v.ring, r.cfg.Self, key)
	final := false
	for hop := 0; ; hop++ {
		if owner != r.cfg.Self && r.cfg.Leaser == nil {
			return peermsg.LeaseAnswer{}, fmt.Errorf("%w: %s", ErrUnavailable, owner)
		}
		ans, err := op(owner, final)
		if err != nil {
			if ctx.Err() != nil {
				return peermsg.LeaseAnswer{}, ctx.Err()
			}
			return peermsg.LeaseAnswer{}, fmt.Errorf("%w: %s: %w", ErrUnavailable, owner, err)
		}
		if ans.Status != peermsg.LeaseRedirect {
			if ans.Owner == "" {
				ans.Owner = owner
			}
			return ans, nil
		}
		if hop >= 1 || ans.Redirect == "" {
			return peermsg.LeaseAnswer{}, fmt.Errorf("%w: %s redirected again", ErrUnavailable, owner)
		}
		r.m.redirectsFollowed.Inc()
		owner, final = ans.Redirect, true
	}
}

// leaseResult turns an owner's answer into a LeaseResult.
func (r *Router) leaseResult(a *peermsg.LeaseAnswer) LeaseResult {
	return LeaseResult{Allowed: a.Status == peermsg.LeaseOK, Lease: a.Lease, InFlight: a.InFlight, Limit: a.Limit,
		ExpiresIn: a.ExpiresIn, RetryAfter: a.RetryAfter, Owner: a.Owner, OwnerAddr: r.apiAddr(a.Owner)}
}

// leaseDegraded answers an acquire whose owner could not grant or refuse
// it, in its failure mode: fail_open admits with no lease, fail_closed
// refuses for a second.
func (r *Router) leaseDegraded(a *Acquire) LeaseResult {
	r.m.degraded[a.Mode%3].Inc()
	r.m.leaseOp("acquire", "degraded")
	res := LeaseResult{Limit: a.Limit.Count(), Owner: r.cfg.Self, OwnerAddr: r.cfg.SelfAddr, Degraded: true}
	if a.Mode == bucket.FailOpen {
		res.Allowed = true
	} else {
		res.RetryAfter = time.Second
	}
	return res
}
