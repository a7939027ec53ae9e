package forward

import (
	"context"

	"github.com/ringlimit/ringlimit/bucket"
)

// tellJoined sends every tombstone this node holds to each member of
// joined (members that have just joined its ring), in the background, one
// Peer.Reset a tombstone, each within the peer deadline: a member that
// restarted on a state file written before a reset (or that missed it)
// learns it, drops the spend from before it and keeps the tombstone; a
// member that holds it already changes nothing (ResetFrom). A member that
// does not answer is logged and not told again until it joins again.
// Nothing is sent while this node holds no tombstone (r.tombs).
func (r *Router) tellJoined(joined []string) {
	if len(joined) == 0 || !r.tombs.Load() {
		return
	}
	r.wg.Go(func() {
		var tombs []bucket.Tomb
		r.cfg.Store.RangeTombstones(r.cfg.Clock.Now(), func(batch []bucket.Tomb) bool {
			tombs = append(tombs, batch...)
			return r.ctx.Err() == nil
		})
		for _, m := range joined {
			told := 0
			for i := range tombs {
				t := &tombs[i]
				ctx, cancel := context.WithTimeout(r.ctx, r.cfg.PeerTimeout)
				_, err := r.cfg.Peers.Reset(ctx, m, t.Key, &t.Limit, t.At)
				cancel()
				if err != nil {
					if r.ctx.Err() == nil {
						r.log.Warn("tombstones not told to a member that joined", "member", m, "told", told, "left", len(tombs)-told, "err", err)
					}
					break
				}
				told++
			}
		}
	})
}
