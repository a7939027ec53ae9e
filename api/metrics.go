package api

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/decide"
	"github.com/ringlimit/ringlimit/forward"
)

// metrics are the API's Prometheus collectors, all prefixed ringlimit_.
type metrics struct {
	checks  *prometheus.CounterVec   // by algorithm and result
	invalid *prometheus.CounterVec   // by surface
	latency *prometheus.HistogramVec // by surface

	// counters[alg][result] caches the label lookups of checks.
	counters [5][3]prometheus.Counter
	// peeks counts peeks by result: allowed, rejected, error.
	peeks  [3]prometheus.Counter
	resets *prometheus.CounterVec // by result
	// decisions counts answers by scope and result (scopes.go).
	decisions *scopeCounters
	// latencyHTTP and latencyGRPC cache the label lookups of latency for
	// the two surfaces that observe it on every request; each holds a
	// prometheus.Observer once the first request of its surface is seen,
	// so that /metrics shows a surface's series only once it served.
	latencyHTTP, latencyGRPC atomic.Value

	// reservations counts checks with reserve by result (ok: a
	// reservation was recorded; refused; degraded: admitted by a failure
	// mode, no reservation); settles counts settles by result (settle.go).
	reservations, settles *prometheus.CounterVec
	// reports counts reports by result (lease_grpc.go).
	reports *prometheus.CounterVec
}

const (
	resultAllowed = iota
	resultRejected
	resultDegraded
)

var resultNames = [3]string{"allowed", "rejected", "degraded"}

func newMetrics(reg prometheus.Registerer, stats Stats) (*metrics, error) {
	m := &metrics{
		checks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ringlimit_checks_total",
			Help: "Checks decided by this node's API, by algorithm and result (allowed, rejected, degraded: decided by the failure mode because the owner was unreachable).",
		}, []string{"algorithm", "result"}),
		invalid: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ringlimit_invalid_requests_total",
			Help: "Requests refused as invalid (400 / INVALID_ARGUMENT), by surface.",
		}, []string{"surface"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ringlimit_check_duration_seconds",
			Help:    "Time to decide one request's checks, by surface (http, authz, grpc).",
			Buckets: []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
		}, []string{"surface"}),
	}
	m.decisions = newScopeCounters(prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ringlimit_decisions_total",
		Help: "Answers of this node's API, by scope (the policy layer that decided: inline, tier:free, route:/login, rls:DOMAIN, ...; the first 100 scopes seen, later ones as \"other\") and result (allowed, rejected, degraded: decided by a failure mode; dry_run: a dry-run layer or a shadow RLS rule would have rejected).",
	}, []string{"scope", "result"}), maxScopes)
	peeks := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ringlimit_peeks_total",
		Help: "Peeks (checks that spend nothing) decided by this node's API, by result (allowed, rejected, error: the batch failed).",
	}, []string{"result"})
	for i, r := range [3]string{"allowed", "rejected", "error"} {
		m.peeks[i] = peeks.WithLabelValues(r)
	}
	m.resets = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ringlimit_resets_total",
		Help: "Resets asked of this node's API (POST /v1/reset, gRPC Reset), by result (reset; invalid: bad request, nothing reset; unauthorized: no or wrong admin token; unavailable: the owner could not be reached, nothing reset).",
	}, []string{"result"})
	m.reservations = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ringlimit_reservations_total",
		Help: "Checks with reserve decided by this node's API, by result (ok: admitted with a reservation; refused; degraded: admitted by a failure mode, without one).",
	}, []string{"result"})
	m.settles = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ringlimit_settles_total",
		Help: "Settles answered by this node's API, by result (ok, already_settled, not_found, error: invalid or owner unavailable).",
	}, []string{"result"})
	m.reports = newReportMetrics()
	collectors := []prometheus.Collector{m.checks, m.invalid, m.latency, m.decisions.vec, peeks, m.resets, m.reservations, m.settles, m.reports}
	if stats != nil {
		collectors = append(collectors,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "ringlimit_keys",
				Help: "Keys held in this node's bucket store.",
			}, func() float64 { return float64(stats.Len()) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "ringlimit_evictions_total",
				Help: "Keys that held nothing (full again, or past their window) dropped from this node's bucket store to make room within --max-keys and --max-memory.",
			}, func() float64 { return float64(stats.Evictions()) }),
		)
	}
	for _, c := range collectors {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for a := range m.counters {
		for r := range m.counters[a] {
			m.counters[a][r] = m.checks.WithLabelValues(bucket.Algorithm(a).String(), resultNames[r])
		}
	}
	return m, nil
}

// observeLatency records how long one request's checks took on surface.
func (m *metrics) observeLatency(surface string, seconds float64) {
	var cache *atomic.Value
	switch surface {
	case "http":
		cache = &m.latencyHTTP
	case "grpc":
		cache = &m.latencyGRPC
	default:
		m.latency.WithLabelValues(surface).Observe(seconds)
		return
	}
	o, ok := cache.Load().(prometheus.Observer)
	if !ok {
		o = m.latency.WithLabelValues(surface)
		cache.Store(o)
	}
	o.Observe(seconds)
}

func (m *metrics) countDecision(alg bucket.Algorithm, r *forward.Result) {
	res := resultRejected
	switch {
	case r.Degraded:
		res = resultDegraded
	case r.Allowed:
		res = resultAllowed
	}
	if int(alg) < len(m.counters) {
		m.counters[alg][res].Inc()
	}
}

var _ decide.Observer = (*metrics)(nil)

// Checked records one batch the decide path decided: its latency, and
// either the invalid request or each check's decision.
func (m *metrics) Checked(surface string, checks []forward.Check, out []forward.Result, took time.Duration, err error) {
	m.observeLatency(surface, took.Seconds())
	if err != nil {
		if errors.Is(err, forward.ErrInvalid) {
			m.invalid.WithLabelValues(surface).Inc()
		}
		for i := range checks {
			if checks[i].Peek {
				m.peeks[2].Inc()
			}
		}
		return
	}
	for i := range checks {
		if checks[i].Peek {
			if out[i].Allowed {
				m.peeks[0].Inc()
			} else {
				m.peeks[1].Inc()
			}
			continue
		}
		m.countDecision(checks[i].Limit.Algorithm(), &out[i])
		if checks[i].Reserve > 0 {
			m.countReservation(&out[i])
		}
	}
}

// Answered counts a combined answer in ringlimit_decisions_total under
// its scope, and each scope a dry-run layer would have rejected it in.
func (m *metrics) Answered(ans *decide.Answer) {
	if ans.Peek { // counted in ringlimit_peeks_total
		return
	}
	res := decisionRejected
	switch {
	case ans.Degraded:
		res = decisionDegraded
	case ans.Allowed:
		res = decisionAllowed
	}
	m.decisions.count(ans.Scope, res)
	for _, s := range ans.WouldReject {
		m.decisions.count(s, decisionDryRun)
	}
}
