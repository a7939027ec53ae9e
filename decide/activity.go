package decide

import (
	"sync/atomic"

	"github.com/ringlimit/ringlimit/forward"
)

// Activity counts the checks the Decider decided since it started, on every
// surface (HTTP, gRPC, RLS, forward-auth): each layer of a policy request
// is one check; a layer not decided because another was shed (Skipped)
// and refunds are not counted.
type Activity struct {
	// Checks decided; Refused of them were not admitted.
	Checks, Refused uint64
	// Forwarded were decided by another node, the key's owner (or its
	// successor); Degraded were answered by their failure mode.
	Forwarded, Degraded uint64
}

// activity holds the counts of Activity. Its counters are atomic: every
// request adds to them.
type activity struct {
	checks, refused, forwarded, degraded atomic.Uint64
}

// note counts one batch of results; self is this node's name.
func (c *activity) note(self string, out []forward.Result) {
	var checks, refused, forwarded, degraded uint64
	for i := range out {
		r := &out[i]
		if r.Skipped {
			continue
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
}

// Activity returns the checks decided since the Decider started.
func (d *Decider) Activity() Activity {
	return Activity{Checks: d.act.checks.Load(), Refused: d.act.refused.Load(),
		Forwarded: d.act.forwarded.Load(), Degraded: d.act.degraded.Load()}
}
