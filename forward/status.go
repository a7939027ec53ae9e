package forward

import (
	"context"
	"slices"

	"github.com/ringlimit/ringlimit/status"
)

// Status is what the router reports about surviving crashes and
// partitions.
type Status = status.Router

// StandIn is a key this node decides for its owner.
type StandIn = status.StandIn

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

// ClientRing is this node's ring as a client needs it to send each key
// straight to its owner (the public Ring call).
type ClientRing struct {
	Version uint64
	// Names are the members, sorted; Addrs[i] is Names[i]'s public API
	// address (Member.APIAddr, or its Addr).
	Names, Addrs []string
	// Owners[p] and Successors[p] are indexes in Names of partition p's
	// owner and of the member that would own it if the owner left.
	// Successors is nil with fewer than two members.
	Owners, Successors []int
}

// ClientRing returns this node's current ring for clients: the zero
// ClientRing (Version 0) before it has one.
func (r *Router) ClientRing() ClientRing {
	v := r.view.Load()
	if v.ring == nil {
		return ClientRing{}
	}
	cr := ClientRing{Version: v.version(), Names: v.ring.Members()}
	index := make(map[string]int, len(cr.Names))
	for i, n := range cr.Names {
		index[n] = i
		cr.Addrs = append(cr.Addrs, r.apiAddr(n))
	}
	cr.Owners = indexes(v.ring.Partitions(), index)
	if succ := v.ring.SuccessorTable(); succ != nil {
		cr.Successors = indexes(succ, index)
	}
	return cr
}

// indexes maps each name of names to its index; a name not in index (a
// table entry the ring could not fill) maps to -1.
func indexes(names []string, index map[string]int) []int {
	out := make([]int, len(names))
	for i, n := range names {
		j, ok := index[n]
		if !ok {
			j = -1
		}
		out[i] = j
	}
	return out
}

// Partitions returns the owner of each partition of this node's current
// ring and the ring's version; no owners when there is no ring yet.
func (r *Router) Partitions() ([]string, uint64) {
	v := r.view.Load()
	if v.ring == nil {
		return nil, v.version()
	}
	return v.ring.Partitions(), v.version()
}
