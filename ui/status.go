package ui

import (
	"github.com/ringlimit/ringlimit/policy"
	"github.com/ringlimit/ringlimit/status"
)

// Snapshot is what a Source returns: everything the page shows, as this
// node sees it at one moment.
type Snapshot struct {
	// Cluster is the members as this node's gossip sees them, with its
	// replication and quorum (the body of GET /v1/cluster).
	Cluster status.Cluster
	// Ring is this node's ring (the body of GET /v1/ring).
	Ring status.Ring
	// Stats holds one entry per node that answered, this one included.
	Stats []NodeStats
	// Policy is this node's policy; nil when it runs none.
	Policy *Policy
}

// NodeStats is what one node reports of itself (status.NodeStats).
type NodeStats = status.NodeStats

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
	RingVersion uint64             `json:"ring_version,string"`
	Members     []Member           `json:"members"`
	Ring        status.Ring        `json:"ring"`
	Replication status.Replication `json:"replication"`
	Quorum      status.Quorum      `json:"quorum"`
	// Policy is null when this node runs no policy.
	Policy *Policy `json:"policy"`
}

// Member is one member of Status: what gossip says of it, what it said of
// itself (Stats: null when it did not answer), and its rates (null until
// two samples of it are far enough apart).
type Member struct {
	status.Member
	Self  bool       `json:"self"`
	Stats *NodeStats `json:"stats"`
	Rates *Rates     `json:"rates"`
}
