package forward

import (
	"slices"
	"strings"
	"sync"

	"github.com/ringlimit/ringlimit/clock"
)

// A node cut off from a majority keeps its ring and goes on deciding the
// keys it owns on its copies; the majority's ring gives those keys to the
// others meanwhile, which decide them too. When it has a majority again, its ring may be the
// one it had before the cut, or, when it hears from only some of the
// others, a new one that still gives it the keys it owned before: either
// way, what it holds of a key it owns lacks what the member that decided
// the key during the cut spent or granted. That member pushes it once its
// own ring gives the key back, but nothing orders the push before this
// node's first check. So, for the grace period after the return, a key
// this node owns is fetched from that member before it is decided, once,
// and a concurrency key waits for that member's lease set (leasePrevOwner).

// rejoin is when a node back from a minority found a majority again, and
// where its keys were decided meanwhile.
type rejoin struct {
	at clock.Instant
	// all is the ring of every other member, those this node still sees
	// as down included: the majority's ring during the cut, as well as
	// this node can tell. up is the ring of the others it sees up, among
	// which a down member's keys went to the one holding its replicas.
	all, up Owners
	// sure is each key whose state the member that decided it during the
	// cut has given (or that was decided on this node's copy once that
	// member could not be asked).
	sure sync.Map
}

// noteRejoin records a return from a minority (the router's mu held,
// before nv is stored), and forgets the keys pushed during the cut once
// it has taken them, or as the next cut begins.
func (r *Router) noteRejoin(old, nv *view, up []string) {
	switch {
	case !old.minority && nv.minority:
		// A cut begins: what was pushed during an earlier one is not its.
		r.pushedInMinority.Clear()
		return
	case !old.minority || nv.minority:
		return
	}
	// What was pushed during this cut is this return's, or nobody's.
	defer r.pushedInMinority.Clear()
	if nv.ring == nil || old.ring == nil {
		return
	}
	var all, rest []string
	for _, m := range r.members {
		if m.Name == r.cfg.Self || slices.Contains(all, m.Name) {
			continue
		}
		all = append(all, m.Name)
		if slices.Contains(up, m.Name) {
			rest = append(rest, m.Name)
		}
	}
	if len(rest) == 0 {
		return
	}
	upRing, err := r.cfg.NewRing(rest)
	if err != nil {
		return
	}
	allRing, err := r.cfg.NewRing(all)
	if err != nil {
		return
	}
	rj := &rejoin{at: r.cfg.Clock.Now(), all: allRing, up: upRing}
	r.pushedInMinority.Range(func(key, _ any) bool {
		rj.sure.Store(key, true)
		return true
	})
	r.rejoined.Store(rj)
}

// liveRejoin is the last return from a minority while its grace period
// lasts, else nil.
func (r *Router) liveRejoin(now clock.Instant) *rejoin {
	rj := r.rejoined.Load()
	if rj == nil {
		return nil
	}
	if now.Sub(rj.at) >= r.cfg.Grace {
		r.rejoined.CompareAndSwap(rj, nil) // its keys are not kept
		return nil
	}
	return rj
}

// prev is the member that decided key while this node was cut off: its
// owner on the ring of every other member, or, when this node still sees
// that one as down, on the ring of those it sees up (which took over its
// keys from their replicas).
func (rj *rejoin) prev(v *view, self, key string) string {
	if p := ownerIn(rj.all, self, key); !v.isDown(p) {
		return p
	}
	return ownerIn(rj.up, self, key)
}

// gave reports whether the return from the minority, not a ring change,
// is what gave this node a key whose previous owner on the ring's last
// change is ringPrev ("" this node or nobody; inGrace: that change's
// grace period lasts). A ring change after the return that moved the key
// here from another member is the later event, and wins; one that left
// the key here does not end what the return waits for.
func (rj *rejoin) gave(v *view, ringPrev string, inGrace bool) bool {
	return ringPrev == "" || !inGrace || rj.at >= v.changed
}

// unsure reports whether key's state from the member that decided it
// during the cut has yet to come.
func (rj *rejoin) unsure(key string) bool {
	_, ok := rj.sure.Load(key)
	return !ok
}

func (rj *rejoin) markSure(key string) {
	if rj.unsure(key) {
		rj.sure.Store(strings.Clone(key), true)
	}
}
