package node

import (
	"context"

	"github.com/ringlimit/ringlimit/api"
	"github.com/ringlimit/ringlimit/clock"
	"github.com/ringlimit/ringlimit/peer"
	"github.com/ringlimit/ringlimit/policy"
	"github.com/ringlimit/ringlimit/rls"
	"github.com/ringlimit/ringlimit/status"
	"github.com/ringlimit/ringlimit/ui"
)

// reportStats is what this node adds to the Stats it answers its peers
// with (peer.Server.Report): the API's counts, replication, the policy and
// RLS versions, its uptime since start and its build.
func reportStats(a *api.API, cs *clusterStatus, pm *policy.Manager, rm *rls.Manager, clk clock.Clock, start clock.Instant, version string) func(*status.Stats) {
	return func(st *status.Stats) {
		act := a.Activity()
		st.Checks, st.Refused, st.Forwarded, st.Degraded = act.Checks, act.Refused, act.Forwarded, act.Degraded
		st.Peeks, st.Reservations, st.Settles, st.Resets = act.Peeks, act.Reservations, act.Settles, act.Resets
		fs := cs.router.Status()
		st.ReplicationLag, st.ReplicationPending = fs.ReplicationLag, fs.ReplicationPending
		if pm != nil {
			if p := pm.Current(); p != nil {
				st.PolicyVersion = p.Version
			}
		}
		if rm != nil {
			if c := rm.Current(); c != nil {
				st.RLSVersion = c.Version()
			}
		}
		st.Uptime, st.Version = clk.Now().Sub(start), version
		st.Adaptive = cs.router.AdaptiveScopes()
	}
}

// statusPage gathers the status page's snapshot (ui.Source): one Stats
// call to every peer gives both their counts and the keys /v1/cluster
// shows.
type statusPage struct {
	cs     *clusterStatus
	peers  *peer.Pool
	server *peer.Server
	policy *policy.Manager // nil without --policy
}

func (s *statusPage) snapshot(ctx context.Context) ui.Snapshot {
	stats := s.peers.Stats(ctx)
	self := s.server.LocalStats()
	stats[self.Name] = self
	keys := make(map[string]int64, len(stats))
	snap := ui.Snapshot{Stats: make([]status.NodeStats, 0, len(stats))}
	for name, st := range stats {
		keys[name] = st.Keys
		snap.Stats = append(snap.Stats, st.NodeStats())
	}
	snap.Cluster = s.cs.status(keys)
	snap.Ring = status.NewRing(s.cs.Partitions())
	if s.policy != nil {
		snap.Policy = &ui.Policy{Overrides: s.policy.Overrides()}
		if p := s.policy.Current(); p != nil {
			snap.Policy.Version = p.Version
		}
	}
	return snap
}
