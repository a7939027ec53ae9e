package node

import (
	"context"

	"github.com/ringlimit/ringlimit/api"
	"github.com/ringlimit/ringlimit/cluster"
	"github.com/ringlimit/ringlimit/forward"
)

// clusterStatus serves /v1/cluster and /v1/owner from the gossip view and
// the router's ring.
type clusterStatus struct {
	cluster *cluster.Cluster
	router  *forward.Router
}

func (s *clusterStatus) Owner(key string) (string, uint64) { return s.router.Owner(key) }

func (s *clusterStatus) Partitions() ([]string, uint64) { return s.router.Partitions() }

func (s *clusterStatus) Status(ctx context.Context) api.ClusterStatus {
	return s.status(s.router.PeerKeys(ctx))
}

// status is Status with what each member said it holds: a member missing
// from keys did not answer.
func (s *clusterStatus) status(keys map[string]int64) api.ClusterStatus {
	onRing := map[string]bool{}
	for _, name := range s.router.RingMembers() {
		onRing[name] = true
	}
	fs := s.router.Status()
	st := api.ClusterStatus{Self: s.router.Self(), RingVersion: s.router.RingVersion(),
		Replication: api.ReplicationStatus{Factor: fs.ReplicationFactor, LagMs: float64(fs.ReplicationLag.Microseconds()) / 1000,
			Pending: fs.ReplicationPending, Replicas: fs.Replicas, SuccessorKeys: fs.StandingIn, SuccessorFor: fs.Successor},
		Quorum: api.QuorumStatus{ClusterSize: fs.ClusterSize, Minority: fs.Minority, Down: fs.Down}}
	for _, m := range s.cluster.Members() {
		k, ok := keys[m.Name]
		if !ok {
			k = -1
		}
		st.Members = append(st.Members, api.ClusterMember{Name: m.Name, HTTP: m.HTTPAddr, GRPC: m.APIAddr, Peer: m.PeerAddr, Gossip: m.GossipAddr,
			State: string(m.State), OnRing: onRing[m.Name], Keys: k})
	}
	return st
}
