package ui

import (
	"github.com/ringlimit/ringlimit/api"
	"github.com/ringlimit/ringlimit/policy"
)

// Snapshot is what a Source returns: everything the page shows, as this
// node sees it at one moment.
type Snapshot struct {
	// Cluster is the members as this node's gossip sees them, with its
	// replication and quorum (the body of GET /v1/cluster).
	Cluster api.ClusterStatus
	// Ring is this node's ring (the body of GET /v1/ring).
	Ring api.RingStatus
	// Stats holds one entry per node that answered, this one included.
	Stats []NodeStats
	// Policy is this node's policy; nil when it runs none.
	Policy *Policy
}

// NodeStats is what one node reports of itself. The counts are cumulative
// since it started.
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
}

// Policy is the policy this node runs: its version and the incident
// overrides in force.
type Policy struct {
	Version   string            `json:"version"`
	Overrides []policy.Override `json:"overrides"`
}

// Status is the body of GET /ui/api/status.
type Status struct {
	Self string `json:"self"`
	// RingVersion is a decimal string: JavaScript's numbers cannot hold
	// every uint64 (Ring.Version, a number as in GET /v1/ring, is only
	// exact up to 2^53).
	RingVersion uint64                `json:"ring_version,string"`
	Members     []Member              `json:"members"`
	Ring        api.RingStatus        `json:"ring"`
	Replication api.ReplicationStatus `json:"replication"`
	Quorum      api.QuorumStatus      `json:"quorum"`
	// Policy is null when this node runs no policy.
	Policy *Policy `json:"policy"`
}

// Member is one member of Status: what gossip says of it, what it said of
// itself (Stats: null when it did not answer), and its rates (null until
// two samples of it are far enough apart).
type Member struct {
	api.ClusterMember
	Self  bool       `json:"self"`
	Stats *NodeStats `json:"stats"`
	Rates *Rates     `json:"rates"`
}
