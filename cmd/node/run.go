package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"

	"github.com/ringlimit/ringlimit/api"
	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/clock"
	"github.com/ringlimit/ringlimit/cluster"
	"github.com/ringlimit/ringlimit/forward"
	"github.com/ringlimit/ringlimit/internal/grpcmetrics"
	"github.com/ringlimit/ringlimit/internal/reload"
	"github.com/ringlimit/ringlimit/peer"
	"github.com/ringlimit/ringlimit/policy"
	"github.com/ringlimit/ringlimit/ring"
	"github.com/ringlimit/ringlimit/rls"
	"github.com/ringlimit/ringlimit/ui"
)

// run starts a node and serves until ctx is cancelled, then shuts down
// gracefully. It returns nil after a clean shutdown. tune, when not nil,
// tunes the process's garbage collector for --gc-headroom while the node
// runs and returns the function that stops it: main passes tuneGC; tests,
// which run several nodes in one process, pass nil.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer, tune func(headroom uint64) (stop func())) error {
	if ok, err := subcommand(args, getenv, os.Stdout, stderr); ok {
		return err
	}
	cfg, err := parseConfig(args, getenv, os.Stdout)
	if err != nil {
		return &exitError{code: 2, err: err} // a usage error; --help is none, and main exits 0
	}
	if cfg.newGossipKey {
		return printNewKey(os.Stdout)
	}
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: cfg.logLevel}))
	if tune != nil {
		defer tune(uint64(cfg.gcHeadroomMiB) << 20)()
	}
	tr, err := newTracing(ctx, getenv, cfg.name, os.Stdout)
	if err != nil {
		return err
	}
	if tr.tp != nil {
		cfg.tracer = tr.tp
		log.Info("tracing on", "exporters", tr.exporters)
		defer func() { // after the node closed: its last spans are flushed
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := tr.shutdown(sctx); err != nil {
				log.Warn("tracing shutdown", "err", err)
			}
		}()
	}
	n, err := startNode(cfg, log)
	if err != nil {
		return err
	}
	if cfg.pprofAddr != "" {
		stop, _, err := servePprof(cfg.pprofAddr, log, n.admin)
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
	clock      clock.Clock // the node's one clock, given to every package
	httpLn     net.Listener
	grpcLn     net.Listener
	peerLn     net.Listener
	httpServer *http.Server
	grpcServer *grpc.Server
	peerGRPC   *grpc.Server // serves the peer service on peerLn
	certs      certs
	known      atomic.Pointer[map[string]bool] // members gossip knows, in any state
	store      *bucket.Store
	router     *forward.Router
	peers      *peer.Pool
	peerServer *peer.Server
	cluster    *cluster.Cluster
	policy     *policy.Manager // nil without --policy
	rls        *rls.Manager    // nil without --rls-config
	admin      *api.Tokens     // never Set without --admin-token-file: admin endpoints answer 403
	stopBg     context.CancelFunc
	bg         sync.WaitGroup
	audit      io.Closer  // nil without --policy
	served     chan error // one value per server when it stops

	readiness readiness
	health    *health.Server // grpc.health.v1 on the public gRPC port
	drainFor  time.Duration  // --drain-delay

	freshMu   sync.Mutex
	fresh     map[net.Conn]struct{} // HTTP connections that have not sent a request yet
	closeOnce sync.Once
	closeErr  error
}

// The ring is what forward routes by.
var _ forward.Owners = (*ring.Ring)(nil)

// startSteps names the steps of startNode in order, for config.failAt.
var startSteps = []string{"store", "metrics", "admin", "tls", "policy", "rls", "http", "grpc", "peer", "peers", "router", "cluster", "api", "serve"}

