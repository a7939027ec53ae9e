package api

import (
	"context"
	"math"
	"strconv"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ringlimit/ringlimit/decide"
	"github.com/ringlimit/ringlimit/rls"
)

// RLSMatcher is a configuration of Envoy's rate limit service: it matches
// a request's descriptor to a rule (*rls.Config).
type RLSMatcher interface {
	Match(domain string, d *rlcommon.RateLimitDescriptor) (rls.Rule, bool)
}

// RLSConfig returns the configuration in force at each call
// (rls.Manager.Current); nil matches nothing.
type RLSConfig func() RLSMatcher

// The response headers the rate limit service adds with
// Config.RLSHeaders, named as envoyproxy/ratelimit names them by default.
const (
	rlsLimitHeader     = "RateLimit-Limit"
	rlsRemainingHeader = "RateLimit-Remaining"
	rlsResetHeader     = "RateLimit-Reset"
)

// rlsServer is envoy.service.ratelimit.v3.RateLimitService: every
// descriptor a rule matches is a check of its bucket key on the ring, so
// any node answers for the whole cluster.
type rlsServer struct {
	rlsv3.UnimplementedRateLimitServiceServer
	api     *API
	config  RLSConfig
	headers bool
	m       *rlsMetrics
	stats   *rlsStats
	// shadowAll answers every descriptor as if its rule were in
	// shadow_mode (Config.RLSShadowMode).
	shadowAll bool
}

type rlsMetrics struct {
	requests *prometheus.CounterVec // by overall code
	shadow   *prometheus.CounterVec // by domain
	// The requests' two answers, resolved once: a call looks up no labels.
	ok, overLimit prometheus.Counter
}

func newRLSMetrics(reg prometheus.Registerer) (*rlsMetrics, error) {
	m := &rlsMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ringlimit_rls_requests_total",
			Help: "ShouldRateLimit calls, by answer: ok, over_limit, or the gRPC code of an error.",
		}, []string{"code"}),
		shadow: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ringlimit_rls_shadow_over_limit_total",
			Help: "Descriptors in shadow mode that were over their limit and answered OK, by domain.",
		}, []string{"domain"}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.shadow} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	m.ok, m.overLimit = m.requests.WithLabelValues("ok"), m.requests.WithLabelValues("over_limit")
	return m, nil
}

// registerRLS registers the rate limit service on s.
func (a *API) registerRLS(s grpc.ServiceRegistrar) {
	if a.rls != nil {
		rlsv3.RegisterRateLimitServiceServer(s, a.rls)
	}
}

// rlsScopePrefix prefixes the domain of a descriptor a rule matched, as
// the scope of its answer in ringlimit_decisions_total. Only configured
// domains match a rule, so the scopes are as few as the configuration's.
const rlsScopePrefix = decide.RLSScopePrefix

// rlsItem is what one descriptor of a request became.
type rlsItem struct {
	rule      rls.Rule
	matched   bool // a rule applies: not unlimited, not replaced
	unlimited bool
	unit      int // index in the plan's units
	hits      uint64
}

// ShouldRateLimit answers one Envoy rate limit request. A descriptor no
// rule matches, an unlimited one and one whose rule another matched rule
// replaces are OK and cost nothing; the others are checked together, each
// with its hits (the descriptor's hits_addend, else the request's, else 1).
// The overall code is OVER_LIMIT when any descriptor is; shadow-mode
// descriptors (every descriptor under Config.RLSShadowMode) answer OK.
// Each descriptor a rule matched is counted in the per-descriptor
// counters (rlsStats) as envoyproxy/ratelimit counts it. A failure to
// decide (an owner that could not be reached, a deadline) answers
// UNAVAILABLE, for Envoy's failure_mode_deny to decide. The adapter
// matches descriptors to rules (the rules are Envoy's protobuf types);
// the decide layer checks what the rules say (decide.Plan.AddRLS).
func (s *rlsServer) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	resp, err := s.should(ctx, req)
	switch {
	case err != nil:
		s.m.requests.WithLabelValues(status.Code(err).String()).Inc()
	case resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT:
		s.m.overLimit.Inc()
	default:
		s.m.ok.Inc()
	}
	return resp, err
}

