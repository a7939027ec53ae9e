package forward

import "github.com/ringlimit/ringlimit/peer"

// forward does not import peer: a node wires them, the Pool as the
// Router's Peers and the Router as the peer Server's Handler and
// StatsSource.
var (
	_ Peers            = (*peer.Pool)(nil)
	_ peer.Handler     = (*Router)(nil)
	_ peer.StatsSource = (*Router)(nil)
)
