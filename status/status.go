package status

import (
	"slices"
	"strings"
	"time"
)

// Stats is what a node reports of itself to the other nodes (the peer
// Stats RPC), for the cluster's status page. The counts are cumulative
// since the node started; a reader computes rates from two samples, and
// takes a count smaller than the last one for a restart.
type Stats struct {
	Name        string
	Keys        int64
	RingVersion uint64
	// Checks are the checks the node's API decided (each layer of a
	// policy request is one); Refused, Forwarded and Degraded count those
	// it refused, sent to another owner, and answered in their failure
	// mode.
	Checks, Refused, Forwarded, Degraded uint64
	// PeerChecks are the checks other nodes sent it and it decided.
	PeerChecks uint64
	// Peeks (not counted in Checks), Reservations (checks admitted with a
	// reservation), Settles (reservations settled) and Resets (keys put
	// back to full) are the other operations its API made.
	Peeks, Reservations, Settles, Resets uint64
	// ReplicationLag is how long the last replication round's oldest
	// change waited until acknowledged; ReplicationPending how many
	// changes wait for the next round.
	ReplicationLag     time.Duration
	ReplicationPending int64
	// PolicyVersion and RLSVersion name the policy file and the RLS
	// configuration in force; empty without one.
	PolicyVersion, RLSVersion string
	// Uptime is how long the node has run; Version is the build it runs.
	Uptime  time.Duration
	Version string
	// Adaptive are the adaptive scopes of the keys the node owns, each
	// with the current limit of its most recently moved key, by scope.
	Adaptive []AdaptiveScope
}

// AdaptiveScope is one adaptive scope (a policy layer's) of the keys a
// node owns: the current limit of its most recently moved key.
type AdaptiveScope struct {
	Scope string `json:"scope"`
	Limit int64  `json:"limit"`
}

// NodeStats returns st as the status page shows it: uptime in seconds and
// the lag in milliseconds, both from whole milliseconds and microseconds
// as the peer protocol carries them.
func (st *Stats) NodeStats() NodeStats {
	return NodeStats{Name: st.Name, Version: st.Version, UptimeS: float64(st.Uptime.Milliseconds()) / 1e3,
		Keys: st.Keys, RingVersion: st.RingVersion, Checks: st.Checks, Refused: st.Refused, Forwarded: st.Forwarded,
		Degraded: st.Degraded, PeerChecks: st.PeerChecks, ReplicationLagMs: float64(st.ReplicationLag.Microseconds()) / 1e3,
		ReplicationPending: st.ReplicationPending, PolicyVersion: st.PolicyVersion, RLSVersion: st.RLSVersion,
		Peeks: st.Peeks, Reservations: st.Reservations, Settles: st.Settles, Resets: st.Resets, Adaptive: st.Adaptive}
}

// NodeStats is what one node reports of itself, in JSON (the stats of a
// member in GET /ui/api/status). The counts are cumulative since it
// started.
type NodeStats struct {
	Name        string  `json:"name"`
	Version     string  `json:"version"`
	UptimeS     float64 `json:"uptime_s"`
	Keys        int64   `json:"keys"`
	RingVersion uint64  `json:"ring_version"`
	// Checks its API decided; of them Refused, Forwarded (decided by
	// another owner) and Degraded (answered by their failure mode).
	Checks    uint64 `json:"checks"`
	Refused   uint64 `json:"refused"`
	Forwarded uint64 `json:"forwarded"`
	Degraded  uint64 `json:"degraded"`
	// PeerChecks are the checks other nodes sent it to decide.
	PeerChecks         uint64  `json:"peer_checks"`
	ReplicationLagMs   float64 `json:"replication_lag_ms"`
	ReplicationPending int64   `json:"replication_pending"`
	PolicyVersion      string  `json:"policy_version,omitempty"`
	RLSVersion         string  `json:"rls_version,omitempty"`
	// Peeks, Reservations, Settles and Resets: see Stats (left out while
	// 0).
	Peeks        uint64 `json:"peeks,omitempty"`
	Reservations uint64 `json:"reservations,omitempty"`
	Settles      uint64 `json:"settles,omitempty"`
	Resets       uint64 `json:"resets,omitempty"`
	// Adaptive: see Stats (left out when the node owns no adaptive key).
	Adaptive []AdaptiveScope `json:"adaptive,omitempty"`
}