func (s *rlsServer) should(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	domain, descs := req.GetDomain(), req.GetDescriptors()
	switch {
	case domain == "":
		return nil, status.Error(codes.InvalidArgument, "domain: must not be empty")
	case len(descs) == 0:
		return nil, status.Error(codes.InvalidArgument, "descriptors: at least one is required")
	case len(descs) > MaxBatch:
		return nil, status.Errorf(codes.InvalidArgument, "descriptors: at most %d, got %d", MaxBatch, len(descs))
	}
	cfg := s.config()
	var few [4]rlsItem // most requests carry a descriptor or two
	var items []rlsItem
	if len(descs) <= len(few) {
		items = few[:len(descs)]
	} else {
		items = make([]rlsItem, len(descs))
	}
	var replaced map[string]bool
	for i, d := range descs {
		for j, e := range d.GetEntries() {
			if e.GetKey() == "" {
				return nil, status.Errorf(codes.InvalidArgument, "descriptors[%d].entries[%d].key: must not be empty", i, j)
			}
		}
		it := &items[i]
		if cfg == nil {
			continue
		}
		it.rule, it.matched = cfg.Match(domain, d)
		for _, r := range it.rule.Replaces {
			if replaced == nil {
				replaced = map[string]bool{}
			}
			replaced[r] = true
		}
	}
	p := decide.GetPlan(decide.OpCheck)
	defer p.Release()
	for i := range items {
		it := &items[i]
		if !it.matched || it.rule.Unlimited || (it.rule.Name != "" && replaced[it.rule.Name]) {
			it.unlimited = it.matched && it.rule.Unlimited
			it.matched = false
			continue
		}
		it.hits = rlsHits(req, descs[i])
		it.unit = p.Len()
		if err := p.AddRLS(domain, &it.rule, it.hits); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "descriptors[%d]: %v", i, err)
		}
	}
	answers, err := s.api.d.Decide(ctx, "rls", p)
	if err != nil {
		return nil, rlsError(err)
	}
	for i := range answers {
		if answers[i].Degraded {
			return nil, status.Errorf(codes.Unavailable, "the owner of %q could not be reached", p.Key(i))
		}
	}
	return s.answer(domain, p.RLSScope(), items, answers), nil
}

// rlsHits is what descriptor d of req costs: its own hits_addend when set
// (0 included: checked, not counted), else the request's, at least 1.
func rlsHits(req *rlsv3.RateLimitRequest, d *rlcommon.RateLimitDescriptor) uint64 {
	if h := d.GetHitsAddend(); h != nil {
		return h.GetValue()
	}
	return uint64(max(1, req.GetHitsAddend()))
}

// rlsError maps a failure to decide to the status Envoy acts on.
func rlsError(err error) error {
	if code := status.Code(grpcError(err, false)); code == codes.InvalidArgument || code == codes.Canceled {
		return grpcError(err, false)
	}
	return status.Error(codes.Unavailable, err.Error())
}

// rlsOne is the response to a request of one descriptor, in one
// allocation: the response, its status, the status's current limit and
// time to reset.
type rlsOne struct {
	resp     rlsv3.RateLimitResponse
	ptrs     [1]*rlsv3.RateLimitResponse_DescriptorStatus
	statuses [1]rlsv3.RateLimitResponse_DescriptorStatus
	currents [1]rlsv3.RateLimitResponse_RateLimit
	resets   [1]durationpb.Duration
}

