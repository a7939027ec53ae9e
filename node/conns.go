package node

import (
	"fmt"
	"log/slog"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/ringlimit/ringlimit/internal/connlimit"
	"github.com/ringlimit/ringlimit/peer"
)

// handshakeTimeout is how long a new gRPC connection (public or peer) may
// take to finish its TLS and HTTP/2 handshakes (grpc.ConnectionTimeout;
// grpc-go's default is 120 s, long enough for silent connections to pile
// up). An HTTP connection gets readHeaderTimeout for its first request.
const handshakeTimeout = 5 * time.Second

// peerIdleTimeout is how long a peer connection with no call in flight
// stays open. A peer's Check stream keeps its connection busy; a
// connection the other node stopped using is closed, and redialled when
// needed.
const peerIdleTimeout = 5 * time.Minute

// minConns is the least cap of a public listener derived from a small
// open-file limit.
const minConns = 16

// connCaps are the most connections each listener holds at once.
type connCaps struct {
	nofile  uint64 // the soft RLIMIT_NOFILE (Go raises it to the hard limit at start)
	reserve uint64 // file descriptors not given to the public listeners
	public  int    // --http and --grpc, each
	peer    int    // --peer
}

// capsFor derives the caps from the open-file limit nofile: reserve =
// max(256, nofile/8) descriptors are kept for everything but the public
// listeners (peer connections, gossip, file reloads, /healthz's own
// connection, the process's own files); the rest is split between the two
// public listeners; peers get at most reserve/4 connections. maxConns > 0
// replaces the public cap.
func capsFor(nofile uint64, maxConns int) connCaps {
	const most = 1 << 24 // "unlimited" counts as plenty
	nofile = min(nofile, most)
	c := connCaps{nofile: nofile, reserve: max(256, nofile/8)}
	if nofile > c.reserve {
		c.public = int((nofile - c.reserve) / 2)
	}
	c.public = max(c.public, minConns)
	c.peer = int(c.reserve / 4)
	if maxConns > 0 {
		c.public = maxConns
	}
	return c
}

// limitConns caps the HTTP, public gRPC and peer listeners (capsFor) and
// exports their counts. The peer listener's connections also yield the CPU
// after each write (peer.YieldingListener).
func (n *Node) limitConns(cfg Config, reg prometheus.Registerer, log *slog.Logger) error {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return fmt.Errorf("open-file limit: %w", err)
	}
	caps := capsFor(rl.Cur, cfg.MaxConns)
	lns := connListeners{
		{"http", connlimit.New(n.httpLn, connlimit.Config{Max: caps.public, Clock: n.clock}), caps.public},
		{"grpc", connlimit.New(n.grpcLn, connlimit.Config{Max: caps.public, Clock: n.clock}), caps.public},
		{"peer", connlimit.New(peer.YieldingListener(n.peerLn), connlimit.Config{Max: caps.peer, Clock: n.clock}), caps.peer},
	}
	n.httpLn, n.grpcLn, n.peerLn = lns[0].l, lns[1].l, lns[2].l
	if err := reg.Register(lns); err != nil {
		return err
	}
	log.Info("connection caps", "nofile", caps.nofile, "reserve", caps.reserve, "http", caps.public, "grpc", caps.public, "peer", caps.peer)
	return nil
}

// idleOptions close a gRPC server's connections that do not finish their
// handshake within handshakeTimeout or have had no call in flight for
// idle. They follow grpcOptions (whose keepalive they replace).
func idleOptions(idle time.Duration) []grpc.ServerOption {
	ka := peer.ServerKeepalive()
	ka.MaxConnectionIdle = idle
	return []grpc.ServerOption{grpc.ConnectionTimeout(handshakeTimeout), grpc.KeepaliveParams(ka)}
}

// connListeners export each capped listener's counts.
type connListeners []struct {
	name string
	l    *connlimit.Listener
	max  int
}

var (
	connsOpenDesc    = prometheus.NewDesc("ringlimit_conns_open", "Connections open on a listener (http, grpc, peer).", []string{"listener"}, nil)
	connsMaxDesc     = prometheus.NewDesc("ringlimit_conns_max", "Most connections a listener holds at once (--max-conns; peer: derived from the open-file limit).", []string{"listener"}, nil)
	connsEvictedDesc = prometheus.NewDesc("ringlimit_conns_evicted_total", "Idle connections closed to make room for a new one on a full listener.", []string{"listener"}, nil)
	connsRefusedDesc = prometheus.NewDesc("ringlimit_conns_refused_total", "New connections closed at once: the listener was full and no connection had been idle for 1s.", []string{"listener"}, nil)
)

func (ls connListeners) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{connsOpenDesc, connsMaxDesc, connsEvictedDesc, connsRefusedDesc} {
		ch <- d
	}
}

func (ls connListeners) Collect(ch chan<- prometheus.Metric) {
	for _, x := range ls {
		s := x.l.Stats()
		ch <- prometheus.MustNewConstMetric(connsOpenDesc, prometheus.GaugeValue, float64(s.Open), x.name)
		ch <- prometheus.MustNewConstMetric(connsMaxDesc, prometheus.GaugeValue, float64(x.max), x.name)
		ch <- prometheus.MustNewConstMetric(connsEvictedDesc, prometheus.CounterValue, float64(s.Evicted), x.name)
		ch <- prometheus.MustNewConstMetric(connsRefusedDesc, prometheus.CounterValue, float64(s.Refused), x.name)
	}
}
