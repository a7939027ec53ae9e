package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"

	"github.com/ringlimit/ringlimit/api"
	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/cluster"
	"github.com/ringlimit/ringlimit/forward"
	"github.com/ringlimit/ringlimit/policy"
)

// run starts a node and serves until ctx is cancelled, then shuts down
// gracefully. It returns nil after a clean shutdown. tune, when not nil,
// tunes the process's garbage collector for --gc-headroom while the node
// runs and returns the function that stops it: main passes tuneGC; tests,
// which run several nodes in one process, pass nil.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer, tune func(headroom uint64) (stop func())) error {
	cfg, err := parseConfig(args, getenv, stderr)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: cfg.logLevel}))
	if tune != nil {
		defer tune(uint64(cfg.gcHeadroomMiB) << 20)()
	}
	n, err := startNode(cfg, log)
	if err != nil {
		return err
	}
	if cfg.pprofAddr != "" {
		stop, err := servePprof(cfg.pprofAddr, log)
		if err != nil {
			n.Close(context.Background())
			return fmt.Errorf("--pprof: %w", err)
		}
		defer stop()
	}
	<-ctx.Done()
	log.Info("shutting down", "reason", context.Cause(ctx))
	sctx, cancel := context.WithTimeout(context.Background(), cfg.shutdownTimeout)
	defer cancel()
	return n.Close(sctx)
}

// node is a running node: its listeners and servers.
type node struct {
	log        *slog.Logger
	httpLn     net.Listener
	grpcLn     net.Listener
	httpServer *http.Server
	grpcServer *grpc.Server
	store      *bucket.Store
	router     *forward.Router
	cluster    *cluster.Cluster
	policy     *policy.Manager // nil without --policy
	stopBg     context.CancelFunc
	bg         sync.WaitGroup
	audit      io.Closer  // nil without --policy
	served     chan error // one value per server when it stops

	freshMu   sync.Mutex
	fresh     map[net.Conn]struct{} // HTTP connections that have not sent a request yet
	closeOnce sync.Once
	closeErr  error
}

