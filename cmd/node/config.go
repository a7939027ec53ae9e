package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"time"

	"github.com/ringlimit/ringlimit/api"
	"github.com/ringlimit/ringlimit/internal/clientip"
	"github.com/ringlimit/ringlimit/node"
)

// config is everything the node reads from flags and the environment: the
// node's Config and what only the process uses.
type config struct {
	node.Config
	logLevel        slog.Level
	shutdownTimeout time.Duration
	pprofAddr       string
	gcHeadroomMiB   int
	newGossipKey    bool
}

// parseConfig reads args, falling back to getenv("RINGLIMIT_<FLAG>") for
// every flag not given on the command line. On --help it writes the usage
// to help and returns flag.ErrHelp.
func parseConfig(args []string, getenv func(string) string, help io.Writer) (config, error) {
	c := config{Config: node.DefaultConfig()}
	fs := flag.NewFlagSet("ringlimit-node", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // a bad flag is an error returned in one line; the flags are listed on --help only
	fs.StringVar(&c.Name, "name", c.Name, "this node's name, unique in the cluster")
	fs.StringVar(&c.HTTPAddr, "http", c.HTTPAddr, "address of the HTTP API")
	fs.StringVar(&c.GRPCAddr, "grpc", c.GRPCAddr, "address of the gRPC API")
	fs.IntVar(&c.MaxKeys, "max-keys", c.MaxKeys, "most keys held in memory; beyond it (or --max-memory) only keys that hold nothing (full again, or past their window) are dropped, least recently used first, and a new key finds no room when every key has spent: it gets its failure mode")
	fs.Var((*byteSize)(&c.MaxMemory), "max-memory", "bytes the key store may count (suffix KiB, MiB or GiB): 104 a key, plus a key's bytes when it is longer than 23, plus 1,088 for a sliding window log (1,128 for a 1 KiB key; measured heap: 81 B a short key, 1,127 a 1 KiB key). The replicas this node keeps for each other member get as much again. Only keys that hold nothing are dropped for room; a new key that finds none gets its failure mode (ringlimit_store_full_total)")
	fs.IntVar(&c.MaxKeyBytes, "max-key-bytes", c.MaxKeyBytes, "longest key accepted, in bytes (at most 1024): a longer one is refused with 400 KEY_TOO_LONG / INVALID_ARGUMENT, changing nothing")
	fs.StringVar(&c.PeerAddr, "peer", c.PeerAddr, "address of the peer gRPC service, which only other nodes call (mutual TLS with --tls-*)")
	fs.StringVar(&c.GossipAddr, "gossip", c.GossipAddr, "gossip bind address (TCP and UDP)")
	join := fs.String("join", "", "comma-separated seeds to join: gossip addresses host:port (a DNS name may resolve to several nodes, e.g. a Kubernetes headless Service) or DNS SRV names (_gossip._tcp.NAME); names are resolved again every few seconds, and a node keeps retrying until one answers or another node joins it; until then it owns no key and checks get their failure mode")
	fs.StringVar(&c.AdvertiseHost, "advertise-host", c.AdvertiseHost, "host (IP or DNS name) other machines reach this node at, for every listener bound to an unspecified address (0.0.0.0, ::); default $POD_IP, else a private IPv4 address of this machine")
	fs.StringVar(&c.AdvertiseHTTP, "advertise-http", c.AdvertiseHTTP, "host:port other machines reach the HTTP API at (default: --http, with --advertise-host for an unspecified host)")
	fs.StringVar(&c.AdvertiseGRPC, "advertise-grpc", c.AdvertiseGRPC, "host:port clients reach the public gRPC API at (default: --grpc, with --advertise-host for an unspecified host)")
	fs.StringVar(&c.AdvertisePeer, "advertise-peer", c.AdvertisePeer, "host:port other nodes reach the peer service at (default: --peer, with --advertise-host for an unspecified host)")
	fs.StringVar(&c.AdvertiseGossip, "advertise-gossip", c.AdvertiseGossip, "IP:port other nodes reach gossip at (default: --gossip, with --advertise-host, resolved to an IP, for an unspecified host)")
	fs.StringVar(&c.Resolver, "resolver", c.Resolver, "DNS server (host:port) that resolves the --join names (default: the system's resolver)")
	fs.DurationVar(&c.DrainDelay, "drain-delay", c.DrainDelay, "on SIGTERM, how long the node keeps serving with /readyz answering 503 before it leaves, so that load balancers stop sending it traffic first")
	fs.StringVar(&c.pprofAddr, "pprof", "", "address to serve Go's /debug/pprof profiles on (off when empty; keep it private)")
	fs.StringVar(&c.AdminTokenFile, "admin-token-file", c.AdminTokenFile, "file of admin bearer tokens, one a line, optionally name:token (the name goes in the audit log); re-read when it changes. Without it POST/DELETE /v1/overrides and --pprof answer 403")
	fs.StringVar(&c.PolicyPath, "policy", c.PolicyPath, "policy file (YAML): tiers, routes, global ceiling; reloaded on change and on SIGHUP")
	fs.StringVar(&c.AuditPath, "audit-log", c.AuditPath, "file to append the audit log to (JSON lines); empty logs audit entries with the other logs")
	fs.IntVar(&c.gcHeadroomMiB, "gc-headroom", 128, "MiB the heap may grow by between two garbage collections when GOGC would collect sooner (0: GOGC alone decides)")
	fs.IntVar(&c.Replication, "replication-factor", c.Replication, "successors that keep a copy of each key's state, so that a crash loses at most the last few milliseconds of spend (0: off)")
	fs.Int64Var(&c.ReplicationMaxLoss, "replication-max-loss", c.ReplicationMaxLoss, "most tokens of one key a kill -9 of its owner can over-admit, whatever the check rate: a key past half of it since its last copy is replicated before the answer (0: no bound in tokens, only the 20ms rounds)")
	fs.StringVar(&c.DataDir, "data-dir", c.DataDir, "directory of the node's state file: what it spent, its replicas, reservations, leases and the tombstones of reset keys, written every --snapshot-interval and when it stops, and put back when it starts (empty: in memory only; a restart starts empty)")
	fs.DurationVar(&c.SnapshotInterval, "snapshot-interval", c.SnapshotInterval, "with --data-dir: how often the state file is written, or four times the last write's duration when longer; a kill -9 loses what was spent since the last one")
	fs.IntVar(&c.ClusterSize, "cluster-size", c.ClusterSize, "members the quorum is counted against: a node that sees fewer than a majority up does not take over the keys of the others (0: the members it last knew)")
	fs.StringVar(&c.GossipKeyFile, "gossip-key-file", c.GossipKeyFile, "file of base64 gossip keys (16, 24 or 32 bytes), one per line, the first used to encrypt, all tried to decrypt; re-read every 2s and applied to the running keyring (off when empty: gossip in clear)")
	fs.StringVar(&c.ClusterName, "cluster-name", c.ClusterName, "label carried by all gossip; nodes with another name (or none) are refused (at most 255 bytes)")
	fs.BoolVar(&c.newGossipKey, "new-gossip-key", false, "print a new random gossip key (32 bytes, base64) for --gossip-key-file and exit")
	fs.StringVar(&c.TLSCA, "tls-ca", c.TLSCA, "PEM file of the CA certificates that node certificates must chain to (mutual TLS on the peer listener); re-read every 2s")
	fs.StringVar(&c.TLSCert, "tls-cert", c.TLSCert, "PEM file of this node's certificate, naming the node (--name) as a DNS name or common name; re-read every 2s")
	fs.StringVar(&c.TLSKey, "tls-key", c.TLSKey, "PEM file of the key of --tls-cert; re-read every 2s")
	fs.StringVar(&c.APITLSCert, "api-tls-cert", c.APITLSCert, "PEM certificate served on the public HTTP and gRPC APIs (TLS; off when empty); re-read every 2s")
	fs.StringVar(&c.APITLSKey, "api-tls-key", c.APITLSKey, "PEM file of the key of --api-tls-cert")
	fs.StringVar(&c.APITLSClientCA, "api-tls-client-ca", c.APITLSClientCA, "PEM CA certificates: when set, the public APIs require a client certificate that chains to one of them")
	fs.StringVar(&c.RLSPath, "rls-config", c.RLSPath, "envoyproxy/ratelimit configuration (a YAML file, or a directory of them, one domain each): serves Envoy's rate limit service (envoy.service.ratelimit.v3) on --grpc; reloaded on change and on SIGHUP")
	inline := fs.Bool("inline-limits", true, "accept inline limits (a key and a limit in the request) on POST /v1/check and gRPC Check; false refuses them with 400 / INVALID_ARGUMENT, code INLINE_LIMITS_DISABLED, for nodes that serve only policy and RLS")
	fs.BoolVar(&c.RLSHeaders, "rls-headers", c.RLSHeaders, "add RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset to the rate limit service's answers (response_headers_to_add)")
	fs.BoolVar(&c.RLSShadowMode, "rls-shadow-mode", c.RLSShadowMode, "answer every rate limit service request OK, as if every rule had shadow_mode (envoyproxy/ratelimit's SHADOW_MODE): the buckets are still checked and spent, and what would have been refused is counted (ringlimit_rls_shadow_mode_total, ringlimit_rls_global_shadow_mode_total); read at start")
	fs.IntVar(&c.RLSStatKeys, "rls-stats-keys", c.RLSStatKeys, `most keys with their own series in the per-descriptor rate limit service counters (ringlimit_rls_total_hits_total and its siblings); the descriptors of any other key are counted under key="_other" (0: per domain only)`)
	fs.Float64Var(&c.RLSNearLimitRatio, "rls-near-limit-ratio", c.RLSNearLimitRatio, "share of a limit past which hits within it count as near_limit (envoyproxy/ratelimit's NEAR_LIMIT_RATIO), above 0 and at most 1")
	fs.BoolVar(&c.PrivateReads, "private-reads", c.PrivateReads, "GET /v1/cluster, /v1/ring, /v1/owner, /v1/policy, /v1/overrides, /ui/api/status and /metrics need an admin token too (checks, /healthz and the status page's files stay open)")
	fs.BoolVar(&c.Insecure, "insecure", c.Insecure, "allow a non-loopback --peer or --gossip address without mutual TLS and a gossip key (peer traffic and gossip in clear: anyone who reaches them can read and change every limit)")
	trusted := fs.String("trusted-proxies", "", "comma-separated CIDR prefixes or addresses of the gateways whose X-Forwarded-For and X-Real-IP /v1/authz believes, e.g. 127.0.0.1/32 for a gateway on this machine; from any other address the client IP is the connection's (default: trust none)")
	fs.Func("cors-origins", "comma-separated origins (https://app.example) whose browser pages may POST to the API; a request with any other Origin is refused 403 CROSS_ORIGIN (default: none)", func(v string) (err error) {
		c.CORSOrigins, err = api.ParseOrigins(strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' }))
		return err
	})
	level := fs.String("log-level", "info", "debug, info, warn or error")
	fs.DurationVar(&c.HTTPReadTimeout, "http-read-timeout", c.HTTPReadTimeout, "most time an HTTP client may take to send a whole request, headers and body (a slow client is disconnected)")
	fs.DurationVar(&c.HTTPWriteTimeout, "http-write-timeout", c.HTTPWriteTimeout, "most time from the end of a request's headers to the end of its response")
	fs.DurationVar(&c.HTTPIdleTimeout, "http-idle-timeout", c.HTTPIdleTimeout, "how long an idle keep-alive HTTP connection stays open")
	fs.DurationVar(&c.CheckTimeout, "check-timeout", c.CheckTimeout, "the server's deadline for one request's checks, HTTP and gRPC alike; keep it above the peer deadline (500ms) so that an unreachable owner is answered by the failure mode")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", 10*time.Second, "how long a graceful shutdown waits for checks in flight")
	fs.IntVar(&c.MaxConns, "max-conns", c.MaxConns, "most connections open at once on each public listener (--http, --grpc); at the cap a new connection closes the one idle longest (silent for 1s, or 10s since its last bytes), else is refused. 0: derived from the open-file limit (ulimit -n): (limit - reserve) / 2, where reserve = max(256, limit/8) file descriptors are kept for peers (at most reserve/4 connections on --peer), gossip, file reloads and /healthz")
	fs.DurationVar(&c.GRPCIdleTimeout, "grpc-idle-timeout", c.GRPCIdleTimeout, "how long a public gRPC connection with no call in flight stays open (then GOAWAY; clients reconnect on their next call); a gRPC connection must finish its handshake within 5s")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(help, fs)
			return c, err
		}
		return c, flagError(fs, err)
	}
	if fs.NArg() > 0 {
		return c, unexpected(fs.Args())
	}
	from := map[string]string{} // flag → where its value came from: --flag, or its variable
	fs.Visit(func(f *flag.Flag) { from[f.Name] = "--" + f.Name })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil || from[f.Name] != "" {
			return
		}
		env := envName(f.Name)
		if v := getenv(env); v != "" {
			from[f.Name] = env
			if e := f.Value.Set(v); e != nil {
				err = fmt.Errorf("%s: %s", env, badValue(f, v, e.Error()))
			}
		}
	})
	if err != nil {
		return c, err
	}
	if err := c.logLevel.UnmarshalText([]byte(*level)); err != nil {
		return c, fmt.Errorf("%s: %q is not a level (try debug, info, warn or error)", cmp.Or(from["log-level"], "--log-level"), *level)
	}
	for _, name := range addrFlags {
		if v := fs.Lookup(name).Value.String(); v != "" {
			if err := checkAddr(cmp.Or(from[name], "--"+name), v); err != nil {
				return c, err
			}
		}
	}
	for _, seed := range strings.Split(*join, ",") {
		if seed = strings.TrimSpace(seed); seed != "" {
			c.Join = append(c.Join, seed)
		}
	}
	var proxies []string
	for p := range strings.SplitSeq(*trusted, ",") {
		if p = strings.TrimSpace(p); p != "" {
			proxies = append(proxies, p)
		}
	}
	t, err := clientip.ParseList(proxies)
	if err != nil {
		return c, fmt.Errorf("--trusted-proxies: %w", err)
	}
	c.TrustedProxies = t
	if c.AdvertiseHost == "" {
		c.AdvertiseHost = getenv("POD_IP")
	}
	if c.gcHeadroomMiB < 0 || c.gcHeadroomMiB > 1<<20 {
		return c, fmt.Errorf("--gc-headroom: must be from 0 to 1048576 MiB, got %d", c.gcHeadroomMiB)
	}
	if c.GossipKeyFile != "" {
		if c.GossipKeys, err = node.ReadKeyFile(c.GossipKeyFile); err != nil {
			return c, fmt.Errorf("--gossip-key-file: %w", err)
		}
	}
	c.DisableInlineLimits = !*inline
	if err := c.Validate(); err != nil {
		return c, flagNames(err)
	}
	return c, nil
}

