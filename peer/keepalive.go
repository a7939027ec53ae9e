package peer

import (
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// Keepalive between nodes. A node pings a peer connection that has been
// quiet for KeepaliveTime, streams or not, and drops it when the ping is
// not answered within KeepaliveTimeout, so that a peer gone without a word
// (a cut link, a host powered off) is noticed even between checks. The
// server side (ServerOptions) lets clients ping as often as every
// KeepaliveMinTime, a third of KeepaliveTime: pings more frequent than
// that would be answered with GOAWAY ("too_many_pings").
const (
	KeepaliveTime    = 30 * time.Second
	KeepaliveTimeout = 10 * time.Second
	KeepaliveMinTime = 10 * time.Second
)

// ServerKeepalive is the keepalive of ServerOptions: the server pings a
// connection quiet for Time and drops it when the ping is not answered
// within Timeout. A server that also closes idle connections sets
// MaxConnectionIdle on it and passes it after ServerOptions (the last
// KeepaliveParams option wins).
func ServerKeepalive() keepalive.ServerParameters {
	return keepalive.ServerParameters{Time: 2 * time.Minute, Timeout: 20 * time.Second}
}

// ServerOptions are the gRPC server options a node serves the peer service
// (and its public gRPC API) with: the keepalive policy that matches what
// Pool connections send, keepalive pings of its own on quiet connections,
// and MaxMessageBytes as the largest message received.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: KeepaliveMinTime, PermitWithoutStream: true}),
		grpc.KeepaliveParams(ServerKeepalive()),
		grpc.MaxRecvMsgSize(MaxMessageBytes),
	}
}

// dialOptions are the options every peer connection starts with.
func dialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithContextDialer(dialYielding),
		grpc.WithStaticStreamWindowSize(StreamWindow), grpc.WithStaticConnWindowSize(ConnWindow),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: KeepaliveTime, Timeout: KeepaliveTimeout, PermitWithoutStream: true}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageBytes)),
	}
}
