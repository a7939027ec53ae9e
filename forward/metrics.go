package forward

import (
	"fmt"

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

	// Surviving crashes and partitions.
	replicationLag    prometheus.Histogram
	replicationErrors prometheus.Counter
	replicationWaits  prometheus.Counter
	unconfirmed       prometheus.Counter
	replicasRefused   prometheus.Counter
	standInChecks     prometheus.Counter
	standInForwarded  prometheus.Counter
	promoted          prometheus.Counter
	redirects         prometheus.Counter
	redirectsFollowed prometheus.Counter
	ringDisagreements prometheus.Counter

	// Resets (reset.go).
	resetsReceived    prometheus.Counter
	statesBeforeReset prometheus.Counter

	// Concurrency limits (concurrency_metrics.go).
	leases *leaseOps

	reg prometheus.Registerer // for the gauges watch adds; nil registers none
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	degraded := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ringlimit_degraded_checks_total",
		Help: "Checks this node decided by their failure mode because the owner could not be reached or had no room for a new key, by mode.",
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
		replicationLag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ringlimit_replication_lag_seconds",
			Help:    "Per replication round, how long its oldest change waited until the successors acknowledged it.",
			Buckets: []float64{.001, .0025, .005, .01, .02, .03, .05, .1, .25, .5, 1, 2.5},
		}),
		replicationErrors: counter("ringlimit_replication_errors_total", "Replication batches a successor did not acknowledge."),
		replicationWaits:  counter("ringlimit_replication_waits_total", "Answers held until the key's successors acknowledged its spend (replication: sync, or the key's spend since its last copy past half of MaxLoss)."),
		unconfirmed:       counter("ringlimit_replication_unconfirmed_total", "Held answers given without the successors' acknowledgement (no live successor, a failed round, or the caller gone): answered as async."),
		replicasRefused:   counter("ringlimit_replicas_refused_total", "Replicated states refused: their sender is not a member of this node's ring, or a lease set they carry lacks live leases this node holds that the sender never counted."),
		standInChecks:     counter("ringlimit_successor_checks_total", "Checks this node decided as the successor of an owner that could not be reached (or as a redirected check's last hop)."),
		standInForwarded:  counter("ringlimit_successor_forwarded_total", "Checks this node sent to a key's successor because the owner could not be reached."),
		promoted:          counter("ringlimit_replicas_promoted_total", "Replicas that became this node's own copies when their owner died."),
		redirects:         counter("ringlimit_redirects_total", "Checks this node did not decide because its ring names another owner (it named that owner instead)."),
		redirectsFollowed: counter("ringlimit_redirects_followed_total", "Checks this node sent again, to the owner a redirect named."),
		ringDisagreements: counter("ringlimit_ring_disagreements_total", "Peer batches whose sender's ring version differed from this node's."),
		resetsReceived:    counter("ringlimit_peer_resets_received_total", "Resets a key's owner told this node of: its copies of the key dropped, the tombstone recorded."),
		statesBeforeReset: counter("ringlimit_states_before_reset_total", "Key states from other members (replicas, handoffs, fetches) refused because they predate a reset of the key this node knows of."),
		reg:               reg,
	}
	for _, mode := range bucket.FailureModes() {
		m.degraded[mode] = degraded.WithLabelValues(mode.String())
	}
	for i, name := range []string{"found", "missing", "unreachable"} {
		m.fetches[i] = fetches.WithLabelValues(name)
	}
	var err error
	if m.leases, err = newLeaseOps(reg); err != nil {
		return nil, err
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{degraded, fetches, m.ringMembers, m.ringChanges, m.shed, m.leasesGranted,
			m.leasesReturned, m.leasedChecks, m.replicationLag, m.replicationErrors, m.replicationWaits, m.unconfirmed, m.replicasRefused, m.standInChecks,
			m.standInForwarded, m.promoted, m.redirects, m.redirectsFollowed, m.ringDisagreements, m.resetsReceived, m.statesBeforeReset} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

func counter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
}

