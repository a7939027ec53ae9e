package peermsg

import (
	"time"

	"github.com/ringlimit/ringlimit/adaptive"
	"github.com/ringlimit/ringlimit/bucket"
)

// Lease is one concurrency lease as it moves with its key's state
// (State.Leases).
type Lease struct {
	ID        string
	RequestID string
	// TTL is how long it lives, from when the state was read.
	TTL time.Duration
	// MaxTTL is the most a renew of it may ask (0: bucket.MaxLeaseTTL).
	MaxTTL time.Duration
}

// AcquireRequest asks a key's owner for a concurrency lease.
type AcquireRequest struct {
	Key       string
	Limit     bucket.Limit
	TTL       time.Duration
	RequestID string
	// Final asks the receiver to decide whatever its ring says (a
	// redirected acquire's last hop).
	Final bool
	// Adaptive, when not nil, is the layer's adaptive limit: the owner
	// grants up to its controller's current limit in place of Limit's
	// count. AdaptiveScope names the layer.
	Adaptive      *adaptive.Spec
	AdaptiveScope string
	// MaxTTL is the most a renew of the lease may ask, its layer's
	// max_lease_ttl (0: bucket.MaxLeaseTTL).
	MaxTTL time.Duration
}

// LeaseStatus is how a key's owner answered an acquire, renew or release.
type LeaseStatus uint8

const (
	// LeaseOK: granted, renewed or released now.
	LeaseOK LeaseStatus = iota
	// LeaseRefused: an acquire found the key's slots all held.
	LeaseRefused
	// LeaseNotFound: no such live lease (renew, release).
	LeaseNotFound
	// LeaseRedirect: the receiver's ring names another owner (Redirect);
	// nothing changed.
	LeaseRedirect
	// LeaseUnavailable: the owner could not have its successor acknowledge
	// the change, or has no room: an acquire or renew was undone.
	LeaseUnavailable
)

// LeaseAnswer is the owner's answer to an acquire, renew or release.
type LeaseAnswer struct {
	Status     LeaseStatus
	Lease      string
	InFlight   int64
	Limit      int64
	ExpiresIn  time.Duration
	RetryAfter time.Duration
	Owner      string
	Redirect   string
}
