package decide

import (
	"sync/atomic"

	"github.com/ringlimit/ringlimit/forward"
)

// Activity counts the checks the Decider decided since it started, on every
// surface (HTTP, gRPC, RLS, forward-auth): each layer of a policy request
// is one check; a layer not decided because another was shed (Skipped)
// and refunds are not counted. Peeks are counted apart, not as checks.
type Activity struct {
	// Checks decided; Refused of them were not admitted.
	Checks, Refused uint64
	// Forwarded were decided by another node, the key's owner (or its
	// successor); Degraded were answered by their failure mode.
	Forwarded, Degraded uint64
	// Peeks are the peeks decided (each layer one), which spend nothing;
	// Reservations the checks that were admitted with a reservation;
	// Settles the reservations settled (not those already settled or not
	// found). Resets are counted by the API that asks for them.
	Peeks, Reservations, Settles, Resets uint64
}

// activity holds the counts of Activity. Its counters are atomic: every
// request adds to them.
type activity struct {
	checks, refused, forwarded, degraded atomic.Uint64
	peeks, reservations, settles         atomic.Uint64
}

// note counts one batch of checks and their results; self is this node's
// name.
func (c *activity) note(self string, in []forward.Check, out []forward.Result) {
	var checks, refused, forwarded, degraded, peeks, reservations uint64
	for i := range out {
		r := &out[i]
		if r.Skipped {
			continue
		}
		if in[i].Peek {
			peeks++
			continue
		}
		if r.Reservation != "" {
			reservations++
		}
		checks++
		if !r.Allowed {
			refused++
		}
		if r.Degraded {
			degraded++
		}
		if self != "" && r.Owner != "" && r.Owner != self {
			forwarded++
		}
	}
	c.checks.Add(checks)
	if refused > 0 {
		c.refused.Add(refused)
	}
	if forwarded > 0 {
		c.forwarded.Add(forwarded)
	}
	if degraded > 0 {
		c.degraded.Add(degraded)
	}
	if peeks > 0 {
		c.peeks.Add(peeks)
	}
	if reservations > 0 {
		c.reservations.Add(reservations)
	}
}

// Activity returns the checks decided since the Decider started.
func (d *Decider) Activity() Activity {
	return Activity{Checks: d.act.checks.Load(), Refused: d.act.refused.Load(),
		Forwarded: d.act.forwarded.Load(), Degraded: d.act.degraded.Load(),
		Peeks: d.act.peeks.Load(), Reservations: d.act.reservations.Load(), Settles: d.act.settles.Load()}
}
