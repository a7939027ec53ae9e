package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/decide"
	"github.com/ringlimit/ringlimit/forward"
	"github.com/ringlimit/ringlimit/internal/clientip"
	"github.com/ringlimit/ringlimit/internal/discard"
)

// Checker decides a batch of checks (decide.Checker). *forward.Router
// implements it.
type Checker = decide.Checker

// Cluster describes the cluster as this node sees it, for GET /v1/cluster,
// GET /v1/ring and GET /v1/owner. Implementations must be safe for
// concurrent use.
type Cluster interface {
	Status(ctx context.Context) ClusterStatus
	Owner(key string) (owner string, ringVersion uint64)
	// Partitions returns the owner of each partition of this node's ring,
	// in partition order, and the ring's version.
	Partitions() (owners []string, ringVersion uint64)
	// RingVersion returns the version of this node's ring (0: none yet);
	// every gRPC Check and Leases answer carries it.
	RingVersion() uint64
	// ClientRing returns this node's ring with the members' public
	// addresses, for the gRPC Ring call.
	ClientRing() forward.ClientRing
}

// Stats reports the local key store's counts for the metrics.
// *bucket.Store implements it.
type Stats interface {
	Len() int
	Evictions() uint64
}

var (
	_ Checker = (*forward.Router)(nil)
	_ Stats   = (*bucket.Store)(nil)
)

// Limits on what one request may carry.
const (
	// MaxBodyBytes is the largest HTTP request body accepted.
	MaxBodyBytes = 64 << 10
	// MaxBatch is the most checks one gRPC call may carry.
	MaxBatch = 1000
)

// Config configures the API.
type Config struct {
	// Checker decides checks. Required.
	Checker Checker
	// BatchInterceptor, when not nil, runs around each call a Batches
	// stream carries, as the gRPC server's unary interceptors run around
	// a unary call (grpc.ChainUnaryInterceptor chains several): with
	// info.FullMethod the method of its call (RateLimiter/Check or
	// RateLimiter/Leases) and ctx the stream's.
	BatchInterceptor grpc.UnaryServerInterceptor
	// ReuseBatchResponses lets a Batches stream answer a later check in the
	// memory of a Check response it has sent. Set it only when
	// BatchInterceptor keeps no response after it returns: the node sets it
	// when its only interceptor is its own metrics'.
	ReuseBatchResponses bool
	// Settler settles reservations (POST /v1/settle, gRPC Settle);
	// *forward.Router implements it. Nil: every settle answers 503.
	Settler decide.Settler
	// Leaser takes, renews and releases the leases of in-flight limits
	// (POST /v1/acquire, /v1/renew, /v1/release, their gRPC twins, and a
	// policy's concurrency layers); *forward.Router implements it. Nil:
	// each answers 503.
	Leaser decide.Leaser
	// Reporter sends reports to adaptive keys' owners (decide.Report);
	// *forward.Router implements it. Nil: a report of a request with an
	// adaptive layer answers 503.
	Reporter decide.Reporter
	// Stats feeds the keys and evictions metrics. Optional.
	Stats Stats
	// Cluster serves /v1/cluster, /v1/ring and /v1/owner. Optional:
	// without it they answer 404.
	Cluster Cluster
	// Policy resolves policy requests and serves /v1/policy. Optional:
	// without it only inline limits are accepted.
	Policy PolicySource
	// CountDryRun is told the scopes of the dry-run layers that would have
	// rejected a policy request (policy.Manager.CountDryRun). Nil: not
	// counted.
	CountDryRun func(scopes []string)
	// AddOverride installs incident overrides (POST /v1/overrides); required
	// with Policy.
	AddOverride OverrideFunc
	// RevokeOverride revokes an incident override by ID (DELETE
	// /v1/overrides/{id}); required with Policy.
	RevokeOverride RevokeFunc
	// AdminTokens are the bearer tokens the state-changing endpoints (POST
	// and DELETE /v1/overrides) require (see RequireAdmin). Nil, or never
	// Set, refuses those endpoints with 403; the read-only ones stay open.
	AdminTokens *Tokens
	// PrivateReads makes the read-only endpoints (GET /v1/cluster,
	// /v1/ring, /v1/owner, /v1/policy, /v1/overrides and /metrics) require
	// an admin token too. Checks, /healthz and /readyz stay open.
	PrivateReads bool
	// RLS, when set, serves envoy.service.ratelimit.v3.RateLimitService
	// on the gRPC server (RegisterGRPC) with the configuration it returns.
	RLS RLSConfig
	// RLSHeaders adds the RateLimit-Limit, -Remaining and -Reset headers
	// of the descriptor closest to its limit to every RLS answer.
	RLSHeaders bool
	// RLSShadowMode answers every RLS descriptor OK, as if each rule were
	// in shadow_mode (envoyproxy/ratelimit's SHADOW_MODE): the buckets are
	// checked and spent as usual, over-limit hits are counted in
	// ringlimit_rls_over_limit_total and ringlimit_rls_shadow_mode_total,
	// and each request answered OK instead of OVER_LIMIT in
	// ringlimit_rls_global_shadow_mode_total.
	RLSShadowMode bool
	// RLSStatKeys is the most keys (per domain, summed over the domains)
	// with their own series in the per-descriptor RLS counters
	// (ringlimit_rls_total_hits_total and its siblings); the descriptors of
	// any other key are counted under key="_other" (RLSOtherKey), and the
	// first time that happens is logged. Zero counts per domain only:
	// every key under "_other". DefaultRLSStatKeys is 1000. Must not be
	// negative.
	RLSStatKeys int
	// RLSNearLimitRatio is the share of a limit past which hits within it
	// count as near_limit (envoyproxy/ratelimit's NEAR_LIMIT_RATIO), above
	// 0 and at most 1. Zero means DefaultRLSNearLimitRatio (0.8).
	RLSNearLimitRatio float64
	// Registerer receives the API's metrics. Nil registers none.
	Registerer prometheus.Registerer
	// Gatherer serves /metrics (usually the registry behind Registerer).
	// Nil: no /metrics endpoint.
	Gatherer prometheus.Gatherer
	// Logger receives request errors. Nil discards them.
	Logger *slog.Logger
	// TrustedProxies are the proxies (gateways, load balancers) whose
	// X-Forwarded-For and X-Real-IP /v1/authz believes: only when the
	// connection's remote address is inside one of them is either header
	// read (see package internal/clientip for the walk). Nil trusts none:
	// the client IP is always the connection's address. Each prefix must
	// be valid.
	TrustedProxies []netip.Prefix
	// CORSOrigins are the origins (scheme://host[:port]) whose browser
	// pages may call the state-changing endpoints; a request from any
	// other site is refused 403 CROSS_ORIGIN (see crossSite). Nil: none.
	CORSOrigins []string
	// Ready reports whether the node should get traffic (GET /readyz): nil
	// when it should, else why not. Nil Ready: always ready.
	Ready func() error
	// CheckTimeout is the server's own deadline for one request's checks
	// (the caller's deadline still applies when sooner): a check not
	// decided by then (rounded up to a 64th of it) fails as abandoned
	// (HTTP 503, gRPC DeadlineExceeded). It should exceed the peer
	// deadline, so that an unreachable owner is answered by the failure
	// mode first. Zero means none.
	CheckTimeout time.Duration
	// TracerProvider, when set, traces the HTTP API (Handler) and the
	// public gRPC server (GRPCStatsHandler; see trace.go). Nil: no spans,
	// and no trace headers read.
	TracerProvider trace.TracerProvider
	// Self is this node's name: a check another node decided counts as
	// forwarded in Activity. Empty: none does.
	Self string
	// DisableInlineLimits refuses inline limits (a key and a limit in the
	// request) on HTTP and gRPC: 400 INLINE_LIMITS_DISABLED, gRPC
	// INVALID_ARGUMENT. For nodes that serve only policy and RLS. False
	// (the zero value) accepts them.
	DisableInlineLimits bool
	// Reset serves POST /v1/reset and the gRPC Reset, behind an admin
	// token (*forward.Router.Reset). Nil: neither is served (404,
	// UNIMPLEMENTED).
	Reset ResetFunc
	// Audit receives one line per reset, in the admin audit log. Nil:
	// not audited.
	Audit AuditFunc
}

