package forward

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringlimit/ringlimit/bucket"
)

const (
	fetchFound = iota
	fetchMissing
	fetchUnreachable
)

// metrics are the router's Prometheus collectors, prefixed ringlimit_. The
// peer transport's own counters (batches, checks forwarded and received,
// handoff keys) are the peer package's.
type metrics struct {
	degraded       [3]prometheus.Counter // by FailureMode
	fetches        [3]prometheus.Counter
	ringMembers    prometheus.Gauge
	ringChanges    prometheus.Counter
	shed           prometheus.Counter
	leasesGranted  prometheus.Counter
	leasesReturned prometheus.Counter
	leasedChecks   prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	degraded := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ringlimit_degraded_checks_total",
		Help: "Checks decided by their failure mode because the owner could not be reached, by mode.",
	}, []string{"mode"})
	fetches := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ringlimit_handoff_fetches_total",
		Help: "State fetched from a key's previous owner during the grace period after a ring change, by result (found, missing, unreachable).",
	}, []string{"result"})
	m := &metrics{
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
	for _, mode := range bucket.FailureModes() {
		m.degraded[mode] = degraded.WithLabelValues(mode.String())
	}
	for i, name := range []string{"found", "missing", "unreachable"} {
		m.fetches[i] = fetches.WithLabelValues(name)
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{degraded, fetches, m.ringMembers, m.ringChanges, m.shed, m.leasesGranted, m.leasesReturned, m.leasedChecks} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}
