package forward

import (
	"context"

	"github.com/ringlimit/ringlimit/bucket"
)

// A member may hold a key's spend from before a reset it never recorded:
// it restarted on a state file written before the reset, or missed the
// reset's message. Two paths tell it the reset (Peer.Reset with the
// reset's instant; ResetFrom changes nothing for a reset it holds
// already): every node sends every tombstone it holds to each member that
// joins its ring (tellJoined), and a node that refuses a replica or a
// handoff as older than its tombstone tells the sender that tombstone
// (admitAll, Merge). Until then the member decides from the spend it
// holds: it may refuse what the reset would have admitted, never admit
// more than before the reset.

// tellJoined sends every tombstone this node holds to each member of
// joined (members that have just joined its ring), in the background.
// Nothing is sent while this node holds no tombstone (r.tombs).
func (r *Router) tellJoined(joined []string) {
	if len(joined) == 0 || !r.tombs.Load() || r.ctx.Err() != nil {
		return
	}
	r.wg.Go(func() {
		var tombs []bucket.Tomb
		r.cfg.Store.RangeTombstones(r.cfg.Clock.Now(), func(batch []bucket.Tomb) bool {
			tombs = append(tombs, batch...)
			return r.ctx.Err() == nil
		})
		r.sendTombs(joined, tombs)
	})
}

// tell sends tombs to each member of to in the background (sendTombs).
func (r *Router) tell(to []string, tombs []bucket.Tomb) {
	if len(tombs) == 0 || r.ctx.Err() != nil {
		return
	}
	r.wg.Go(func() { r.sendTombs(to, tombs) })
}

// sendTombs sends tombs to each member of to ("" and this node skipped),
// one Peer.Reset a tombstone, each within the peer deadline. A member
// that does not answer is logged and not sent the rest.
func (r *Router) sendTombs(to []string, tombs []bucket.Tomb) {
	for _, m := range to {
		if m == "" || m == r.cfg.Self {
			continue
		}
		for i := range tombs {
			t := &tombs[i]
			ctx, cancel := context.WithTimeout(r.ctx, r.cfg.PeerTimeout)
			_, err := r.cfg.Peers.Reset(ctx, m, t.Key, &t.Limit, t.At)
			cancel()
			if err != nil {
				if r.ctx.Err() == nil {
					r.log.Warn("tombstones not told", "member", m, "told", i, "left", len(tombs)-i, "err", err)
				}
				break
			}
		}
	}
}