// startNode binds the listeners (so that a bad address fails at once) and
// starts serving in the background.
func startNode(cfg config, log *slog.Logger) (*node, error) {
	shards := bucket.DefaultShards
	for shards > 1 && cfg.maxKeys < shards {
		shards /= 2
	}
	store, err := bucket.NewStore(bucket.StoreConfig{MaxKeys: cfg.maxKeys, Shards: shards})
	if err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	var pol *policy.Manager
	var audit io.WriteCloser
	if cfg.policyPath != "" {
		audit = nopCloser{slogWriter{log}}
		if cfg.auditPath != "" {
			if audit, err = os.OpenFile(cfg.auditPath, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err != nil {
				return nil, fmt.Errorf("--audit-log: %w", err)
			}
		}
		if pol, err = policy.NewManager(policy.ManagerConfig{Path: cfg.policyPath, AuditLog: audit, Logger: log, Registerer: reg}); err != nil {
			audit.Close()
			return nil, fmt.Errorf("--policy: %w", err)
		}
	}
	httpLn, err := net.Listen("tcp", cfg.httpAddr)
	if err != nil {
		closeAudit(audit)
		return nil, fmt.Errorf("--http: %w", err)
	}
	grpcLn, err := net.Listen("tcp", cfg.grpcAddr)
	if err != nil {
		httpLn.Close()
		closeAudit(audit)
		return nil, fmt.Errorf("--grpc: %w", err)
	}
	router, err := forward.New(forward.Config{Self: cfg.name, SelfAddr: grpcLn.Addr().String(), Store: store, Logger: log, Registerer: reg,
		OnNotify: func(_ context.Context, kind string, payload []byte) error { return receiveNotify(pol, kind, payload) }})
	if err != nil {
		httpLn.Close()
		grpcLn.Close()
		closeAudit(audit)
		return nil, err
	}
	ccfg := cluster.DefaultLANConfig()
	if ip := net.ParseIP(hostOf(cfg.gossipAddr)); ip != nil && ip.IsLoopback() {
		ccfg = cluster.DefaultLocalConfig()
	}
	ccfg.Name = cfg.name
	ccfg.BindAddr = cfg.gossipAddr
	ccfg.GRPCAddr = grpcLn.Addr().String()
	ccfg.Seeds = cfg.join
	ccfg.Logger = log
	known := map[string]bool{}
	ccfg.Listener = cluster.ListenerFunc(func(alive []cluster.Member) {
		members := make([]forward.Member, len(alive))
		var joined []string
		for i, m := range alive {
			members[i] = forward.Member{Name: m.Name, Addr: m.GRPCAddr}
			if !known[m.Name] && m.Name != cfg.name {
				joined = append(joined, m.Name)
			}
		}
		clear(known)
		for _, m := range alive {
			known[m.Name] = true
		}
		router.SetMembers(members)
		if pol != nil && len(joined) > 0 {
			go sendOverrides(context.Background(), log, pol, router, joined)
		}
	})
	cl, err := cluster.New(ccfg)
	if err != nil {
		httpLn.Close()
		grpcLn.Close()
		router.Close(context.Background())
		return nil, fmt.Errorf("--gossip: %w", err)
	}
	acfg := api.Config{Checker: router, Stats: store, Registerer: reg, Gatherer: reg, Logger: log,
		Cluster: &clusterStatus{cluster: cl, router: router}}
	if pol != nil {
		acfg.Policy = pol
		acfg.AddOverride = func(ctx context.Context, o policy.Override) (policy.Override, error) {
			return addOverride(ctx, pol, router, o)
		}
	}
	a, err := api.New(acfg)
	if err != nil {
		return nil, err
	}
	n := &node{
		log:    log,
		httpLn: httpLn,
		grpcLn: grpcLn,
		httpServer: &http.Server{
			Handler:           a.Handler(nil),
			ReadHeaderTimeout: 5 * time.Second,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		},
		fresh: map[net.Conn]struct{}{},
		grpcServer: grpc.NewServer(grpc.NumStreamWorkers(streamWorkers),
			// Fixed flow-control windows: no BDP pings on every connection.
			grpc.StaticStreamWindowSize(forward.StreamWindow), grpc.StaticConnWindowSize(forward.ConnWindow)),
		store:   store,
		router:  router,
		cluster: cl,
		policy:  pol,
		audit:   audit,
		served:  make(chan error, 2),
	}
	bgCtx, stopBg := context.WithCancel(context.Background())
	n.stopBg = stopBg
	if pol != nil {
		n.bg.Go(func() { runPolicy(bgCtx, log, pol) })
	}
	n.httpServer.ConnState = n.trackConn
	a.RegisterGRPC(n.grpcServer)
	router.RegisterPeer(n.grpcServer)
	go func() { n.served <- n.httpServer.Serve(httpLn) }()
	go func() { n.served <- n.grpcServer.Serve(grpcLn) }()
	log.Info("node started", "name", cfg.name, "http", httpLn.Addr().String(), "grpc", grpcLn.Addr().String(),
		"gossip", cl.LocalAddr(), "join", cfg.join, "max_keys", store.Capacity())
	return n, nil
}

// Close stops accepting, waits for checks in flight until ctx ends, and
// closes the listeners. It is safe to call more than once; later calls
// return the first call's result.
func (n *node) Close(ctx context.Context) error {
	n.closeOnce.Do(func() { n.closeErr = n.shutdown(ctx) })
	return n.closeErr
}

// streamWorkers is how many goroutines serve gRPC calls, reused from call
// to call. Without them grpc-go starts a goroutine per call, whose stack
// grows (and is copied) on every call: about a tenth of a node's CPU under
// one unary call per check. A call that finds every worker busy (a check
// waiting on its owner holds one) gets a goroutine of its own, as before.
const streamWorkers = 256

// shutdown leaves in order: announce the leave, hand every bucket to its new
// owner (still serving peers, who may fetch state meanwhile), stop the
// public surfaces after the checks in flight, then close the peer
// connections and the gossip.
func (n *node) shutdown(ctx context.Context) error {
	var errs []error
	if err := n.cluster.Leave(ctx); err != nil {
		errs = append(errs, fmt.Errorf("leave: %w", err))
	}
	if err := n.router.Leave(ctx); err != nil {
		errs = append(errs, fmt.Errorf("handoff: %w", err))
	}
	qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	n.router.Quiesce(qctx, 150*time.Millisecond)
	cancel()
	n.log.Info("handed off", "keys", n.store.Len())
	n.router.DrainPeers() // peers end their Check streams, or GracefulStop would wait for them
	grpcDone := make(chan struct{})
	go func() {
		n.grpcServer.GracefulStop()
		close(grpcDone)
	}()
	httpDone := make(chan error, 1)
	go func() { httpDone <- n.httpServer.Shutdown(ctx) }()
	tick := time.NewTicker(50 * time.Millisecond)
	for waiting := true; waiting; {
		n.closeFresh()
		select {
		case err := <-httpDone:
			if err != nil {
				errs = append(errs, fmt.Errorf("http shutdown: %w", err))
			}
			waiting = false
		case <-tick.C:
		}
	}
	tick.Stop()
	select {
	case <-grpcDone:
	case <-ctx.Done():
		n.grpcServer.Stop()
		<-grpcDone
		errs = append(errs, fmt.Errorf("grpc shutdown: %w", ctx.Err()))
	}
	for range 2 {
		if err := <-n.served; err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, grpc.ErrServerStopped) {
			errs = append(errs, err)
		}
	}
	if err := n.router.Close(ctx); err != nil {
		errs = append(errs, err)
	}
	if err := n.cluster.Close(ctx); err != nil {
		errs = append(errs, fmt.Errorf("cluster: %w", err))
	}
	n.stopBg()
	n.bg.Wait()
	if n.audit != nil {
		if err := n.audit.Close(); err != nil {
			errs = append(errs, fmt.Errorf("audit log: %w", err))
		}
	}
	err := errors.Join(errs...)
	if err == nil {
		n.log.Info("node stopped")
	}
	return err
}