// errInlineDisabled refuses an inline limit under
// Config.DisableInlineLimits.
var errInlineDisabled = errors.New(CodeInlineLimitsDisabled + ": this node accepts no inline limits (--inline-limits=false); name configured policy (policy, api_key, user, ip, route, tier) instead")

// API holds what the HTTP and gRPC surfaces share. It is safe for
// concurrent use.
type API struct {
	// d is the decide path every check surface goes through.
	d           *decide.Decider
	resetsDone  atomic.Uint64 // resets made (Activity.Resets)
	cluster     Cluster
	ring        ringCache
	policy      PolicySource
	addOverride OverrideFunc
	revoke      RevokeFunc
	admin       *Tokens
	privReads   bool
	rls         *rlsServer // nil without Config.RLS
	log         *slog.Logger
	m           *metrics
	gather      prometheus.Gatherer
	// trusted are Config.TrustedProxies.
	trusted clientip.Trusted
	ready   func() error         // nil: always ready
	tp      trace.TracerProvider // nil: tracing off
	// noInline is Config.DisableInlineLimits.
	noInline bool

	// origins are Config.CORSOrigins, lowercased.
	origins []string
	reset   ResetFunc
	auditFn AuditFunc

	// batchIntercept is Config.BatchInterceptor.
	batchIntercept grpc.UnaryServerInterceptor
	reuseBatch     bool // Config.ReuseBatchResponses
	streams        streams
}

