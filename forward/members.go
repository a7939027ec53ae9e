package forward

import (
	"cmp"
	"maps"
	"slices"
)

// SetMembers replaces the ring with one over members (this node included
// unless it is leaving), tells Peers their addresses, and starts handing
// off the keys this node no longer owns. A member list that cannot form a
// ring is logged and ignored.
func (r *Router) SetMembers(members []Member) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	r.members = slices.Clone(members)
	r.rebuildLocked()
}

func (r *Router) rebuildLocked() {
	old := r.view.Load()
	self := r.cfg.Self
	var up []string
	down := map[string]bool{}
	addrs := make(map[string]string, len(r.members))
	apiAddrs := make(map[string]string, len(r.members))
	for _, m := range r.members {
		apiAddrs[m.Name] = cmp.Or(m.APIAddr, m.Addr)
		switch {
		case m.Down && m.Name != self:
			down[m.Name] = true
		case m.Down, r.leaving && m.Name == self:
		default:
			up = append(up, m.Name)
			if m.Name != self {
				addrs[m.Name] = m.Addr
			}
		}
	}
	size := r.cfg.ClusterSize
	if size == 0 {
		size = len(up) + len(down)
	}
	// A leaving node hands everything to the others, whatever it sees.
	minority := !r.leaving && len(up) < majority(size)
	rg := old.ring
	if !minority {
		var err error
		if rg, err = r.cfg.NewRing(up); err != nil {
			r.log.Error("ring not rebuilt", "members", up, "err", err)
			return
		}
	}
	var version uint64
	if rg != nil {
		version = rg.Version()
	}
	r.cfg.Peers.SetMembers(version, addrs)
	r.apiAddrs.Store(&apiAddrs)
	ringChanged := old.ring == nil || rg == nil || version != old.ring.Version()
	if !ringChanged && minority == old.minority && size == old.size && maps.Equal(down, old.down) {
		return
	}
	if rg != nil {
		// What this node shared with a member that joins was shared with
		// an earlier process of that name, which took it along.
		var joined []string
		for _, name := range rg.Members() {
			if name != self && !old.has(name) {
				r.shared.forgetJoined(name, r.cfg.Clock.Now())
				joined = append(joined, name)
			}
		}
		r.tellJoined(joined)
	}
	nv := &view{ring: rg, prev: old.prev, others: old.others, changed: old.changed, fetches: old.fetches,
		down: down, size: size, minority: minority}
	if ringChanged && rg != nil {
		nv.prev, nv.others, nv.changed, nv.fetches = old.ring, nil, r.cfg.Clock.Now(), &fetchMarks{}
		if old.len() <= 1 && rg.Has(self) && rg.Len() > 1 { // this node was alone: it has just joined
			rest := slices.DeleteFunc(slices.Clone(up), func(n string) bool { return n == self })
			if others, err := r.cfg.NewRing(rest); err == nil {
				nv.others = others
			}
		}
	}
	r.noteRejoin(old, nv, up)
	r.view.Store(nv)
	next := make(chan struct{})
	close(*r.viewChanged.Swap(&next))
	if minority != old.minority {
		r.log.Warn("quorum changed", "minority", minority, "up", len(up), "size", size)
	}
	if !ringChanged || rg == nil {
		return
	}
	r.m.ringMembers.Set(float64(rg.Len()))
	r.m.ringChanges.Inc()
	r.log.Info("ring changed", "members", up, "version", version)
	for name := range down {
		if !old.down[name] {
			r.wg.Go(func() { r.promote(nv, name) })
		}
	}
	r.handoff.mayHoldForeign()
	r.handoff.trigger()
	r.repl.ringChanged()
}
