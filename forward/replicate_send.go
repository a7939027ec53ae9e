package forward

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/internal/peermsg"
)

// What a replication round carries and how it goes: the outbox of copies
// by successor, filled from the store's changed keys and the keys whose
// reservation records changed, and sent to each successor.

// outbox is a round's copies, by successor, each with the tokens it
// carries that no acknowledged round did.
type outbox struct {
	states  map[string][]peermsg.State
	unacked map[string][]int64
	orphans []bucket.Snapshot // spent keys of this node's with no live successor
	alone   bool              // on a ring of one: no copies at all
	all     bool              // every reservation record of each key, not the changed ones
	// leaseOrphans is true when a key's lease set has no live successor.
	leaseOrphans bool
}

func newOutbox() *outbox {
	return &outbox{states: map[string][]peermsg.State{}, unacked: map[string][]int64{}}
}

// maxReusedStates bounds the copies to one successor whose slices a
// reused outbox keeps for the next round (a resync's are not kept at all).
const maxReusedStates = 4096

// reusedOutbox returns flush's outbox, empty, with the slices of the last
// round: a round allocates nothing for its copies once they fit. Under mu.
func (p *replicator) reusedOutbox() *outbox {
	if p.box == nil {
		p.box = newOutbox()
	}
	return p.box
}

// recycle empties o for the next round. It keeps the slices of the
// successors that got copies in this one, cleared (no key outlives its
// round), up to maxReusedStates each, and forgets the others.
func (o *outbox) recycle() {
	for succ, states := range o.states {
		clear(states)
		if len(states) == 0 || cap(states) > maxReusedStates {
			delete(o.states, succ)
			delete(o.unacked, succ)
			continue
		}
		o.states[succ], o.unacked[succ] = states[:0], o.unacked[succ][:0]
	}
	clear(o.orphans)
	o.orphans, o.alone, o.all, o.leaseOrphans = o.orphans[:0], false, false, false
}

// empty reports whether o carries no copy.
func (o *outbox) empty() bool {
	for _, states := range o.states {
		if len(states) > 0 {
			return false
		}
	}
	return true
}

// whole reports whether every spent key has a copy to send.
func (o *outbox) whole() bool { return !o.alone && len(o.orphans) == 0 && !o.leaseOrphans }

// add appends the states of the keys this node owns to out, by successor.
func (p *replicator) add(v *view, out *outbox, batch []bucket.Snapshot) {
	if v.ring == nil || v.ring.Len() < 2 {
		for i := range batch {
			out.alone = out.alone || batch[i].Used > 0
		}
		return
	}
	var buf [4]string
	now := p.clock.Now()
	for i := range batch {
		s := &batch[i]
		if s.Used == 0 || ownerIn(v.ring, p.self, s.Key) != p.self {
			continue // full (so is the replica), or not ours: a copy the handoff moves
		}
		// A round carries what changed; a resync (sendOwned) everything.
		recs := appendRecords(p.resv, nil, s.Key, now, !out.all)
		copies := 0
		for _, succ := range v.ring.AppendSuccessors(buf[:0], s.Key, p.cfg.Factor) {
			if succ != p.self && !v.isDown(succ) {
				out.states[succ] = append(out.states[succ], peermsg.State{Key: s.Key, Limit: s.Limit, Used: s.Used,
					Reservations: recs, ResetAt: s.ResetAt, Window: s.Window})
				out.unacked[succ] = append(out.unacked[succ], s.Unacked)
				copies++
			}
		}
		if copies == 0 {
			out.orphans = append(out.orphans, bucket.Snapshot{Key: strings.Clone(s.Key), Unacked: s.Unacked})
			p.resend(recs)
		}
	}
}

// send replicates out, one goroutine per successor, and reports whether
// every successor acknowledged every state.
func (p *replicator) send(ctx context.Context, out *outbox) bool {
	var wg sync.WaitGroup
	var failed atomic.Bool
	for succ, states := range out.states {
		if len(states) == 0 {
			continue // a reused outbox's successor with nothing this round
		}
		wg.Go(func() {
			if !p.sendTo(ctx, succ, states, out.unacked[succ]) {
				failed.Store(true)
			}
		})
	}
	wg.Wait()
	return !failed.Load()
}

// sendTo replicates states to succ in chunks and reports whether succ
// acknowledged them all; on failure it marks them again, giving back the
// tokens each carried (unacked, by state), so that the next round retries
// them, unless this node is stopping.
func (p *replicator) sendTo(ctx context.Context, succ string, states []peermsg.State, unacked []int64) bool {
	for off := 0; off < len(states); off += replicateChunk {
		chunk := states[off:min(off+replicateChunk, len(states))]
		if _, err := p.peers.Replicate(ctx, succ, chunk); err == nil {
			continue
		} else {
			p.m.replicationErrors.Inc()
			p.log.Debug("replication failed", "to", succ, "keys", len(chunk), "err", err)
		}
		if ctx.Err() != nil {
			return false
		}
		p.leaseLost(states[off:])
		now := p.clock.Now()
		var lost []string
		for i := off; i < len(states); i++ {
			p.store.Mark(states[i].Key, now, unacked[i])
			for _, rec := range states[i].Reservations {
				lost = append(lost, rec.ID)
			}
		}
		if len(lost) > 0 {
			p.resv.Resend(lost)
		}
		return false
	}
	return true
}

// dirty marks key's records changed (a settle): the next round sends the
// key's state and records even when the key is full.
func (p *replicator) dirty(key string) {
	if !p.cfg.Off {
		p.dirtyKeys.add(key)
	}
}

// addDirty appends to out the state and records of the keys marked dirty
// that this node owns; a copy sent twice in one round does no harm.
func (p *replicator) addDirty(v *view, out *outbox) {
	keys := p.dirtyKeys.take()
	if len(keys) == 0 || v.ring == nil || v.ring.Len() < 2 {
		return
	}
	now := p.clock.Now()
	var buf [4]string
	for key := range keys {
		if ownerIn(v.ring, p.self, key) != p.self {
			continue
		}
		recs := appendRecords(p.resv, nil, key, now, true)
		if len(recs) == 0 {
			continue // a round of the key's spend carried them already
		}
		rec, _ := p.resv.Get(recs[0].ID, now)
		st := peermsg.State{Key: key, Limit: rec.Limit, Reservations: recs}
		if l, used, ok := p.store.Used(key, now); ok && l == rec.Limit {
			st.Used = used
		}
		copies := 0
		for _, succ := range v.ring.AppendSuccessors(buf[:0], key, p.cfg.Factor) {
			if succ != p.self && !v.isDown(succ) {
				out.states[succ] = append(out.states[succ], st)
				out.unacked[succ] = append(out.unacked[succ], 0)
				copies++
			}
		}
		if copies == 0 {
			p.resend(recs)
		}
	}
}

// resend puts records a round took but did not send back for the next.
func (p *replicator) resend(recs []peermsg.Reservation) {
	if len(recs) == 0 {
		return
	}
	ids := make([]string, len(recs))
	for i := range recs {
		ids[i] = recs[i].ID
	}
	p.resv.Resend(ids)
}