// New validates cfg and returns an API.
func New(cfg Config) (*API, error) {
	if cfg.Checker == nil {
		return nil, errors.New("api: Checker is required")
	}
	cfg.Logger = discard.Logger(cfg.Logger)
	cfg.Registerer = discard.Registerer(cfg.Registerer)
	m, err := newMetrics(cfg.Registerer, cfg.Stats)
	if err != nil {
		return nil, err
	}
	if cfg.Policy != nil && (cfg.AddOverride == nil || cfg.RevokeOverride == nil) {
		return nil, errors.New("api: AddOverride and RevokeOverride are required with Policy")
	}
	if cfg.RLSStatKeys < 0 {
		return nil, fmt.Errorf("api: RLSStatKeys must not be negative, got %d", cfg.RLSStatKeys)
	}
	if cfg.RLSNearLimitRatio == 0 {
		cfg.RLSNearLimitRatio = DefaultRLSNearLimitRatio
	}
	if !(cfg.RLSNearLimitRatio > 0 && cfg.RLSNearLimitRatio <= 1) {
		return nil, fmt.Errorf("api: RLSNearLimitRatio must be above 0 and at most 1, got %v", cfg.RLSNearLimitRatio)
	}
	if cfg.CheckTimeout < 0 {
		return nil, fmt.Errorf("api: CheckTimeout must not be negative, got %v", cfg.CheckTimeout)
	}
	for i, p := range cfg.TrustedProxies {
		if !p.IsValid() {
			return nil, fmt.Errorf("api: TrustedProxies[%d] is not a valid prefix", i)
		}
	}
	origins, err := ParseOrigins(cfg.CORSOrigins)
	if err != nil {
		return nil, err
	}
	dcfg := decide.Config{Checker: cfg.Checker, CountDryRun: cfg.CountDryRun, Observer: m, Logger: cfg.Logger,
		CheckTimeout: cfg.CheckTimeout, Self: cfg.Self, Settler: cfg.Settler, Leaser: cfg.Leaser,
		Reporter: cfg.Reporter}
	if cfg.Policy != nil {
		dcfg.Policy = cfg.Policy
	}
	d, err := decide.New(dcfg)
	if err != nil {
		return nil, err
	}
	a := &API{d: d, origins: origins, trusted: clientip.Trusted(slices.Clone(cfg.TrustedProxies)), cluster: cfg.Cluster, policy: cfg.Policy, addOverride: cfg.AddOverride, revoke: cfg.RevokeOverride,
		admin: cfg.AdminTokens, privReads: cfg.PrivateReads, log: cfg.Logger, m: m, gather: cfg.Gatherer, ready: cfg.Ready, tp: cfg.TracerProvider, noInline: cfg.DisableInlineLimits, reset: cfg.Reset, auditFn: cfg.Audit,
		batchIntercept: cfg.BatchInterceptor, reuseBatch: cfg.ReuseBatchResponses, streams: streams{draining: make(chan struct{})}}
	if cfg.RLS != nil {
		rm, err := newRLSMetrics(cfg.Registerer)
		if err != nil {
			return nil, err
		}
		st, err := newRLSStats(cfg.Registerer, cfg.RLSStatKeys, cfg.RLSNearLimitRatio, cfg.Logger)
		if err != nil {
			return nil, err
		}
		a.rls = &rlsServer{api: a, config: cfg.RLS, headers: cfg.RLSHeaders, m: rm, stats: st, shadowAll: cfg.RLSShadowMode}
	}
	return a, nil
}

// bounded returns ctx under the server's own deadline for one request's
// checks (Config.CheckTimeout; see decide.Decider.Bound).
func (a *API) bounded(ctx context.Context) context.Context { return a.d.Bound(ctx) }

// check runs checks through the decide path's checker, with the metrics
// and activity every batch gets (decide.Decider.Batch).
func (a *API) check(ctx context.Context, surface string, checks []forward.Check, out []forward.Result) error {
	return a.d.Batch(ctx, surface, checks, out)
}

// Activity counts the checks decided on every surface (decide.Activity).
type Activity = decide.Activity

// Activity returns the checks decided since the API started, and the
// resets it made.
func (a *API) Activity() Activity {
	act := a.d.Activity()
	act.Resets = a.resetsDone.Load()
	return act
}

// countReset counts a reset made (ringlimit_resets_total{result="reset"},
// Activity.Resets).
func (a *API) countReset() {
	a.m.resets.WithLabelValues("reset").Inc()
	a.resetsDone.Add(1)
}

// validateCost names the field when cost is out of range for l.
func validateCost(field string, l *bucket.Limit, cost int64) error {
	if err := l.CheckCost(cost); err != nil {
		return fmt.Errorf("%s: %w", field, err)
	}
	return nil
}

// validateKey names the field when key, as a request names it, is empty
// or too long.
func validateKey(field, key string) error {
	if err := bucket.CheckRequestKey(key); err != nil {
		return fmt.Errorf("%s: %w", field, err)
	}
	return nil
}

// audit appends a line to the admin audit log, when there is one.
func (a *API) audit(actor, action, what string) {
	if a.auditFn != nil {
		a.auditFn(actor, action, what)
	}
}
