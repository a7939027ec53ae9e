package node

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"

	"github.com/ringlimit/ringlimit/api"
	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/clock"
	"github.com/ringlimit/ringlimit/cluster"
)

// MinShardMemory is the smallest MaxMemory share a shard of the store
// accepts (bucket: a few keys of the longest length), and so the least
// MaxMemory, in bytes.
const MinShardMemory = 4096

// minShardMemory is MinShardMemory under its old name.
const minShardMemory = MinShardMemory

// Config is everything a node is configured with. Start it from
// DefaultConfig (production) or DefaultLocalConfig (loopback, tests) and
// change what differs: the zero value of several fields is not usable
// (Validate says which). Start does not change the Config it is given.
type Config struct {
	// Name is this node's name, unique in the cluster: the gossip member
	// name, what the ring places, what node certificates must name.
	// DefaultConfig: the machine's host name. Must not be empty.
	Name string

	// HTTPAddr, GRPCAddr and PeerAddr are the host:port the public HTTP
	// API, the public gRPC API and the peer gRPC service (which only other
	// nodes call) listen on; port 0 picks a free port (read it back with
	// HTTPAddr, GRPCAddr, PeerAddr of Node). Ignored for a listener given
	// in HTTPListener, GRPCListener or PeerListener.
	// DefaultConfig: 127.0.0.1:8080, 127.0.0.1:9090, 127.0.0.1:9190.
	HTTPAddr, GRPCAddr, PeerAddr string

	// HTTPListener, GRPCListener and PeerListener, when not nil, are served
	// instead of listening on the addresses above (a test's listener on
	// internal/testonly/faultnet, or a socket handed over by a supervisor). The node
	// closes them. Nil: listen on the address.
	HTTPListener, GRPCListener, PeerListener net.Listener

	// GossipAddr is the gossip bind address (TCP and UDP), host:port; port
	// 0 picks a free port. DefaultConfig: 127.0.0.1:7946.
	GossipAddr string

	// GossipTransport, when not nil, carries gossip instead of sockets
	// bound at GossipAddr (memberlist's transport; e.g. internal/testonly/faultnet).
	GossipTransport memberlist.NodeAwareTransport

	// PeerDialOptions are added to every connection to another node's peer
	// service (e.g. a dialer on internal/testonly/faultnet). Nil: none.
	PeerDialOptions []grpc.DialOption

	// GRPCServerOptions are added to the public gRPC server's options
	// (e.g. a stream interceptor of the program's own, chained after the
	// node's: grpc.ChainStreamInterceptor). Nil: none. A unary interceptor
	// given here does not see the Check and Leases calls that a Batches
	// stream carries (the Go client's way): give it in
	// GRPCUnaryInterceptors.
	GRPCServerOptions []grpc.ServerOption

	// GRPCUnaryInterceptors run, in order, after the node's own, around
	// every unary call of the public gRPC server and around every Check and
	// Leases call a Batches stream carries (info.FullMethod names the
	// call's method, ctx is the stream's, with its metadata). Nil: none.
	GRPCUnaryInterceptors []grpc.UnaryServerInterceptor

	// Join are the seeds to join: gossip addresses host:port or DNS SRV
	// names (_gossip._tcp.NAME), resolved again every few seconds. Until
	// one answers the node owns no key. Empty: the node starts a cluster.
	Join []string

	// Resolver is the DNS server (host:port) that resolves the Join names.
	// Empty: the system's resolver.
	Resolver string

	// AdvertiseHost is the host (IP or DNS name) other machines reach
	// this node at, for every listener bound to an unspecified address
	// (0.0.0.0, ::). Empty: a private IPv4 address of this machine.
	AdvertiseHost string

	// AdvertiseHTTP, AdvertiseGRPC, AdvertisePeer and AdvertiseGossip are
	// the host:port other machines reach each listener at (gossip: an
	// IP:port). Empty: the bound address, with AdvertiseHost for an
	// unspecified host; for a listener given ready, its address.
	AdvertiseHTTP, AdvertiseGRPC, AdvertisePeer, AdvertiseGossip string

	// ClusterName is the label carried by all gossip: nodes with another
	// (or none) are refused. At most cluster.MaxLabelLen bytes. Empty: no
	// label.
	ClusterName string

	// GossipKeys encrypt gossip (16, 24 or 32 bytes each; the first
	// encrypts, all decrypt). Nil: gossip in clear.
	GossipKeys [][]byte

	// GossipKeyFile, when not empty, is re-read every KeyFilePoll and its
	// keys (ReadKeyFile) made the running keyring. Empty: the keyring stays
	// GossipKeys.
	GossipKeyFile string

	// KeyFilePoll is how often GossipKeyFile is re-read. Zero: 2s.
	KeyFilePoll time.Duration

	// TLSCA, TLSCert and TLSKey are PEM files for mutual TLS between nodes
	// (all three or none), re-read every CertPoll; the certificate must
	// name the node (Name). Empty: peer traffic in clear.
	TLSCA, TLSCert, TLSKey string

	// APITLSCert and APITLSKey are the PEM certificate and key served on
	// the public HTTP and gRPC APIs (both or neither), re-read every
	// CertPoll; APITLSClientCA, when set, makes the APIs require a client
	// certificate that chains to it. Empty: the APIs in clear.
	APITLSCert, APITLSKey, APITLSClientCA string

	// CertPoll is how often the certificate files are re-read. Zero: 2s.
	CertPoll time.Duration

	// Insecure allows a non-loopback PeerAddr or GossipAddr without mutual
	// TLS and a gossip key (logged and exported as ringlimit_insecure).
	// False: such a Config does not validate.
	Insecure bool

	// AdminTokenFile is a file of admin bearer tokens, one a line,
	// optionally name:token, re-read when it changes. Empty: the admin
	// endpoints answer 403.
	AdminTokenFile string

	// PrivateReads makes the read-only cluster, policy and metrics
	// endpoints need an admin token too. False: they are open.
	PrivateReads bool

	// TrustedProxies are the gateways whose X-Forwarded-For and X-Real-IP
	// /v1/authz believes. Nil: none.
	TrustedProxies []netip.Prefix

	// CORSOrigins are the origins whose browser pages may call the
	// state-changing endpoints (api.ParseOrigins). Nil: none.
	CORSOrigins []string

	// MaxKeys is the most keys the store holds; MaxMemory the bytes it may
	// count (at least MinShardMemory); MaxKeyBytes the longest key
	// accepted (1 to bucket.MaxKeyLen). DefaultConfig: bucket.DefaultMaxKeys,
	// bucket.DefaultMaxMemory, bucket.MaxKeyLen. Zero is invalid.
	MaxKeys     int
	MaxMemory   int64
	MaxKeyBytes int

	// DisableInlineLimits refuses inline limits (a key and a limit in the
	// request) with INLINE_LIMITS_DISABLED, for nodes that serve only
	// policy and RLS. False: accepted.
	DisableInlineLimits bool

	// PolicyPath is the policy file (YAML), reloaded on change and on
	// SIGHUP. Empty: no policy.
	PolicyPath string

	// AuditPath is the file the audit log is appended to (JSON lines).
	// Empty: audit entries go to Logger. Used only with PolicyPath.
	AuditPath string

	// RLSPath is envoyproxy/ratelimit's configuration (a YAML file or a
	// directory of them), served as Envoy's rate limit service on the
	// gRPC listener, reloaded on change and on SIGHUP. Empty: no RLS.
	RLSPath string

	// RLSHeaders adds RateLimit-* headers to the rate limit service's
	// answers; RLSShadowMode answers every request OK while still spending.
	RLSHeaders, RLSShadowMode bool

	// RLSStatKeys is the most keys with their own per-descriptor RLS
	// series (0: per domain only). DefaultConfig: api.DefaultRLSStatKeys.
	RLSStatKeys int

	// RLSNearLimitRatio is the share of a limit past which hits count as
	// near_limit, above 0 and at most 1. DefaultConfig:
	// api.DefaultRLSNearLimitRatio. Zero is invalid.
	RLSNearLimitRatio float64

	// Replication is how many successors keep a copy of each key's state
	// (0 to 8; 0: off). DefaultConfig: 1.
	Replication int

	// ReplicationMaxLoss is the most tokens of one key a crash of its owner
	// can over-admit (0 to 2^30; 0: no bound in tokens, only the rounds).
	// DefaultConfig: 10.
	ReplicationMaxLoss int64

	// ClusterSize is the member count the quorum is counted against.
	// Zero: the members the node last knew.
	ClusterSize int

	// PeerTimeout is how long the node waits for a key's owner to answer a
	// forwarded check before its failure mode decides. Zero: the peer
	// default (500ms, shared by the pool and the router).
	PeerTimeout time.Duration

	// Grace is how long, after a ring change, a key's new owner asks its
	// previous owner for the key's state first, a node keeps the state of
	// keys it handed off, and a peer that left stays dialable. Shorter
	// lets a ring change finish sooner; longer covers slower handoffs.
	// Zero: the peer default (3s, shared by the pool and the router).
	Grace time.Duration

	// DataDir, when not empty, is the directory of the node's state file:
	// written every SnapshotInterval (default 1s) and when the node stops,
	// and put back when it starts (node/state.go). Empty: state lives in
	// memory only, and a restart starts empty.
	DataDir          string
	SnapshotInterval time.Duration

	// ClusterTuning, when not nil, adjusts the gossip configuration the
	// node chose (LAN timings, or loopback ones when gossip is on a
	// loopback address) just before the cluster starts: for tests and
	// networks whose timings differ. Nil: the node's choice.
	ClusterTuning func(*cluster.Config)

	// CheckTimeout is the server's deadline for one request's checks;
	// positive and below HTTPWriteTimeout. DefaultConfig: 2s.
	CheckTimeout time.Duration

	// HTTPReadTimeout, HTTPWriteTimeout and HTTPIdleTimeout are the HTTP
	// server's (http.Server's fields of the same names); all positive.
	// DefaultConfig: 10s, 10s, 60s.
	HTTPReadTimeout, HTTPWriteTimeout, HTTPIdleTimeout time.Duration

	// MaxConns is the most connections open at once on each public
	// listener. Zero: derived from the open-file limit.
	MaxConns int

	// GRPCIdleTimeout is how long a public gRPC connection with no call in
	// flight stays open; positive. DefaultConfig: 60s.
	GRPCIdleTimeout time.Duration

	// DrainDelay is how long Close keeps serving with readiness off before
	// the node leaves, so that load balancers stop sending it traffic
	// first. Zero: no delay; negative is invalid.
	DrainDelay time.Duration

	// QuiesceTimeout is the most Close waits, after the handoff, for the
	// forwarded checks in flight to end; QuiesceIdle is how long no check
	// may have been forwarded for them to count as ended. Zero: 2s and
	// 150ms.
	QuiesceTimeout, QuiesceIdle time.Duration

	// Version and Commit name the build in logs, peer stats and
	// ringlimit_build_info. Empty: from the binary's build information.
	Version, Commit string

	// Clock is the one time source of every part of the node. Nil:
	// clock.System().
	Clock clock.Clock

	// Logger receives every part's logs. Nil: logs are discarded.
	Logger *slog.Logger

	// Registerer receives every part's metrics; Gatherer is what /metrics
	// serves. Nil Registerer: the node keeps its own registry (with the Go
	// and process collectors), registered nowhere else, and /metrics
	// serves it. Nil Gatherer with a Registerer: the Registerer when it is
	// a Gatherer too, else nothing.
	Registerer prometheus.Registerer
	Gatherer   prometheus.Gatherer

	// Tracer traces the APIs, the forwarded checks and the checks peers
	// send. Nil: tracing off.
	Tracer trace.TracerProvider

	// failAt, set only by tests, makes Start fail at the step of that name
	// (see startSteps), to show that it releases what it opened.
	failAt string
}