// startNode binds the listeners (so that a bad address fails at once) and
// starts serving in the background. When a step fails, everything the
// earlier steps opened is released, last opened first.
func startNode(cfg config, log *slog.Logger) (_ *node, err error) {
	var undo []func()
	defer func() {
		if err != nil {
			for i := len(undo) - 1; i >= 0; i-- {
				undo[i]()
			}
		}
	}()
	step := func(name string) error {
		if cfg.failAt == name {
			return fmt.Errorf("%s: failure injected by a test", name)
		}
		return nil
	}
	n := &node{log: log, clock: clock.System(), fresh: map[net.Conn]struct{}{}, served: make(chan error, 3), drainFor: cfg.drainDelay}
	start := time.Now() // the uptime peers and the status page see

	shards := bucket.DefaultShards
	for shards > 1 && (cfg.maxKeys < shards || int64(cfg.maxMemory) < int64(shards)*minShardMemory) {
		shards /= 2
	}
	if err := step("store"); err != nil {
		return nil, err
	}
	if n.store, err = bucket.NewStore(bucket.StoreConfig{MaxKeys: cfg.maxKeys, MaxMemory: int64(cfg.maxMemory), MaxKeyBytes: cfg.maxKeyBytes, Shards: shards}); err != nil {
		return nil, err
	}
	if err := step("metrics"); err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if err := registerBuildInfo(reg); err != nil {
		return nil, err
	}
	peerMetrics, err := peer.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	grpcMetrics, err := grpcmetrics.New(reg)
	if err != nil {
		return nil, err
	}

	if err := step("admin"); err != nil {
		return nil, err
	}
	n.admin = &api.Tokens{}
	var adminFile *tokenFile
	if cfg.adminTokenFile != "" {
		adminFile = &tokenFile{path: cfg.adminTokenFile, tokens: n.admin, log: log}
		if err := adminFile.load(); err != nil {
			return nil, fmt.Errorf("--admin-token-file: %w", err)
		}
	} else {
		log.Warn("no --admin-token-file: POST and DELETE /v1/overrides and pprof answer 403")
	}

	if err := step("tls"); err != nil {
		return nil, err
	}
	if n.certs, err = loadCerts(cfg); err != nil {
		return nil, err
	}
	if err := n.certs.registerSecurity(reg, cfg); err != nil {
		return nil, err
	}
	if cfg.exposed() {
		log.Warn("INSECURE: --insecure given, and a peer or gossip address other machines reach runs without mutual TLS or a gossip key: anyone who reaches it can read and change every limit",
			"peer", cfg.peerAddr, "gossip", cfg.gossipAddr, "peer_tls", cfg.peerTLS(), "gossip_encrypted", len(cfg.gossipKeys) > 0)
	}

	if err := step("policy"); err != nil {
		return nil, err
	}
	if cfg.policyPath != "" {
		var audit io.WriteCloser = nopCloser{slogWriter{log}}
		if cfg.auditPath != "" {
			if audit, err = os.OpenFile(cfg.auditPath, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err != nil {
				return nil, fmt.Errorf("--audit-log: %w", err)
			}
		}
		undo = append(undo, func() { audit.Close() })
		n.audit = audit
		if n.policy, err = policy.NewManager(policy.ManagerConfig{Path: cfg.policyPath, AuditLog: audit, Logger: log, Registerer: reg, Clock: n.clock}); err != nil {
			return nil, fmt.Errorf("--policy: %w", err)
		}
	}

	if err := step("rls"); err != nil {
		return nil, err
	}
	if cfg.rlsPath != "" {
		if n.rls, err = rls.NewManager(rls.ManagerConfig{Path: cfg.rlsPath, Logger: log, Registerer: reg, Clock: n.clock}); err != nil {
			return nil, fmt.Errorf("--rls-config: %w", err)
		}
	}

	if err := step("http"); err != nil {
		return nil, err
	}
	if n.httpLn, err = net.Listen("tcp", cfg.httpAddr); err != nil {
		return nil, fmt.Errorf("--http: %w", err)
	}
	undo = append(undo, func() { n.httpLn.Close() })
	if err := step("grpc"); err != nil {
		return nil, err
	}
	if n.grpcLn, err = net.Listen("tcp", cfg.grpcAddr); err != nil {
		return nil, fmt.Errorf("--grpc: %w", err)
	}
	undo = append(undo, func() { n.grpcLn.Close() })
	grpcAddr := n.grpcLn.Addr().String()
	if err := step("peer"); err != nil {
		return nil, err
	}
	if n.peerLn, err = net.Listen("tcp", cfg.peerAddr); err != nil {
		return nil, fmt.Errorf("--peer: %w", err)
	}
	undo = append(undo, func() { n.peerLn.Close() })
	if err := n.limitConns(cfg, reg, log); err != nil {
		return nil, err
	}
	adv, err := cfg.advertiseAll(n.httpLn.Addr().String(), grpcAddr, n.peerLn.Addr().String())
	if err != nil {
		return nil, err
	}
	grpcAddr, peerAddr := adv.grpc, adv.peer

	if err := step("peers"); err != nil {
		return nil, err
	}
	if n.peers, err = peer.NewPool(peer.Config{Self: cfg.name, Clock: n.clock, Logger: log, Metrics: peerMetrics, TLS: n.certs.peerCerts(),
		PropagateTrace: cfg.tracer != nil, Timeout: cfg.peerTimeout}); err != nil {
		return nil, err
	}
	undo = append(undo, func() { n.peers.Close(context.Background()) })
	if err := step("router"); err != nil {
		return nil, err
	}
	ringCfg := ring.DefaultConfig()
	n.router, err = forward.New(forward.Config{Self: cfg.name, SelfAddr: grpcAddr, Store: n.store, Peers: n.peers,
		NewRing:     func(members []string) (forward.Owners, error) { return ring.New(ringCfg, members) },
		Replication: forward.ReplicationConfig{Factor: cfg.replication, Off: cfg.replication == 0, MaxLoss: cmp.Or(cfg.maxLoss, -1)},
		ClusterSize: cfg.clusterSize, Joining: len(cfg.join) > 0, PeerTimeout: cfg.peerTimeout,
		Clock: n.clock, Logger: log, Registerer: reg, TracerProvider: cfg.tracer})
	if err != nil {
		return nil, err
	}
	undo = append(undo, func() { n.router.Close(context.Background()) })
	n.known.Store(&map[string]bool{})

	if err := step("cluster"); err != nil {
		return nil, err
	}
	ccfg := cluster.DefaultLANConfig()
	if isLoopback(hostOf(cmp.Or(adv.gossip, cfg.gossipAddr))) {
		ccfg = cluster.DefaultLocalConfig()
	}
	if cfg.gossipTimings != nil {
		cfg.gossipTimings(&ccfg)
	}
	ccfg.Name = cfg.name
	ccfg.BindAddr = cfg.gossipAddr
	ccfg.AdvertiseAddr = adv.gossip
	ccfg.PeerAddr = peerAddr
	ccfg.APIAddr = grpcAddr
	ccfg.HTTPAddr = adv.http
	ccfg.Resolver = cfg.dnsResolver()
	ccfg.Seeds = cfg.join
	ccfg.Clock = n.clock
	ccfg.Logger = log
	ccfg.Keys = cfg.gossipKeys
	ccfg.Label = cfg.clusterName
	ccfg.Registerer = reg
	// Alive and suspect members are on the ring; dead ones (not left) are
	// off it but still counted for the quorum; left ones are gone.
	ccfg.Listener = cluster.ListenerFunc(func(all []cluster.Member) {
		members := make([]forward.Member, 0, len(all))
		known := make(map[string]bool, len(all))
		for _, m := range all {
			known[m.Name] = true
			switch m.State {
			case cluster.StateAlive, cluster.StateSuspect:
				members = append(members, forward.Member{Name: m.Name, Addr: m.PeerAddr, APIAddr: m.APIAddr})
			case cluster.StateDead:
				members = append(members, forward.Member{Name: m.Name, Addr: m.PeerAddr, APIAddr: m.APIAddr, Down: true})
			}
		}
		n.known.Store(&known)
		// Readiness first: a ring that is changing must never look
		// settled, not even between the two calls.
		n.readiness.noteMembers(all)
		n.router.SetMembers(members)
	})
	var osync *policy.OverrideSync
	if n.policy != nil {
		osync = policy.NewOverrideSync(n.policy, func(b []byte) { n.cluster.Broadcast(b) })
		ccfg.Messages = osync
	}
	if n.cluster, err = cluster.New(ccfg); err != nil {
		return nil, fmt.Errorf("--gossip: %w", err)
	}
	undo = append(undo, func() { n.cluster.Close(context.Background()) })

	if err := step("api"); err != nil {
		return nil, err
	}
	cs := &clusterStatus{cluster: n.cluster, router: n.router}
	acfg := api.Config{Checker: n.router, Stats: n.store, Registerer: reg, Gatherer: reg, Logger: log,
		Cluster: cs, CheckTimeout: cfg.checkTimeout, AdminTokens: n.admin, PrivateReads: cfg.privateReads,
		RLSHeaders: cfg.rlsHeaders, RLSShadowMode: cfg.rlsShadowMode, RLSStatKeys: cfg.rlsStatKeys, RLSNearLimitRatio: cfg.rlsNearRatio, TrustedProxies: cfg.trustedProxies, CORSOrigins: cfg.corsOrigins, Ready: n.ready, TracerProvider: cfg.tracer, Self: cfg.name,
		DisableInlineLimits: !cfg.inlineLimits}
	if n.rls != nil {
		acfg.RLS = rlsConfig(n.rls)
	}
	if n.policy != nil {
		acfg.Policy = n.policy
		acfg.AddOverride = func(_ context.Context, o policy.Override) (policy.Override, error) { return osync.Add(o) }
		acfg.RevokeOverride = func(_ context.Context, id, actor string) (policy.Override, error) { return osync.Revoke(id, actor) }
	}
	a, err := api.New(acfg)
	if err != nil {
		return nil, err
	}
	pcfg := peer.ServerConfig{Self: cfg.name, Handler: n.router, Clock: n.clock, Metrics: peerMetrics, TracerProvider: cfg.tracer,
		Report: reportStats(a, cs, n.policy, n.rls, start)}
	if n.certs.peer != nil {
		pcfg.Known = func(name string) bool { return (*n.known.Load())[name] }
		pcfg.Verify = n.certs.peer
	}
	if n.peerServer, err = peer.NewServer(pcfg); err != nil {
		return nil, err
	}
	page, err := ui.New(ui.Config{Source: (&statusPage{cs: cs, peers: n.peers, server: n.peerServer, policy: n.policy}).snapshot,
		AdminTokens: n.admin, PrivateReads: cfg.privateReads, Clock: n.clock})
	if err != nil {
		return nil, err
	}
	if err := step("serve"); err != nil {
		return nil, err
	}
	n.newServers(cfg, a, page, grpcMetrics, log)
	bgCtx, stopBg := context.WithCancel(context.Background())
	n.stopBg = stopBg
	reloads, err := n.reloaders(cfg, log, reg, adminFile, n.peerCertsChanged(bgCtx, log, &n.bg))
	if err != nil {
		stopBg()
		return nil, err
	}
	if n.policy != nil {
		n.bg.Go(func() { runPolicy(bgCtx, n.policy) })
	}
	n.bg.Go(func() { reload.Run(bgCtx, reloads...) })
	n.bg.Go(func() { n.runHealth(bgCtx, n.health, healthServices(n.rls != nil)) })
	n.serve()
	log.Info("node started", "name", cfg.name, "version", nodeVersion(), "http", n.httpLn.Addr().String(), "grpc", n.grpcLn.Addr().String(),
		"peer", n.peerLn.Addr().String(), "advertise_http", adv.http, "advertise_grpc", grpcAddr, "advertise_peer", peerAddr,
		"peer_tls", n.certs.peer != nil, "api_tls", n.certs.api != nil,
		"gossip", n.cluster.LocalAddr(), "join", cfg.join, "max_keys", n.store.Capacity(), "max_memory", n.store.MaxMemory(),
		"gossip_keys", fingerprints(cfg.gossipKeys), "cluster_name", cfg.clusterName)
	return n, nil
}

// Close stops accepting, waits for checks in flight until ctx ends, and
// closes the listeners. It is safe to call more than once; later calls
// return the first call's result.
func (n *node) Close(ctx context.Context) error {
	n.closeOnce.Do(func() { n.closeErr = n.shutdown(ctx) })
	return n.closeErr
}
