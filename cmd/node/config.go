package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/ringlimit/ringlimit/api"
	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/cluster"
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
	fs.IntVar(&c.gcHeadroomMiB, "gc-headroom", 32, "MiB the heap may grow by between two garbage collections when GOGC would collect sooner (0: GOGC alone decides)")
	fs.IntVar(&c.Replication, "replication-factor", c.Replication, "successors that keep a copy of each key's state, so that a crash loses at most the last few milliseconds of spend (0: off)")
	fs.Int64Var(&c.ReplicationMaxLoss, "replication-max-loss", c.ReplicationMaxLoss, "most tokens of one key a kill -9 of its owner can over-admit, whatever the check rate: a key past half of it since its last copy is replicated before the answer (0: no bound in tokens, only the 20ms rounds)")
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
	if c.Name == "" {
		return c, fmt.Errorf("--name: must not be empty")
	}
	if err := c.checkAdvertise(getenv); err != nil {
		return c, err
	}
	if c.gcHeadroomMiB < 0 || c.gcHeadroomMiB > 1<<20 {
		return c, fmt.Errorf("--gc-headroom: must be from 0 to 1048576 MiB, got %d", c.gcHeadroomMiB)
	}
	if c.Replication < 0 || c.Replication > 8 {
		return c, fmt.Errorf("--replication-factor: must be from 0 to 8, got %d", c.Replication)
	}
	if c.ReplicationMaxLoss < 0 || c.ReplicationMaxLoss > 1<<30 {
		return c, fmt.Errorf("--replication-max-loss: must be from 0 to %d tokens, got %d", 1<<30, c.ReplicationMaxLoss)
	}
	if c.ClusterSize < 0 {
		return c, fmt.Errorf("--cluster-size: must not be negative, got %d", c.ClusterSize)
	}
	if len(c.ClusterName) > cluster.MaxLabelLen {
		return c, fmt.Errorf("--cluster-name: must be at most %d bytes, got %d", cluster.MaxLabelLen, len(c.ClusterName))
	}
	if c.GossipKeyFile != "" {
		if c.GossipKeys, err = node.ReadKeyFile(c.GossipKeyFile); err != nil {
			return c, fmt.Errorf("--gossip-key-file: %w", err)
		}
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"http-read-timeout", c.HTTPReadTimeout}, {"http-write-timeout", c.HTTPWriteTimeout}, {"http-idle-timeout", c.HTTPIdleTimeout}, {"check-timeout", c.CheckTimeout}} {
		if d.v <= 0 {
			return c, fmt.Errorf("--%s: must be positive, got %v", d.flag, d.v)
		}
	}
	if c.DrainDelay < 0 {
		return c, fmt.Errorf("--drain-delay: must not be negative, got %v", c.DrainDelay)
	}
	if c.MaxConns < 0 {
		return c, fmt.Errorf("--max-conns: must not be negative, got %d", c.MaxConns)
	}
	if c.GRPCIdleTimeout <= 0 {
		return c, fmt.Errorf("--grpc-idle-timeout: must be positive, got %v", c.GRPCIdleTimeout)
	}
	if c.CheckTimeout >= c.HTTPWriteTimeout {
		return c, fmt.Errorf("--check-timeout (%v) must be less than --http-write-timeout (%v), or a late answer could not be written", c.CheckTimeout, c.HTTPWriteTimeout)
	}
	if err := c.checkTLS(); err != nil {
		return c, err
	}
	if c.RLSStatKeys < 0 {
		return c, fmt.Errorf("--rls-stats-keys: must not be negative, got %d", c.RLSStatKeys)
	}
	if !(c.RLSNearLimitRatio > 0 && c.RLSNearLimitRatio <= 1) {
		return c, fmt.Errorf("--rls-near-limit-ratio: must be above 0 and at most 1, got %v", c.RLSNearLimitRatio)
	}
	if c.MaxKeys < 1 {
		return c, fmt.Errorf("--max-keys: must be at least 1, got %d", c.MaxKeys)
	}
	if c.MaxKeyBytes < 1 || c.MaxKeyBytes > bucket.MaxKeyLen {
		return c, fmt.Errorf("--max-key-bytes: must be between 1 and %d, got %d", bucket.MaxKeyLen, c.MaxKeyBytes)
	}
	c.DisableInlineLimits = !*inline
	if err := c.Validate(); err != nil { // the flags' checks above name the flag; this one the field
		return c, err
	}
	return c, nil
}

