package node

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

// Node is a running node: its listeners and servers. Its methods are safe
// for concurrent use.
type Node struct {
	log        *slog.Logger
	clock      clock.Clock // the node's one clock (Config.Clock), given to every package
	name       string
	version    string // the build, in logs and peer stats
	adv        advertisedAddrs
	httpLn     net.Listener
	grpcLn     net.Listener
	peerLn     net.Listener
	httpServer *http.Server
	grpcServer *grpc.Server
	api        *api.API     // its Batches streams drain before the gRPC server stops
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
	state      *stateSaver // nil without a DataDir
	bg         sync.WaitGroup
	audit      io.Closer  // nil without --policy
	served     chan error // one value per server when it stops

	readiness readiness
	health    *health.Server // grpc.health.v1 on the public gRPC port
	drainFor  time.Duration  // --drain-delay

	quiesceTimeout, quiesceIdle time.Duration // Config's; zero: 2s, 150ms

	freshMu   sync.Mutex
	fresh     map[net.Conn]struct{} // HTTP connections that have not sent a request yet
	closeOnce sync.Once
	closeErr  error
}

// The ring is what forward routes by.
var (
	_ forward.Owners      = (*ring.Ring)(nil)
	_ forward.Settler     = (*peer.Pool)(nil)
	_ peer.Settler        = (*forward.Router)(nil)
	_ forward.LeaseSender = (*peer.Pool)(nil)
	_ peer.Leaser         = (*forward.Router)(nil)
	_ forward.Reporter    = (*peer.Pool)(nil)
	_ peer.Reporter       = (*forward.Router)(nil)
)

// startSteps names the steps of startNode in order, for config.failAt.
var startSteps = []string{"store", "metrics", "admin", "tls", "policy", "rls", "http", "grpc", "peer", "peers", "router", "cluster", "api", "serve"}

