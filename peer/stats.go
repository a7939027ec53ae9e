package peer

import (
	"context"
	"time"

	peerv1 "github.com/ringlimit/ringlimit/proto/peerv1"
	"github.com/ringlimit/ringlimit/status"
)

// Stats is what a node reports of itself to the other nodes (Server.Stats,
// Pool.Stats), for the cluster's status page: package status owns it, and
// the peer protocol carries it (statsToProto, statsFromProto).
type Stats = status.Stats

// LocalStats returns what this node answers a Stats call with.
func (s *Server) LocalStats() Stats {
	st := Stats{Name: s.self, PeerChecks: s.peerChecks.Load()}
	if s.stats != nil {
		st.Keys, st.RingVersion = s.stats.Keys(), s.stats.RingVersion()
	}
	if s.report != nil {
		s.report(&st)
		st.Name = s.self
	}
	return st
}

// Stats reports this node's key count, ring version and counts.
func (s *Server) Stats(ctx context.Context, _ *peerv1.StatsRequest) (*peerv1.StatsResponse, error) {
	if err := s.authorizeAny(ctx); err != nil {
		return nil, err
	}
	st := s.LocalStats()
	return statsToProto(&st), nil
}

func statsToProto(st *Stats) *peerv1.StatsResponse {
	return &peerv1.StatsResponse{Name: st.Name, Keys: st.Keys, RingVersion: st.RingVersion,
		Checks: st.Checks, Refused: st.Refused, Forwarded: st.Forwarded, Degraded: st.Degraded, PeerChecks: st.PeerChecks,
		ReplicationLagUs: st.ReplicationLag.Microseconds(), ReplicationPending: st.ReplicationPending,
		PolicyVersion: st.PolicyVersion, RlsVersion: st.RLSVersion, UptimeMs: st.Uptime.Milliseconds(), Version: st.Version,
		Peeks: st.Peeks, Reservations: st.Reservations, Settles: st.Settles, Resets: st.Resets, AdaptiveScopes: scopesToProto(st.Adaptive)}
}

func statsFromProto(r *peerv1.StatsResponse) Stats {
	return Stats{Name: r.GetName(), Keys: r.GetKeys(), RingVersion: r.GetRingVersion(),
		Checks: r.GetChecks(), Refused: r.GetRefused(), Forwarded: r.GetForwarded(), Degraded: r.GetDegraded(), PeerChecks: r.GetPeerChecks(),
		ReplicationLag: time.Duration(r.GetReplicationLagUs()) * time.Microsecond, ReplicationPending: r.GetReplicationPending(),
		PolicyVersion: r.GetPolicyVersion(), RLSVersion: r.GetRlsVersion(), Uptime: time.Duration(r.GetUptimeMs()) * time.Millisecond, Version: r.GetVersion(),
		Peeks: r.GetPeeks(), Reservations: r.GetReservations(), Settles: r.GetSettles(), Resets: r.GetResets(),
		Adaptive: scopesFromProto(r.GetAdaptiveScopes())}
}

// maxStatsScopes bounds the adaptive scopes a peer's Stats may give.
const maxStatsScopes = 256

func scopesToProto(ss []status.AdaptiveScope) []*peerv1.AdaptiveScope {
	out := make([]*peerv1.AdaptiveScope, len(ss))
	for i, s := range ss {
		out[i] = &peerv1.AdaptiveScope{Scope: s.Scope, Limit: s.Limit}
	}
	return out
}

func scopesFromProto(ps []*peerv1.AdaptiveScope) []status.AdaptiveScope {
	var out []status.AdaptiveScope
	for _, p := range ps[:min(len(ps), maxStatsScopes)] {
		if len(p.GetScope()) <= maxScopeLen {
			out = append(out, status.AdaptiveScope{Scope: p.GetScope(), Limit: p.GetLimit()})
		}
	}
	return out
}

// stats asks the peer for its Stats.
func (c *conn) stats(ctx context.Context) (Stats, error) {
	resp, err := c.rpc.Stats(ctx, &peerv1.StatsRequest{})
	if err != nil {
		return Stats{}, err
	}
	return statsFromProto(resp), nil
}
