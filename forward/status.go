package forward

import (
	"context"
	"slices"
	"time"
)

// Status is what a node reports about surviving crashes and partitions.
type Status struct {
	// ReplicationFactor is how many successors hold a copy of each key
	// this node owns (0: replication is off).
	ReplicationFactor int
	// ReplicationLag is how long the last replication round's oldest
	// change waited until its successors acknowledged it.
	ReplicationLag time.Duration
	// ReplicationPending is how many changed keys wait for the next round.
	ReplicationPending int64
	// Replicas is how many key states this node holds for other members.
	Replicas int
	// StandingIn is how many keys this node holds a copy of for an owner
	// that could not be reached, not yet handed back; Successor lists up
	// to 10 of them, with their owners.
	StandingIn int
	Successor  []StandIn
	// Minority is true while this node sees fewer than a majority of
	// ClusterSize members up.
	Minority    bool
	ClusterSize int
	// Down is the members that died and still count towards the quorum.
	Down []string
}

// StandIn is a key this node decides for its owner.
type StandIn struct {
	Key   string `json:"key"`
	Owner string `json:"owner"`
}

// Status reports the router's replication and quorum state.
func (r *Router) Status() Status {
	v := r.view.Load()
	st := Status{Replicas: r.shared.len(), Minority: v.minority, ClusterSize: v.size}
	if r.repl.on() {
		st.ReplicationFactor = r.cfg.Replication.Factor
		st.ReplicationLag = r.repl.lag()
		st.ReplicationPending = r.repl.pending()
	}
	for name := range v.down {
		st.Down = append(st.Down, name)
	}
	slices.Sort(st.Down)
	r.standing.Range(func(k, o any) bool {
		key, owner := k.(string), o.(string)
		if !r.cfg.Store.Has(key) || ownerIn(v.ring, r.cfg.Self, key) == r.cfg.Self {
			r.standing.Delete(k)
			return true
		}
		st.StandingIn++
		if len(st.Successor) < 10 {
			st.Successor = append(st.Successor, StandIn{Key: key, Owner: owner})
		}
		return true
	})
	slices.SortFunc(st.Successor, func(a, b StandIn) int {
		if a.Key < b.Key {
			return -1
		}
		if a.Key > b.Key {
			return 1
		}
		return 0
	})
	return st
}

// SyncReplicas sends every change not yet replicated now, and returns once
// the successors have acknowledged it (or ctx ends).
func (r *Router) SyncReplicas(ctx context.Context) { r.repl.flush(ctx) }

// RingMembers returns the names on this node's current ring.
func (r *Router) RingMembers() []string {
	if v := r.view.Load(); v.ring != nil {
		return v.ring.Members()
	}
	return nil
}

// Partitions returns the owner of each partition of this node's current
// ring and the ring's version; no owners when the ring does not say
// (ring.Ring.Partitions does) or there is none yet.
func (r *Router) Partitions() ([]string, uint64) {
	v := r.view.Load()
	if p, ok := v.ring.(interface{ Partitions() []string }); ok {
		return p.Partitions(), v.version()
	}
	return nil, v.version()
}

// PeerKeys asks every peer how many keys it holds and includes this node.
// Peers that do not answer are missing from the map.
func (r *Router) PeerKeys(ctx context.Context) map[string]int64 {
	out := r.cfg.Peers.Keys(ctx)
	out[r.cfg.Self] = int64(r.cfg.Store.Len())
	return out
}