func hostOf(addr string) string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return host
}

// clusterStatus serves /v1/cluster and /v1/owner from the gossip view and
// the router's ring.
type clusterStatus struct {
	cluster *cluster.Cluster
	router  *forward.Router
}

func (s *clusterStatus) Owner(key string) (string, uint64) { return s.router.Owner(key) }

func (s *clusterStatus) Status(ctx context.Context) api.ClusterStatus {
	keys := s.router.PeerKeys(ctx)
	onRing := map[string]bool{}
	for _, name := range s.router.RingMembers() {
		onRing[name] = true
	}
	st := api.ClusterStatus{Self: s.router.Self(), RingVersion: s.router.RingVersion()}
	for _, m := range s.cluster.Members() {
		k, ok := keys[m.Name]
		if !ok {
			k = -1
		}
		st.Members = append(st.Members, api.ClusterMember{Name: m.Name, GRPC: m.GRPCAddr, Gossip: m.GossipAddr,
			State: string(m.State), OnRing: onRing[m.Name], Keys: k})
	}
	return st
}

// trackConn remembers HTTP connections that have not sent a request yet.
// http.Server.Shutdown waits up to 5 s for such a connection, which a
// client's pool may hold open without using; shutdown closes them at once,
// since no check is in flight on them.
func (n *node) trackConn(c net.Conn, st http.ConnState) {
	n.freshMu.Lock()
	defer n.freshMu.Unlock()
	if st == http.StateNew {
		n.fresh[c] = struct{}{}
	} else {
		delete(n.fresh, c)
	}
}

func (n *node) closeFresh() {
	n.freshMu.Lock()
	defer n.freshMu.Unlock()
	for c := range n.fresh {
		c.Close()
		delete(n.fresh, c)
	}
}

// servePprof serves net/http/pprof's handlers on their own listener.
func servePprof(addr string, log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	log.Info("pprof listening", "addr", ln.Addr().String())
	return func() { srv.Close() }, nil
}

func closeAudit(c io.Closer) {
	if c != nil {
		c.Close()
	}
}