// answer builds the response from the items and their units' answers.
// scope is the domain's in ringlimit_decisions_total (rlsScopePrefix and
// the domain).
func (s *rlsServer) answer(domain, scope string, items []rlsItem, answers []decide.Answer) *rlsv3.RateLimitResponse {
	var resp *rlsv3.RateLimitResponse
	var statuses []rlsv3.RateLimitResponse_DescriptorStatus
	var currents []rlsv3.RateLimitResponse_RateLimit
	var resets []durationpb.Duration
	if len(items) == 1 {
		one := new(rlsOne)
		resp = &one.resp
		resp.Statuses = one.ptrs[:]
		statuses, currents, resets = one.statuses[:], one.currents[:], one.resets[:]
	} else {
		resp = &rlsv3.RateLimitResponse{Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(items))}
		statuses = make([]rlsv3.RateLimitResponse_DescriptorStatus, len(items))
		currents, resets = make([]rlsv3.RateLimitResponse_RateLimit, len(items)), make([]durationpb.Duration, len(items))
	}
	resp.OverallCode = rlsv3.RateLimitResponse_OK
	var closest *rlsv3.RateLimitResponse_DescriptorStatus
	globalShadow := false // the global shadow mode turned an OVER_LIMIT answer OK
	for i := range items {
		it := &items[i]
		st := &statuses[i]
		st.Code = rlsv3.RateLimitResponse_OK
		resp.Statuses[i] = st
		if !it.matched {
			if it.unlimited {
				st.LimitRemaining = math.MaxUint32
			}
			continue
		}
		cur := &currents[i]
		cur.Name, cur.RequestsPerUnit, cur.Unit = it.rule.Name, it.rule.RequestsPerUnit, it.rule.Unit
		st.CurrentLimit = cur
		var reset time.Duration
		limit := uint64(it.rule.RequestsPerUnit)
		before := limit // refused without a check: every hit is over
		shadow := it.rule.Shadow || s.shadowAll
		ans := &answers[it.unit]
		over := !ans.Allowed
		switch {
		case ans.Checked:
			d := &ans.Decision
			st.LimitRemaining = uint32(min(max(d.Remaining, 0), math.MaxUint32))
			reset = d.ResetAfter
			if over && d.RetryAfter > reset {
				reset = d.RetryAfter
			}
			// The count before the hits, from what remains after them
			// (what remains before them when refused: nothing was spent).
			used := limit - min(uint64(st.LimitRemaining), limit)
			before = used
			if !over {
				before = used - min(used, it.hits)
			}
		case !over: // hits 0: nothing counted
			st.LimitRemaining = uint32(ans.Remaining)
		}
		s.stats.count(domain, rlsStatName(domain, it.rule.FullKey), tallyRLS(limit, before, it.hits, over, shadow, s.stats.ratio))
		if reset <= 0 {
			reset = rls.UnitDuration(it.rule.Unit)
		}
		if reset > 0 { // as durationpb.New
			d := &resets[i]
			d.Seconds, d.Nanos = int64(reset/time.Second), int32(reset%time.Second)
			st.DurationUntilReset = d
		}
		res := decisionAllowed
		if over {
			res = decisionRejected
			if shadow {
				res = decisionDryRun
			}
		}
		if !ans.Peek { // a descriptor's hits 0: counted in ringlimit_peeks_total
			s.api.m.decisions.count(scope, res)
		}
		if over {
			if shadow {
				s.m.shadow.WithLabelValues(domain).Inc()
				globalShadow = globalShadow || !it.rule.Shadow
			} else {
				st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
				resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
			}
		}
		if closest == nil || st.Code == rlsv3.RateLimitResponse_OVER_LIMIT && closest.Code != st.Code ||
			st.Code == closest.Code && st.LimitRemaining < closest.LimitRemaining {
			closest = st
		}
	}
	if globalShadow {
		s.stats.globalShadow.Inc()
	}
	if s.headers && closest != nil {
		resp.ResponseHeadersToAdd = []*core.HeaderValue{
			{Key: rlsLimitHeader, Value: strconv.FormatUint(uint64(closest.CurrentLimit.RequestsPerUnit), 10)},
			{Key: rlsRemainingHeader, Value: strconv.FormatUint(uint64(closest.LimitRemaining), 10)},
			{Key: rlsResetHeader, Value: strconv.FormatInt(int64(math.Ceil(closest.GetDurationUntilReset().AsDuration().Seconds())), 10)},
		}
	}
	return resp
}
