package peermsg

import (
	"time"

	"github.com/ringlimit/ringlimit/adaptive"
	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/clock"
)

// Adaptive limits on the peer API: a check of an adaptive layer carries
// its spec (Request.Adaptive) so that the key's owner can run the key's
// controller; the controller's state travels with the key's state
// (State.Adaptive) to its successors and with a handoff; a report goes to
// the owner (ReportRequest).

// AdaptiveState is an owner's controller of one key (adaptive.State) as it
// travels: its instants are ages on the sender's clock when it sent it,
// which the receiver puts back on its own clock (At).
type AdaptiveState struct {
	Limit, LongRTT, LongSum float64
	LongCount               int64
	// WindowAge is how long the open window had been open, SampleAge how
	// long ago the last sample arrived.
	WindowAge, SampleAge time.Duration
	Fallen               bool
	Samples, Errors      int64
	LatencySum           float64
	MaxInFlight          int64
}

// FromAdaptive is st, taken at now, as it travels.
func FromAdaptive(st adaptive.State, now clock.Instant) AdaptiveState {
	return AdaptiveState{Limit: st.Limit, LongRTT: st.LongRTT, LongSum: st.LongSum, LongCount: st.LongCount,
		WindowAge: max(now.Sub(st.WindowStart), 0), SampleAge: max(now.Sub(st.LastSample), 0), Fallen: st.Fallen,
		Samples: st.Samples, Errors: st.Errors, LatencySum: st.LatencySum, MaxInFlight: st.MaxInFlight}
}

// At is a as an adaptive.State on the receiver's clock at now. Negative
// ages (never from a sound peer) count as 0; adaptive.Resume clamps the
// rest.
func (a AdaptiveState) At(now clock.Instant) adaptive.State {
	return adaptive.State{Limit: a.Limit, LongRTT: a.LongRTT, LongSum: a.LongSum, LongCount: a.LongCount,
		WindowStart: now.Add(-max(a.WindowAge, 0)), LastSample: now.Add(-max(a.SampleAge, 0)), Fallen: a.Fallen,
		Samples: a.Samples, Errors: a.Errors, LatencySum: a.LatencySum, MaxInFlight: a.MaxInFlight}
}

// ReportRequest is a report of how one request ended, sent to the owner
// of its adaptive key.
type ReportRequest struct {
	Key   string
	Limit bucket.Limit
	Spec  adaptive.Spec
	// Scope is the policy layer's scope, for the owner's metrics.
	Scope   string
	Outcome adaptive.Outcome
	Latency time.Duration
	// Final asks the receiver to observe it whatever its ring says.
	Final bool
}

// ReportAnswer is the owner's answer to a report.
type ReportAnswer struct {
	// Redirect is set, alone, when the receiver's ring names another
	// owner: nothing was observed.
	Redirect string
	// Limit is the key's current limit after the report.
	Limit int64
	Owner string
}