// DefaultConfig is a production node's configuration: what ringlimit-node's
// flags default to. Name is the machine's host name.
func DefaultConfig() Config {
	host, _ := os.Hostname()
	return Config{
		Name:               host,
		HTTPAddr:           "127.0.0.1:8080",
		GRPCAddr:           "127.0.0.1:9090",
		PeerAddr:           "127.0.0.1:9190",
		GossipAddr:         "127.0.0.1:7946",
		MaxKeys:            bucket.DefaultMaxKeys,
		MaxMemory:          bucket.DefaultMaxMemory,
		MaxKeyBytes:        bucket.MaxKeyLen,
		RLSStatKeys:        api.DefaultRLSStatKeys,
		RLSNearLimitRatio:  api.DefaultRLSNearLimitRatio,
		Replication:        1,
		ReplicationMaxLoss: 10,
		CheckTimeout:       2 * time.Second,
		HTTPReadTimeout:    10 * time.Second,
		HTTPWriteTimeout:   10 * time.Second,
		HTTPIdleTimeout:    60 * time.Second,
		GRPCIdleTimeout:    60 * time.Second,
		QuiesceTimeout:     2 * time.Second,
		QuiesceIdle:        150 * time.Millisecond,
		SnapshotInterval:   time.Second,
	}
}

