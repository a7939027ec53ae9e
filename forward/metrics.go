package forward

import "github.com/prometheus/client_golang/prometheus"

const (
	fetchFound = iota
	fetchMissing
	fetchUnreachable
)

// routerMetrics are the router's Prometheus collectors, prefixed ringlimit_.
type routerMetrics struct {
	rpcs            prometheus.Counter
	forwarded       prometheus.Counter
	abandoned       prometheus.Counter
	received        prometheus.Counter
	batchSize       prometheus.Histogram
	degraded        [3]prometheus.Counter // by FailureMode
	handoffSent     prometheus.Counter
	handoffReceived prometheus.Counter
	fetches         [3]prometheus.Counter
	ringMembers     prometheus.Gauge
	ringChanges     prometheus.Counter
	shed            prometheus.Counter
	leasesGranted   prometheus.Counter
	leasesReturned  prometheus.Counter
	leasedChecks    prometheus.Counter
}

func newRouterMetrics(reg prometheus.Registerer) (*routerMetrics, error) {
	degraded := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ringlimit_degraded_checks_total",
		Help: "Checks decided by their failure mode because the owner could not be reached, by mode.",
	}, []string{"mode"})
	fetches := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ringlimit_handoff_fetches_total",
		Help: "State fetched from a key's previous owner during the grace period after a ring change, by result (found, missing, unreachable).",
	}, []string{"result"})
	m := &routerMetrics{
		rpcs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ringlimit_forward_rpcs_total",
			Help: "Batches of checks sent to their owners (one message each on the peer's Check stream).",
		}),
		forwarded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ringlimit_forward_checks_total",
			Help: "Checks sent to their owners; divided by ringlimit_forward_rpcs_total it is the batching factor.",
		}),
		abandoned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ringlimit_forward_abandoned_checks_total",
			Help: "Checks not sent to their owners because their caller gave up (deadline or cancel) while they waited for a batch.",
		}),
		received: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ringlimit_peer_checks_total",
			Help: "Checks received from other nodes and decided here as owner.",
		}),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ringlimit_forward_batch_checks",
			Help:    "Checks per batch sent to an owner.",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512},
		}),
		handoffSent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ringlimit_handoff_keys_sent_total",
			Help: "Bucket states pushed to their new owners after ring changes.",
		}),
		handoffReceived: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ringlimit_handoff_keys_received_total",
			Help: "Bucket states received from previous owners and merged.",
		}),
		ringMembers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ringlimit_ring_members",
			Help: "Members on this node's hash ring.",
		}),
		ringChanges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ringlimit_ring_changes_total",
			Help: "Times this node's ring changed.",
		}),
		leasesGranted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ringlimit_lease_tokens_granted_total",
			Help: "Tokens other nodes' owners leased to this node.",
		}),
		leasesReturned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ringlimit_lease_tokens_returned_total",
			Help: "Unused leased tokens this node gave back to their owners.",
		}),
		leasedChecks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ringlimit_leased_checks_total",
			Help: "Checks this node admitted from a token lease without asking the owner.",
		}),
		shed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ringlimit_prelimit_shed_total",
			Help: "Checks rejected by the entry node's pre-limiter without asking the owner.",
		}),
	}
	for i, name := range failureModeNames {
		m.degraded[i] = degraded.WithLabelValues(name)
	}
	for i, name := range []string{"found", "missing", "unreachable"} {
		m.fetches[i] = fetches.WithLabelValues(name)
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.rpcs, m.forwarded, m.abandoned, m.received, m.batchSize, degraded,
			m.handoffSent, m.handoffReceived, fetches, m.ringMembers, m.ringChanges, m.shed, m.leasesGranted, m.leasesReturned, m.leasedChecks} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}