// watch registers the gauges read from the router's state.
func (m *metrics) watch(r *Router) error {
	if m.reg == nil {
		return nil
	}
	if err := m.reg.Register(ringVersion{r}); err != nil {
		return err
	}
	for _, g := range []struct {
		name, help string
		f          func() float64
	}{
		{"ringlimit_replication_pending_keys", "Keys changed and not yet sent to their successors.",
			func() float64 { return float64(r.repl.pending()) }},
		{"ringlimit_replication_last_lag_seconds", "How long the last replication round's oldest change waited until acknowledged.",
			func() float64 { return r.repl.lag().Seconds() }},
		{"ringlimit_replicas", "Key states this node holds for other members: replicas of their keys, and what it shares with them after fetches and pushes.",
			func() float64 { return float64(r.shared.len()) }},
		{"ringlimit_successor_keys", "Keys this node holds a copy of, decided for an owner that could not be reached, not yet handed back.",
			func() float64 { return float64(r.Status().StandingIn) }},
		{"ringlimit_leases_in_flight", "Live concurrency leases on the keys this node owns.",
			func() float64 { return float64(r.ownedInFlight()) }},
		{"ringlimit_minority", "1 while this node sees fewer than a majority of the cluster's members and does not take over their keys.",
			func() float64 { return b2f(r.view.Load().minority) }},
	} {
		if err := m.reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: g.name, Help: g.help}, g.f)); err != nil {
			return err
		}
	}
	st := r.cfg.Store
	for _, c := range []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "ringlimit_store_full_total",
			Help: "New keys this node owns that its store had no room for (every key held had spent, within --max-memory and --max-keys): each was decided in its failure mode (by the node that sent it, for a forwarded check)."},
			func() float64 { return float64(st.Full()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ringlimit_store_bytes",
			Help: "Bytes the keys of this node's store count against --max-memory."},
			func() float64 { return float64(st.Bytes()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ringlimit_store_max_bytes",
			Help: "The store's --max-memory, in bytes."},
			func() float64 { return float64(st.MaxMemory()) }),
	} {
		if err := m.reg.Register(c); err != nil {
			return err
		}
	}
	for _, c := range []struct {
		store, reason string
		f             func() uint64
	}{
		{"own", "full", st.Refused},
		{"own", "negative", st.Invalid},
		{"shared", "full", func() uint64 { f, _ := r.shared.refused(); return f }},
		{"shared", "negative", func() uint64 { _, n := r.shared.refused(); return n }},
	} {
		if err := m.reg.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "ringlimit_store_states_refused_total",
			Help:        "States from peers (replicas, handoffs, pushes, promotions) refused by this node's stores, by store (own: the node's keys; shared: replicas and what it shares with other members) and reason (full: a new key with no room even over the allowance; negative: a negative used or spend).",
			ConstLabels: prometheus.Labels{"store": c.store, "reason": c.reason}},
			func() float64 { return float64(c.f()) })); err != nil {
			return err
		}
	}
	return nil
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// ringVersionDesc describes ringlimit_ring_version.
var ringVersionDesc = prometheus.NewDesc("ringlimit_ring_version",
	"Always 1; the version label is this node's ring version (16 hex digits, 0 before the first ring): nodes that agree on the members show the same, so more than one value across a cluster's nodes (count(count by (version) (ringlimit_ring_version)) > 1) means their rings disagree.",
	[]string{"version"}, nil)

// ringVersion exports the router's current ring version when scraped.
type ringVersion struct{ r *Router }

func (ringVersion) Describe(ch chan<- *prometheus.Desc) { ch <- ringVersionDesc }

func (v ringVersion) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(ringVersionDesc, prometheus.GaugeValue, 1, fmt.Sprintf("%016x", v.r.RingVersion()))
}