// fieldFlags are the flags of the node.Config fields Validate names.
var fieldFlags = map[string]string{"Name": "name", "HTTPAddr": "http", "GRPCAddr": "grpc", "PeerAddr": "peer", "GossipAddr": "gossip",
	"AdvertiseHost": "advertise-host", "AdvertiseHTTP": "advertise-http", "AdvertiseGRPC": "advertise-grpc", "AdvertisePeer": "advertise-peer",
	"AdvertiseGossip": "advertise-gossip", "Resolver": "resolver", "Replication": "replication-factor", "ReplicationMaxLoss": "replication-max-loss",
	"ClusterSize": "cluster-size", "DataDir": "data-dir", "SnapshotInterval": "snapshot-interval", "ClusterName": "cluster-name", "HTTPReadTimeout": "http-read-timeout", "HTTPWriteTimeout": "http-write-timeout",
	"HTTPIdleTimeout": "http-idle-timeout", "CheckTimeout": "check-timeout", "DrainDelay": "drain-delay", "MaxConns": "max-conns",
	"GRPCIdleTimeout": "grpc-idle-timeout", "TLSCA": "tls-ca", "TLSCert": "tls-cert", "TLSKey": "tls-key", "APITLSCert": "api-tls-cert",
	"APITLSKey": "api-tls-key", "APITLSClientCA": "api-tls-client-ca", "GossipKeys": "gossip-key-file", "Insecure": "insecure",
	"RLSStatKeys": "rls-stats-keys", "RLSNearLimitRatio": "rls-near-limit-ratio", "MaxKeys": "max-keys", "MaxKeyBytes": "max-key-bytes", "MaxMemory": "max-memory"}

// flagNames says a node.Config.Validate error in flags: the field's flag
// in front of the message, or, when the message names the field itself,
// every field it names as its flag.
func flagNames(err error) error {
	var fe *node.FieldError
	if !errors.As(err, &fe) || fieldFlags[fe.Field] == "" {
		return err
	}
	msg := fieldWord.ReplaceAllStringFunc(fe.Msg, func(w string) string {
		if f, ok := fieldFlags[w]; ok {
			return "--" + f
		}
		return w
	})
	if strings.HasPrefix(fe.Msg, fe.Field) {
		return errors.New(msg)
	}
	return fmt.Errorf("--%s: %s", fieldFlags[fe.Field], msg)
}

var fieldWord = regexp.MustCompile(`\b[A-Z][A-Za-z]+\b`)