// Start validates cfg (Config.Validate), binds the listeners (so that a bad
// address fails at once) and starts serving in the background: the store,
// the metrics, the admin tokens, TLS, the policy and RLS, the HTTP, gRPC
// and peer listeners, the peer pool, the router, the gossip cluster and the
// APIs, in that order. When a step fails, everything the earlier steps
// opened is released, last opened first, and Start returns the error. ctx
// bounds only the start (resolving the gossip advertise address); the node
// runs until Close.
func Start(ctx context.Context, cfg Config) (_ *Node, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.System()
	}
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
	n := &Node{log: log, name: cfg.Name, clock: cfg.Clock, fresh: map[net.Conn]struct{}{}, served: make(chan error, 3), drainFor: cfg.DrainDelay,
		quiesceTimeout: cfg.QuiesceTimeout, quiesceIdle: cfg.QuiesceIdle}
	start := cfg.Clock.Now() // the uptime peers and the status page see
	n.readiness.clock = cfg.Clock

	shards := bucket.DefaultShards
	for shards > 1 && (cfg.MaxKeys < shards || int64(cfg.MaxMemory) < int64(shards)*minShardMemory) {
		shards /= 2
	}
	if err := step("store"); err != nil {
		return nil, err
	}
	if n.store, err = bucket.NewStore(bucket.StoreConfig{MaxKeys: cfg.MaxKeys, MaxMemory: int64(cfg.MaxMemory), MaxKeyBytes: cfg.MaxKeyBytes, Shards: shards}); err != nil {
		return nil, err
	}
	if err := step("metrics"); err != nil {
		return nil, err
	}
	reg, gather := registries(cfg)
	n.version = buildVersion(cfg)
	if err := registerBuildInfo(reg, cfg); err != nil {
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
	if cfg.AdminTokenFile != "" {
		adminFile = &tokenFile{path: cfg.AdminTokenFile, tokens: n.admin, log: log}
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
	if cfg.Exposed() {
		log.Warn("INSECURE: --insecure given, and a peer or gossip address other machines reach runs without mutual TLS or a gossip key: anyone who reaches it can read and change every limit",
			"peer", cfg.PeerAddr, "gossip", cfg.GossipAddr, "peer_tls", cfg.peerTLS(), "gossip_encrypted", len(cfg.GossipKeys) > 0)
	}

	if err := step("policy"); err != nil {
		return nil, err
	}
	if cfg.PolicyPath != "" {
		var audit io.WriteCloser = nopCloser{slogWriter{log}}
		if cfg.AuditPath != "" {
			if audit, err = os.OpenFile(cfg.AuditPath, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err != nil {
				return nil, fmt.Errorf("--audit-log: %w", err)
			}
		}
		undo = append(undo, func() { audit.Close() })
		n.audit = audit
		if n.policy, err = policy.NewManager(policy.ManagerConfig{Path: cfg.PolicyPath, AuditLog: audit, Logger: log, Registerer: reg, Clock: cfg.Clock}); err != nil {
			return nil, fmt.Errorf("--policy: %w", err)
		}
	}

	if err := step("rls"); err != nil {
		return nil, err
	}
	if cfg.RLSPath != "" {
		if n.rls, err = rls.NewManager(rls.ManagerConfig{Path: cfg.RLSPath, Logger: log, Registerer: reg, Clock: cfg.Clock}); err != nil {
			return nil, fmt.Errorf("--rls-config: %w", err)
		}
	}

	if err := step("http"); err != nil {
		return nil, err
	}
	if n.httpLn, err = listen(cfg.HTTPListener, cfg.HTTPAddr); err != nil {
		return nil, fmt.Errorf("--http: %w", err)
	}
	undo = append(undo, func() { n.httpLn.Close() })
	if err := step("grpc"); err != nil {
		return nil, err
	}
	if n.grpcLn, err = listen(cfg.GRPCListener, cfg.GRPCAddr); err != nil {
		return nil, fmt.Errorf("--grpc: %w", err)
	}
	undo = append(undo, func() { n.grpcLn.Close() })
	grpcAddr := n.grpcLn.Addr().String()
	if err := step("peer"); err != nil {
		return nil, err
	}
	if n.peerLn, err = listen(cfg.PeerListener, cfg.PeerAddr); err != nil {
		return nil, fmt.Errorf("--peer: %w", err)
	}
	undo = append(undo, func() { n.peerLn.Close() })
	if err := n.limitConns(cfg, reg, log); err != nil {
		return nil, err
	}
	// A listener given ready is reached at its own address (a test's
	// network, or a socket a supervisor bound for the node).
	for _, l := range []struct {
		given net.Listener
		ln    net.Listener
		adv   *string
	}{{cfg.HTTPListener, n.httpLn, &cfg.AdvertiseHTTP}, {cfg.GRPCListener, n.grpcLn, &cfg.AdvertiseGRPC}, {cfg.PeerListener, n.peerLn, &cfg.AdvertisePeer}} {
		if l.given != nil && *l.adv == "" {
			*l.adv = l.ln.Addr().String()
		}
	}
	adv, err := cfg.advertiseAll(ctx, n.httpLn.Addr().String(), grpcAddr, n.peerLn.Addr().String())
	if err != nil {
		return nil, err
	}
	grpcAddr, peerAddr := adv.grpc, adv.peer
	n.adv = adv

	if err := step("peers"); err != nil {
		return nil, err
	}
	if n.peers, err = peer.NewPool(peer.Config{Self: cfg.Name, Logger: log, Metrics: peerMetrics, TLS: n.certs.peerCerts(),
		PropagateTrace: cfg.Tracer != nil, Clock: cfg.Clock, DialOptions: cfg.PeerDialOptions, Timeout: cfg.PeerTimeout, Grace: cfg.Grace}); err != nil {
		return nil, err
	}
	undo = append(undo, func() { n.peers.Close(context.Background()) })
	if err := step("router"); err != nil {
		return nil, err
	}
	ringCfg := ring.DefaultConfig()
	n.router, err = forward.New(forward.Config{Self: cfg.Name, SelfAddr: grpcAddr, Store: n.store, Peers: n.peers,
		NewRing:     func(members []string) (forward.Owners, error) { return ring.New(ringCfg, members) },
		Replication: forward.ReplicationConfig{Factor: cfg.Replication, Off: cfg.Replication == 0, MaxLoss: cmp.Or(cfg.ReplicationMaxLoss, -1)},
		ClusterSize: cfg.ClusterSize, Joining: len(cfg.Join) > 0, PeerTimeout: cfg.PeerTimeout, Grace: cfg.Grace,
		Logger: log, Registerer: reg, TracerProvider: cfg.Tracer, Clock: cfg.Clock, Settler: n.peers,
		Leaser: n.peers, Reporter: n.peers})
	if err != nil {
		return nil, err
	}
	undo = append(undo, func() { n.router.Close(context.Background()) })
	n.known.Store(&map[string]bool{})
	if cfg.DataDir != "" {
		if n.state, err = startState(&cfg, n.router, log, reg); err != nil {
			return nil, err
		}
	}

	if err := step("cluster"); err != nil {
		return nil, err
	}
	ccfg := cluster.DefaultLANConfig()
	if isLoopback(hostOf(cmp.Or(adv.gossip, cfg.GossipAddr))) {
		ccfg = cluster.DefaultLocalConfig()
	}
	if cfg.ClusterTuning != nil {
		cfg.ClusterTuning(&ccfg)
	}
	ccfg.Name = cfg.Name
	ccfg.BindAddr = cfg.GossipAddr
	ccfg.AdvertiseAddr = adv.gossip
	ccfg.PeerAddr = peerAddr
	ccfg.APIAddr = grpcAddr
	ccfg.HTTPAddr = adv.http
	ccfg.Resolver = cfg.dnsResolver()
	ccfg.Seeds = cfg.Join
	ccfg.Logger = log
	ccfg.Keys = cfg.GossipKeys
	ccfg.Label = cfg.ClusterName
	ccfg.Registerer = reg
	ccfg.Clock = cfg.Clock
	if cfg.GossipTransport != nil {
		ccfg.Transport = cfg.GossipTransport
	}
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
	cs := &clusterStatus{cluster: n.cluster, router: n.router, peers: n.peers, store: n.store}
	acfg := api.Config{Checker: n.router, Settler: n.router, Leaser: n.router, Reporter: n.router, Stats: n.store, Registerer: reg, Gatherer: gather, Logger: log,
		Cluster: cs, CheckTimeout: cfg.CheckTimeout, AdminTokens: n.admin, PrivateReads: cfg.PrivateReads, BatchInterceptor: batchInterceptor(cfg, grpcMetrics), ReuseBatchResponses: len(cfg.GRPCUnaryInterceptors) == 0,
		RLSHeaders: cfg.RLSHeaders, RLSShadowMode: cfg.RLSShadowMode, RLSStatKeys: cfg.RLSStatKeys, RLSNearLimitRatio: cfg.RLSNearLimitRatio, TrustedProxies: cfg.TrustedProxies, CORSOrigins: cfg.CORSOrigins, Ready: n.ready, TracerProvider: cfg.Tracer, Self: cfg.Name,
		DisableInlineLimits: cfg.DisableInlineLimits, Reset: n.router.Reset, Audit: func(actor, action, what string) {
			log.Info("audit", "actor", actor, "action", action, "what", what)
		}}
	if n.rls != nil {
		acfg.RLS = rlsConfig(n.rls)
	}
	if n.policy != nil {
		acfg.Policy = n.policy
		acfg.CountDryRun = n.policy.CountDryRun
		acfg.AddOverride = func(_ context.Context, o policy.Override) (policy.Override, error) { return osync.Add(o) }
		acfg.RevokeOverride = func(_ context.Context, id, actor string) (policy.Override, error) { return osync.Revoke(id, actor) }
		acfg.Audit = n.policy.Audit // the audit log (--audit-log) the override changes go to
	}
	a, err := api.New(acfg)
	if err != nil {
		return nil, err
	}
	pcfg := peer.ServerConfig{Self: cfg.Name, Handler: n.router, Stats: n.router, Clock: cfg.Clock, Metrics: peerMetrics, TracerProvider: cfg.Tracer,
		Report: reportStats(a, cs, n.policy, n.rls, cfg.Clock, start, n.version), Settler: n.router,
		Leaser: n.router, Reporter: n.router, Pool: n.peers}
	if n.certs.peer != nil {
		pcfg.Known = func(name string) bool { return (*n.known.Load())[name] }
		pcfg.Verify = n.certs.peer
	}
	if n.peerServer, err = peer.NewServer(pcfg); err != nil {
		return nil, err
	}
	page, err := ui.New(ui.Config{Source: (&statusPage{cs: cs, peers: n.peers, server: n.peerServer, policy: n.policy}).snapshot,
		AdminTokens: n.admin, PrivateReads: cfg.PrivateReads, Clock: cfg.Clock})
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
		n.bg.Go(func() { runPolicy(bgCtx, n.policy, n.clock) })
	}
	n.bg.Go(func() { reload.Run(bgCtx, reloads...) })
	n.bg.Go(func() { n.runHealth(bgCtx, n.health, healthServices(n.rls != nil)) })
	n.state.loop(bgCtx, &n.bg, cmp.Or(cfg.SnapshotInterval, time.Second)) // none without a DataDir
	n.serve()
	log.Info("node started", "name", cfg.Name, "version", n.version, "http", n.httpLn.Addr().String(), "grpc", n.grpcLn.Addr().String(),
		"peer", n.peerLn.Addr().String(), "advertise_http", adv.http, "advertise_grpc", grpcAddr, "advertise_peer", peerAddr,
		"peer_tls", n.certs.peer != nil, "api_tls", n.certs.api != nil,
		"gossip", n.cluster.LocalAddr(), "join", cfg.Join, "max_keys", n.store.Capacity(), "max_memory", n.store.MaxMemory(),
		"gossip_keys", fingerprints(cfg.GossipKeys), "cluster_name", cfg.ClusterName)
	return n, nil
}