// checkTLS checks that TLS files come in complete sets, and refuses a node
// whose peer or gossip address other machines can reach without mutual TLS
// and a gossip key, unless --insecure is given.
func (c *config) checkTLS() error {
	n := 0
	for _, f := range []string{c.TLSCA, c.TLSCert, c.TLSKey} {
		if f != "" {
			n++
		}
	}
	if n != 0 && n != 3 {
		return fmt.Errorf("--tls-ca, --tls-cert and --tls-key go together: give all three or none")
	}
	if (c.APITLSCert == "") != (c.APITLSKey == "") {
		return fmt.Errorf("--api-tls-cert and --api-tls-key go together: give both or neither")
	}
	if c.APITLSClientCA != "" && c.APITLSCert == "" {
		return fmt.Errorf("--api-tls-client-ca needs --api-tls-cert and --api-tls-key")
	}
	if c.Insecure {
		return nil
	}
	for _, l := range []struct{ flag, addr string }{{"peer", c.PeerAddr}, {"gossip", c.GossipAddr}} {
		if isLoopback(hostOf(l.addr)) {
			continue
		}
		var missing []string
		if !c.peerTLS() {
			missing = append(missing, "--tls-ca, --tls-cert and --tls-key (mutual TLS between nodes)")
		}
		if len(c.GossipKeys) == 0 {
			missing = append(missing, "--gossip-key-file (encrypted gossip)")
		}
		if len(missing) > 0 {
			return fmt.Errorf("--%s %s is reachable from other machines: give %s, or --insecure to run in clear", l.flag, l.addr, strings.Join(missing, " and "))
		}
	}
	return nil
}

// peerTLS reports whether the peer listener and connections use mutual TLS.
func (c *config) peerTLS() bool { return c.TLSCert != "" }

// isLoopback reports whether host, an IP address or a name, is this
// machine's loopback: an IP address in 127.0.0.0/8 or ::1, or "localhost".
func isLoopback(host string) bool {
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback()
	}
	return strings.EqualFold(host, "localhost")
}

// checkAdvertise fills advertiseHost from $POD_IP when not given, and checks
// the advertise flags' syntax.
func (c *config) checkAdvertise(getenv func(string) string) error {
	if c.AdvertiseHost == "" {
		c.AdvertiseHost = getenv("POD_IP")
	}
	if h := c.AdvertiseHost; h != "" {
		if ip := net.ParseIP(h); ip != nil && ip.IsUnspecified() {
			return fmt.Errorf("--advertise-host %s: other machines cannot dial an unspecified address", h)
		}
	}
	for _, a := range []struct{ flag, v string }{{"advertise-http", c.AdvertiseHTTP}, {"advertise-grpc", c.AdvertiseGRPC},
		{"advertise-peer", c.AdvertisePeer}, {"advertise-gossip", c.AdvertiseGossip}} {
		if a.v == "" {
			continue
		}
		if err := checkDialable(a.v); err != nil {
			return fmt.Errorf("--%s: %w", a.flag, err)
		}
	}
	if c.AdvertiseGossip != "" && net.ParseIP(hostOf(c.AdvertiseGossip)) == nil {
		return fmt.Errorf("--advertise-gossip %s: the host must be an IP address", c.AdvertiseGossip)
	}
	if c.Resolver != "" {
		if err := checkDialable(c.Resolver); err != nil {
			return fmt.Errorf("--resolver: %w", err)
		}
	}
	return nil
}

// checkDialable accepts host:port with a non-empty host that is not an
// unspecified address and a port from 1 to 65535.
func checkDialable(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if host == "" {
		return fmt.Errorf("%q has no host", addr)
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		return fmt.Errorf("%q: other machines cannot dial an unspecified address", addr)
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return fmt.Errorf("%q: the port must be from 1 to 65535", addr)
	}
	return nil
}

func hostOf(addr string) string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return host
}
