package api

import "github.com/ringlimit/ringlimit/status"

// The bodies of GET /v1/ring and GET /v1/cluster are package status's
// types; these names stay for the API's users.
type (
	// RingStatus is the body of GET /v1/ring (status.Ring).
	RingStatus = status.Ring
	// RingMember is one member in RingStatus.
	RingMember = status.RingMember
	// ClusterStatus is the body of GET /v1/cluster (status.Cluster).
	ClusterStatus = status.Cluster
	// ReplicationStatus is this node's side of replication in ClusterStatus.
	ReplicationStatus = status.Replication
	// QuorumStatus says whether this node sees a majority of the cluster.
	QuorumStatus = status.Quorum
	// ClusterMember is one member in ClusterStatus.
	ClusterMember = status.Member
)

// NewRingStatus builds a RingStatus from each partition's owner
// (status.NewRing).
func NewRingStatus(owners []string, version uint64) RingStatus {
	return status.NewRing(owners, version)
}
