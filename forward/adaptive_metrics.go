package forward

import "github.com/prometheus/client_golang/prometheus"

// adaptiveMetrics are the adaptive limits' collectors. Safe for concurrent
// use.
type adaptiveMetrics struct {
	limit   *prometheus.GaugeVec   // by scope
	changes *prometheus.CounterVec // by scope, direction
	// reports counts the reports this node sent on or observed, by
	// result. The API counts what it answered in ringlimit_reports_total.
	reports *prometheus.CounterVec
}

// Results of a report (ringlimit_adaptive_reports_total).
const (
	reportObserved    = "observed"    // the owner observed it
	reportInvalid     = "invalid"     // refused: a bad key, limit or spec
	reportUnavailable = "unavailable" // no owner could be reached
)

func newAdaptiveMetrics(reg prometheus.Registerer) (*adaptiveMetrics, error) {
	m := &adaptiveMetrics{
		limit: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ringlimit_adaptive_limit",
			Help: "Per adaptive scope, the current limit of the scope's most recently moved key this node owns.",
		}, []string{"scope"}),
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ringlimit_adaptive_changes_total",
			Help: "Times a controller of a key this node owns moved its limit, by scope and direction (up, down).",
		}, []string{"scope", "direction"}),
		reports: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ringlimit_adaptive_reports_total",
			Help: "Reports of how requests ended routed through this node to their adaptive keys' owners, by result (observed, invalid, unavailable).",
		}, []string{"result"}),
	}
	for _, r := range []string{reportObserved, reportInvalid, reportUnavailable} {
		m.reports.WithLabelValues(r)
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.limit, m.changes, m.reports} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

// changed counts a move of a key's limit in scope, to limit.
func (m *adaptiveMetrics) changed(scope string, dir int, limit int64) {
	d := "up"
	if dir < 0 {
		d = "down"
	}
	m.changes.WithLabelValues(scope, d).Inc()
	m.set(scope, limit)
}

func (m *adaptiveMetrics) set(scope string, limit int64) {
	m.limit.WithLabelValues(scope).Set(float64(limit))
}

func (m *adaptiveMetrics) report(result string) { m.reports.WithLabelValues(result).Inc() }
