package node

import (
	"io"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/ringlimit/ringlimit/api"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/cluster"
	"github.com/ringlimit/ringlimit/forward"
	"github.com/ringlimit/ringlimit/internal/buildinfo"
	"github.com/ringlimit/ringlimit/policy"
)

// Name is the node's name (Config.Name).
func (n *Node) Name() string { return n.name }

// HTTPAddr, GRPCAddr and PeerAddr are the addresses the listeners are bound
// to: with port 0 configured, the port picked.
func (n *Node) HTTPAddr() string { return n.httpLn.Addr().String() }

// GRPCAddr is the public gRPC listener's bound address.
func (n *Node) GRPCAddr() string { return n.grpcLn.Addr().String() }

// PeerAddr is the peer listener's bound address.
func (n *Node) PeerAddr() string { return n.peerLn.Addr().String() }

// GossipAddr is the address gossip is reached at (the seed other nodes
// join).
func (n *Node) GossipAddr() string { return n.cluster.LocalAddr() }

// Advertised are the addresses other machines reach the listeners at.
func (n *Node) Advertised() Advertised {
	return Advertised{HTTP: n.adv.http, GRPC: n.adv.grpc, Peer: n.adv.peer, Gossip: n.GossipAddr()}
}

// Ready is nil when the node should get traffic (joined, on its own ring,
// not in a minority, the ring settled), else why not. Once ready, a node
// stays so until Close starts.
func (n *Node) Ready() error { return n.ready() }

// Members is the cluster as gossip sees it, this node included.
func (n *Node) Members() []cluster.Member { return n.cluster.Members() }

// Cluster is the node's gossip membership.
func (n *Node) Cluster() *cluster.Cluster { return n.cluster }

// Router routes the node's checks: the local store or the owner. Programs
// that embed a node may check through it without a network hop.
func (n *Node) Router() *forward.Router { return n.router }

// Store is the node's local bucket store.
func (n *Node) Store() *bucket.Store { return n.store }

// Policy is the node's policy manager; nil without Config.PolicyPath.
func (n *Node) Policy() *policy.Manager { return n.policy }

// buildVersion is the build's version from cfg, or from the binary's
// build information.
func buildVersion(cfg Config) string { v, _, _ := buildinfo.Read(cfg.Version, cfg.Commit); return v }

// registerBuildInfo exports ringlimit_build_info{version,commit,go_version} 1.
func registerBuildInfo(reg prometheus.Registerer, cfg Config) error {
	v, rev, goVersion := buildinfo.Read(cfg.Version, cfg.Commit)
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ringlimit_build_info",
		Help: "Always 1; the labels say which build this node runs."}, []string{"version", "commit", "go_version"})
	g.WithLabelValues(v, rev, goVersion).Set(1)
	return reg.Register(g)
}

// AdminTokens are the admin bearer tokens in force (Config.AdminTokenFile;
// none without it).
func (n *Node) AdminTokens() *api.Tokens { return n.admin }

// ReadKeyFile reads a gossip key file: one base64 key (16, 24 or 32 bytes)
// a line, the first the primary; blank lines and # comments skipped.
func ReadKeyFile(path string) ([][]byte, error) { return readKeyFile(path) }

// PrintNewKey writes a new random gossip key (32 bytes, base64) and a
// newline to w: a line for a gossip key file.
func PrintNewKey(w io.Writer) error { return printNewKey(w) }

// ServePprof serves net/http/pprof's handlers on their own listener at
// addr, to requests with one of admin's tokens, and returns the function
// that stops it and the address it listens on.
func ServePprof(addr string, log *slog.Logger, admin *api.Tokens) (stop func(), bound string, err error) {
	return servePprof(addr, log, admin)
}

// StopBackground stops the node's background work and waits for it: the
// policy and RLS file watches and their SIGHUP handling, the key, token and
// certificate file rotation, the gRPC health updates. The node keeps
// serving with what it loaded. Close does it too; a test calls it first to
// reload by hand without a watch racing it.
func (n *Node) StopBackground() {
	n.stopBg()
	n.bg.Wait()
}

// registries returns where the node registers its metrics and what
// /metrics serves: Config.Registerer and Config.Gatherer; without a
// Registerer a registry of its own with the Go and process collectors;
// without a Gatherer the Registerer when it gathers, else nothing.
func registries(cfg Config) (prometheus.Registerer, prometheus.Gatherer) {
	reg, gather := cfg.Registerer, cfg.Gatherer
	if reg == nil {
		own := prometheus.NewRegistry()
		own.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		reg = own
		if gather == nil {
			gather = own
		}
	}
	if gather == nil {
		if g, ok := reg.(prometheus.Gatherer); ok {
			gather = g
		} else {
			gather = prometheus.Gatherers{}
		}
	}
	return reg, gather
}