// DefaultLocalConfig is DefaultConfig for a node on this machine only: every
// listener on 127.0.0.1 with a free port, certificate and key files
// re-read every 100ms. Gossip on a loopback address gets the cluster's
// local timings (cluster.DefaultLocalConfig). Fit for tests and a laptop.
func DefaultLocalConfig() Config {
	c := DefaultConfig()
	c.HTTPAddr, c.GRPCAddr, c.PeerAddr, c.GossipAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	c.CertPoll, c.KeyFilePoll = 100*time.Millisecond, 100*time.Millisecond
	return c
}

// peerTLS reports whether the peer listener and connections use mutual TLS.
func (c *Config) peerTLS() bool { return c.TLSCert != "" }

// Exposed reports whether a peer or gossip address is not loopback and
// runs in clear (with Insecure).
func (c *Config) Exposed() bool {
	open := !c.peerTLS() || len(c.GossipKeys) == 0
	return open && (!isLoopback(hostOf(c.PeerAddr)) || !isLoopback(hostOf(c.GossipAddr)))
}

// isLoopback reports whether host, an IP address or a name, is this
// machine's loopback: an IP address in 127.0.0.0/8 or ::1, or "localhost".
func isLoopback(host string) bool {
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback()
	}
	return strings.EqualFold(host, "localhost")
}

// listen is ln when given, else a TCP listener on addr.
func listen(ln net.Listener, addr string) (net.Listener, error) {
	if ln != nil {
		return ln, nil
	}
	return net.Listen("tcp", addr)
}

// Advertised are the addresses other machines reach a node's listeners at
// ("" Gossip: the bound address).
type Advertised struct{ HTTP, GRPC, Peer, Gossip string }

// Advertise works out the advertised addresses of listeners bound at
// httpBound, grpcBound and peerBound (and gossip at GossipAddr) from the
// Advertise* fields and AdvertiseHost.
func (c *Config) Advertise(httpBound, grpcBound, peerBound string) (Advertised, error) {
	a, err := c.advertiseAll(context.Background(), httpBound, grpcBound, peerBound)
	return Advertised{HTTP: a.http, GRPC: a.grpc, Peer: a.peer, Gossip: a.gossip}, err
}
