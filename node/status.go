package node

import (
	"context"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/cluster"
	"github.com/ringlimit/ringlimit/forward"
	"github.com/ringlimit/ringlimit/peer"
	"github.com/ringlimit/ringlimit/status"
)

// clusterStatus serves /v1/cluster and /v1/owner from the gossip view and
// the router's ring; the members' key counts come from the peers' Stats.
type clusterStatus struct {
	cluster *cluster.Cluster
	router  *forward.Router
	peers   *peer.Pool
	store   *bucket.Store // this node's keys
}

func (s *clusterStatus) Owner(key string) (string, uint64) { return s.router.Owner(key) }

func (s *clusterStatus) Partitions() ([]string, uint64) { return s.router.Partitions() }

func (s *clusterStatus) RingVersion() uint64 { return s.router.RingVersion() }

func (s *clusterStatus) ClientRing() forward.ClientRing { return s.router.ClientRing() }

func (s *clusterStatus) Status(ctx context.Context) status.Cluster {
	keys := s.peers.Keys(ctx)
	keys[s.router.Self()] = int64(s.store.Len())
	return s.status(keys)
}

// status is Status with what each member said it holds: a member missing
// from keys did not answer.
func (s *clusterStatus) status(keys map[string]int64) status.Cluster {
	onRing := map[string]bool{}
	for _, name := range s.router.RingMembers() {
		onRing[name] = true
	}
	fs := s.router.Status()
	st := status.Cluster{Self: s.router.Self(), RingVersion: s.router.RingVersion(),
		Replication: fs.Replication(), Quorum: fs.Quorum()}
	for _, m := range s.cluster.Members() {
		k, ok := keys[m.Name]
		if !ok {
			k = -1
		}
		st.Members = append(st.Members, status.Member{Name: m.Name, HTTP: m.HTTPAddr, GRPC: m.APIAddr, Peer: m.PeerAddr, Gossip: m.GossipAddr,
			State: string(m.State), OnRing: onRing[m.Name], Keys: k})
	}
	return st
}
