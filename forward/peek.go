package forward

import (
	"github.com/ringlimit/ringlimit/clock"
)

// peekFor answers a peek of a key owner owns on this node's ring, decided
// here as owner's stand-in or as the last hop of a redirect: from this
// node's copy of the key when it holds one, else from its replica of
// owner's state, else as a full key. Nothing is adopted, spent or pushed.
func (r *Router) peekFor(owner string, c *Check, now clock.Instant) Result {
	st := r.cfg.Store
	if !st.Has(c.Key) {
		if rs := r.shared.store(owner, false); rs != nil && rs.Has(c.Key) {
			st = rs
		}
	}
	d, err := st.Peek(c.Key, &c.Limit, now, c.Cost)
	if err != nil {
		r.log.Error("stand-in peek failed", "key", c.Key, "err", err)
	}
	return Result{Decision: d, Owner: r.cfg.Self, OwnerAddr: r.cfg.SelfAddr}
}
