package node

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/ringlimit/ringlimit/api"
	"github.com/ringlimit/ringlimit/internal/grpcmetrics"
	"github.com/ringlimit/ringlimit/peer"
)

// readHeaderTimeout is how long a client may take to send a request's
// headers: 5 s, or the whole request's read timeout when that is shorter.
func readHeaderTimeout(read time.Duration) time.Duration {
	if read > 0 && read < 5*time.Second {
		return read
	}
	return 5 * time.Second
}

func hostOf(addr string) string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return host
}

// trackConn remembers HTTP connections that have not sent a request yet.
// http.Server.Shutdown waits up to 5 s for such a connection, which a
// client's pool may hold open without using; shutdown closes them at once,
// since no check is in flight on them.
func (n *Node) trackConn(c net.Conn, st http.ConnState) {
	n.freshMu.Lock()
	defer n.freshMu.Unlock()
	if st == http.StateNew {
		n.fresh[c] = struct{}{}
	} else {
		delete(n.fresh, c)
	}
}

func (n *Node) closeFresh() {
	n.freshMu.Lock()
	defer n.freshMu.Unlock()
	for c := range n.fresh {
		c.Close()
		delete(n.fresh, c)
	}
}

// servePprof serves net/http/pprof's handlers on their own listener, to
// requests with an admin token (api.RequireAdmin), and returns the address
// it listens on.
func servePprof(addr string, log *slog.Logger, admin *api.Tokens) (stop func(), bound string, err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: api.RequireAdmin(admin, mux), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	log.Info("pprof listening", "addr", ln.Addr().String())
	return func() { srv.Close() }, ln.Addr().String(), nil
}

// streamWorkers is how many goroutines serve gRPC calls, reused from call
// to call. Without them grpc-go starts a goroutine per call, whose stack
// grows (and is copied) on every call: about a tenth of a node's CPU under
// one unary call per check. A call that finds every worker busy (a check
// waiting on its owner holds one) gets a goroutine of its own, as before.
const streamWorkers = 256

// maxConcurrentStreams is the most gRPC calls one client connection may
// have open at once. A peer holds one Check stream and a few unary calls
// (handoff, replicate, fetch); a public client multiplexes its checks on a
// connection. A client over it waits for a stream (HTTP/2 flow control)
// instead of making the node start a goroutine per call without bound.
const maxConcurrentStreams = 1024

// maxHeaderBytes bounds an HTTP request's headers. The API's requests carry
// a few short headers; the body (JSON, at most api.MaxBodyBytes) holds the
// checks.
const maxHeaderBytes = 64 << 10

// grpcOptions are the options of both gRPC servers, the public one and the
// peer one, before their transport credentials.
func grpcOptions() []grpc.ServerOption {
	return append([]grpc.ServerOption{grpc.NumStreamWorkers(streamWorkers),
		// Fixed flow-control windows: no BDP pings on every connection.
		grpc.StaticStreamWindowSize(peer.StreamWindow), grpc.StaticConnWindowSize(peer.ConnWindow),
		grpc.MaxConcurrentStreams(maxConcurrentStreams)},
		peer.ServerOptions()...) // keepalive policy and the largest message
}

// newServers makes the HTTP server (the API, with the status page for the
// paths the API does not serve), the public gRPC server (the API and
// grpc.health.v1) and the peer gRPC server, each with its metrics and, when
// configured, TLS and tracing.
func (n *Node) newServers(cfg Config, a *api.API, page http.Handler, grpcMetrics *grpcmetrics.Metrics, log *slog.Logger) {
	n.api = a
	n.httpServer = &http.Server{
		Handler:           a.Handler(page),
		ReadHeaderTimeout: readHeaderTimeout(cfg.HTTPReadTimeout),
		ReadTimeout:       cfg.HTTPReadTimeout,
		WriteTimeout:      cfg.HTTPWriteTimeout,
		IdleTimeout:       cfg.HTTPIdleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		ConnState:         n.trackConn,
	}
	if n.certs.api != nil {
		n.httpServer.TLSConfig = n.certs.api.ServerConfig(cfg.APITLSClientCA != "", "h2", "http/1.1")
	}
	gopts := append(append(append(grpcOptions(), idleOptions(cfg.GRPCIdleTimeout)...), grpcMetrics.ServerOptions("public")...), n.certs.apiCreds(cfg.APITLSClientCA != "")...)
	gopts = append(gopts, grpc.ChainUnaryInterceptor(cfg.GRPCUnaryInterceptors...))
	gopts = append(gopts, cfg.GRPCServerOptions...)
	if h := a.GRPCStatsHandler(); h != nil {
		gopts = append(gopts, grpc.StatsHandler(h))
	}
	n.grpcServer = grpc.NewServer(gopts...)
	a.RegisterGRPC(n.grpcServer)
	n.health = health.NewServer()
	healthpb.RegisterHealthServer(n.grpcServer, n.health)
	grpcMetrics.Init("public", n.grpcServer)
	n.peerGRPC = grpc.NewServer(append(append(append(grpcOptions(), idleOptions(peerIdleTimeout)...), grpcMetrics.ServerOptions("peer")...), n.certs.peerCreds(n.peerServer)...)...)
	n.peerServer.Register(n.peerGRPC)
	grpcMetrics.Init("peer", n.peerGRPC)
}

// serve serves the three servers on their listeners; each one's end is
// sent on n.served.
func (n *Node) serve() {
	go func() {
		if n.certs.api != nil {
			n.served <- n.httpServer.ServeTLS(n.httpLn, "", "")
			return
		}
		n.served <- n.httpServer.Serve(n.httpLn)
	}()
	go func() { n.served <- n.grpcServer.Serve(n.grpcLn) }()
	go func() { n.served <- n.peerGRPC.Serve(n.peerLn) }()
}

// batchInterceptor runs around each call a Batches stream carries what runs
// around a unary call of the public server: the node's metrics, then
// cfg.GRPCUnaryInterceptors.
func batchInterceptor(cfg Config, m *grpcmetrics.Metrics) grpc.UnaryServerInterceptor {
	return chainUnary(append([]grpc.UnaryServerInterceptor{m.UnaryInterceptor("public")}, cfg.GRPCUnaryInterceptors...))
}

// chainUnary is the interceptors run in order around a handler, as
// grpc.ChainUnaryInterceptor runs them around a unary call.
func chainUnary(is []grpc.UnaryServerInterceptor) grpc.UnaryServerInterceptor {
	if len(is) == 1 {
		return is[0]
	}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		for i := len(is) - 1; i >= 0; i-- {
			next, in := handler, is[i]
			handler = func(ctx context.Context, req any) (any, error) { return in(ctx, req, info, next) }
		}
		return handler(ctx, req)
	}
}
