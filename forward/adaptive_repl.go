package forward

import "github.com/ringlimit/ringlimit/bucket"

// addAdaptive appends to out the controllers of the keys this node owns
// that changed since the last round (all of them with all), each with the
// key's state (a concurrency key's: its lease set), by successor: the successor keeps the controller's state to
// resume from if it becomes the owner. A copy sent twice in one round (the
// key's spend went too) does no harm.
func (p *replicator) addAdaptive(v *view, out *outbox, all bool) {
	if p.adapt == nil {
		return
	}
	now := p.clock.Now()
	states := p.adapt.takeDirty(now, all)
	if len(states) == 0 || v.ring == nil || v.ring.Len() < 2 {
		return
	}
	var buf [4]string
	for i := range states {
		st := states[i]
		if ownerIn(v.ring, p.self, st.Key) != p.self {
			continue
		}
		switch {
		case st.Limit.Algorithm() == bucket.Concurrency && p.slots != nil:
			// A concurrency key's state is its lease set (the store holds
			// none of it): the set as it is now, with the controller.
			ad := st.Adaptive
			st = leaseState(p.slots, st.Key, st.Limit, now)
			st.Adaptive = ad
		default:
			if l, used, ok := p.store.Used(st.Key, now); ok {
				st.Limit, st.Used = l, used
			}
		}
		for _, succ := range v.ring.AppendSuccessors(buf[:0], st.Key, p.cfg.Factor) {
			if succ != p.self && !v.isDown(succ) {
				out.states[succ] = append(out.states[succ], st)
				out.unacked[succ] = append(out.unacked[succ], 0)
			}
		}
	}
}