// Router is what a node's router reports about surviving crashes and
// partitions (forward.Router.Status); Replication and Quorum give it as
// Cluster shows it.
type Router struct {
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

// Replication returns r's replication figures as Cluster shows them.
func (r *Router) Replication() Replication {
	return Replication{Factor: r.ReplicationFactor, LagMs: float64(r.ReplicationLag.Microseconds()) / 1000,
		Pending: r.ReplicationPending, Replicas: r.Replicas, SuccessorKeys: r.StandingIn, SuccessorFor: r.Successor}
}

// Quorum returns r's quorum as Cluster shows it.
func (r *Router) Quorum() Quorum {
	return Quorum{ClusterSize: r.ClusterSize, Minority: r.Minority, Down: r.Down}
}

// StandIn is a key a node decides for its owner.
type StandIn struct {
	Key   string `json:"key"`
	Owner string `json:"owner"`
}

// Cluster is the body of GET /v1/cluster: the members as this node's
// gossip sees them, with its replication and quorum.
type Cluster struct {
	Self        string      `json:"self"`
	RingVersion uint64      `json:"ring_version"`
	Members     []Member    `json:"members"`
	Replication Replication `json:"replication"`
	Quorum      Quorum      `json:"quorum"`
}

// Replication is this node's side of replication in Cluster.
type Replication struct {
	// Factor is how many successors hold a copy of each key (0: off).
	Factor int `json:"factor"`
	// LagMs is how long the last round's oldest change waited until its
	// successors acknowledged it.
	LagMs float64 `json:"lag_ms"`
	// Pending is how many changed keys wait for the next round.
	Pending int64 `json:"pending"`
	// Replicas is how many key states this node holds for other members.
	Replicas int `json:"replicas"`
	// SuccessorKeys is how many keys this node decides as the successor of
	// an owner that could not be reached; SuccessorFor lists up to 10.
	SuccessorKeys int       `json:"successor_keys"`
	SuccessorFor  []StandIn `json:"successor_for,omitempty"`
}

// Quorum says whether this node sees a majority of the cluster.
type Quorum struct {
	ClusterSize int      `json:"cluster_size"`
	Minority    bool     `json:"minority"`
	Down        []string `json:"down,omitempty"`
}

// Member is one member in Cluster. Keys is -1 when the member did not
// say.
type Member struct {
	Name   string `json:"name"`
	HTTP   string `json:"http,omitempty"` // public HTTP API
	GRPC   string `json:"grpc"`           // public gRPC API
	Peer   string `json:"peer"`           // peer gRPC service (other nodes only)
	Gossip string `json:"gossip"`
	State  string `json:"state"`
	OnRing bool   `json:"on_ring"`
	Keys   int64  `json:"keys"`
}

// Ring is the body of GET /v1/ring: who owns which part of the key
// space. A key belongs to partition xxhash64(key) mod len(Owners), whose
// owner is Members[Owners[p]].
type Ring struct {
	Version uint64 `json:"ring_version"`
	// Members are the ring's members, sorted by name, with the share of
	// partitions each owns.
	Members []RingMember `json:"members"`
	// Owners[p] is the index in Members of partition p's owner.
	Owners []int `json:"owners"`
}

// RingMember is one member in Ring.
type RingMember struct {
	Name       string  `json:"name"`
	Partitions int     `json:"partitions"`
	Share      float64 `json:"share"` // Partitions / len(Owners)
}

// NewRing builds a Ring from each partition's owner.
func NewRing(owners []string, version uint64) Ring {
	st := Ring{Version: version, Members: []RingMember{}, Owners: make([]int, len(owners))}
	index := map[string]int{}
	for _, o := range owners {
		if _, ok := index[o]; !ok {
			index[o] = 0
			st.Members = append(st.Members, RingMember{Name: o})
		}
	}
	slices.SortFunc(st.Members, func(a, b RingMember) int { return strings.Compare(a.Name, b.Name) })
	for i, m := range st.Members {
		index[m.Name] = i
	}
	for p, o := range owners {
		i := index[o]
		st.Owners[p] = i
		st.Members[i].Partitions++
	}
	for i := range st.Members {
		st.Members[i].Share = float64(st.Members[i].Partitions) / float64(len(owners))
	}
	return st
}
