package peer

import (
	"strings"
	"time"

	"github.com/ringlimit/ringlimit/internal/peermsg"
)

// The messages a node exchanges with a key's owner; package peermsg holds
// them so that forward, which sends them, need not import peer.
type (
	// Request is one check a node sends to the key's owner.
	Request = peermsg.Request
	// Answer is the owner's decision on one Request.
	Answer = peermsg.Answer
	// State is one key's bucket state as it moves between nodes.
	State = peermsg.State
	// ResetAnswer is a member's answer to a reset.
	ResetAnswer = peermsg.ResetAnswer
)

func (d *wireDecision) toAnswer() Answer {
	return Answer{Allowed: d.allowed, Remaining: d.remaining,
		RetryAfter:   time.Duration(d.retryAfterMs) * time.Millisecond,
		ResetAfter:   time.Duration(d.resetAfterMs) * time.Millisecond,
		Delay:        time.Duration(d.delayMs) * time.Millisecond,
		LeaseGranted: d.leaseGranted, LeaseTTL: time.Duration(d.leaseTTLMs) * time.Millisecond,
		Redirect: d.redirect, Full: d.full, Reservation: d.reservation, Limit: d.limit}
}

// detach gives d's strings memory of their own. The reader of the Check
// stream parses a decision's strings in place, pointing into the answer's
// buffer, which the next answer on the stream overwrites: a decision
// handed to its caller must not keep them.
func (d *wireDecision) detach() {
	if d.redirect != "" {
		d.redirect = strings.Clone(d.redirect)
	}
	if d.reservation != "" {
		d.reservation = strings.Clone(d.reservation)
	}
}

func (d *wireDecision) fromAnswer(a *Answer) {
	*d = wireDecision{allowed: a.Allowed, remaining: a.Remaining, retryAfterMs: a.RetryAfter.Milliseconds(),
		resetAfterMs: a.ResetAfter.Milliseconds(), delayMs: a.Delay.Milliseconds(),
		leaseGranted: a.LeaseGranted, leaseTTLMs: a.LeaseTTL.Milliseconds(), redirect: a.Redirect, full: a.Full,
		reservation: a.Reservation, limit: a.Limit}
}
