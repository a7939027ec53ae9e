package peer

import (
	"time"

	"github.com/ringlimit/ringlimit/bucket"
)

// Request is one check a node sends to the key's owner.
type Request struct {
	Key   string
	Limit bucket.Limit
	Cost  int64
	// Refund gives Cost back instead of spending it.
	Refund bool
	// Lease, when > 0, asks the owner for a lease of up to this many
	// tokens with the check (token bucket only).
	Lease int64
	// Final asks the receiver to decide on its store even where its ring
	// names another owner (the sender's last hop: a stand-in for an
	// unreachable owner, or a redirected check).
	Final bool
	// Sync asks the owner to answer an admitted check only once the key's
	// successors acknowledged its spend (replication: sync).
	Sync bool
}

// Answer is the owner's decision on one Request.
type Answer struct {
	Allowed    bool
	Remaining  int64
	RetryAfter time.Duration
	ResetAfter time.Duration
	Delay      time.Duration
	// LeaseGranted tokens are leased to the asking node for LeaseTTL.
	LeaseGranted int64
	LeaseTTL     time.Duration
	// Redirect is non-empty when the receiver did not decide because its
	// ring names another owner: ask that member; nothing was spent. The
	// other fields are then zero.
	Redirect string
	// Full is true when the key was new to the owner and its store had no
	// room for it: nothing was spent, and the sender decides the check in
	// its failure mode. The decision fields then refuse, with a retry of
	// one second, for a sender that does not know Full (fail_closed).
	Full bool
}

// Decision returns a as a bucket.Decision under a limit of count.
func (a *Answer) Decision(count int64) bucket.Decision {
	return bucket.Decision{Allowed: a.Allowed, Limit: count, Remaining: a.Remaining,
		RetryAfter: a.RetryAfter, ResetAfter: a.ResetAfter, Delay: a.Delay}
}

// SetDecision fills a's decision fields from d.
func (a *Answer) SetDecision(d *bucket.Decision) {
	a.Allowed, a.Remaining, a.RetryAfter, a.ResetAfter, a.Delay = d.Allowed, d.Remaining, d.RetryAfter, d.ResetAfter, d.Delay
}

// State is one key's bucket state as it moves between nodes: the cost spent
// under Limit at the time it was read.
type State struct {
	Key   string
	Limit bucket.Limit
	Used  int64
}

func (d *wireDecision) toAnswer() Answer {
	return Answer{Allowed: d.allowed, Remaining: d.remaining,
		RetryAfter:   time.Duration(d.retryAfterMs) * time.Millisecond,
		ResetAfter:   time.Duration(d.resetAfterMs) * time.Millisecond,
		Delay:        time.Duration(d.delayMs) * time.Millisecond,
		LeaseGranted: d.leaseGranted, LeaseTTL: time.Duration(d.leaseTTLMs) * time.Millisecond,
		Redirect: d.redirect, Full: d.full}
}

func (d *wireDecision) fromAnswer(a *Answer) {
	*d = wireDecision{allowed: a.Allowed, remaining: a.Remaining, retryAfterMs: a.RetryAfter.Milliseconds(),
		resetAfterMs: a.ResetAfter.Milliseconds(), delayMs: a.Delay.Milliseconds(),
		leaseGranted: a.LeaseGranted, leaseTTLMs: a.LeaseTTL.Milliseconds(), redirect: a.Redirect, full: a.Full}
}
