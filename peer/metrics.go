package peer

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the peer transport's Prometheus collectors, prefixed
// ringlimit_. One set serves a node's Pool and Server.
type Metrics struct {
	batches         prometheus.Counter
	reverseBatches  prometheus.Counter
	forwarded       prometheus.Counter
	abandoned       prometheus.Counter
	busy            prometheus.Counter
	refused         prometheus.Counter
	invalidStates   prometheus.Counter
	batchSize       prometheus.Histogram
	received        prometheus.Counter
	handoffSent     prometheus.Counter
	handoffReceived prometheus.Counter
	replicated      prometheus.Counter
	replicateErrors prometheus.Counter
	replicas        prometheus.Counter
	unauthenticated prometheus.Counter
	// certClosed counts the connections closed because the certificate
	// of their other side no longer verifies (Server.Sweep).
	certClosed prometheus.Counter
}

func newMetrics() *Metrics {
	return &Metrics{
		batches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ringlimit_forward_rpcs_total",
			Help: "Batches of checks sent to their owners (one message each on the peer's Check stream).",
		}),
		reverseBatches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ringlimit_forward_reverse_rpcs_total",
			Help: "Batches of checks sent to their owners on the Check stream the owner opened to this node (its name sorts first), as part of ringlimit_forward_rpcs_total.",
		}),
		forwarded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ringlimit_forward_checks_total",
			Help: "Checks sent to their owners; divided by ringlimit_forward_rpcs_total it is the batching factor.",
		}),
		abandoned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ringlimit_forward_abandoned_checks_total",
			Help: "Checks not sent to their owners because their caller gave up (deadline or cancel) while they waited for a batch.",
		}),
		busy: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ringlimit_forward_busy_checks_total",
			Help: "Checks not sent to their owners because the owner's queue was full (ErrBusy); they were answered by their failure mode.",
		}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ringlimit_peer_oversize_refused_total",
			Help: "Peer messages (check batches, handoffs, replicas) refused whole because they carried more than the limit.",
		}),
		invalidStates: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ringlimit_peer_invalid_states_total",
			Help: "Bucket states received from peers (handoffs, replicas) and left out as invalid: a bad key or limit, or a negative used.",
		}),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ringlimit_forward_batch_checks",
			Help:    "Checks per batch sent to an owner.",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512},
		}),
		received: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ringlimit_peer_checks_total",
			Help: "Checks received from other nodes and decided here as owner.",
		}),
		handoffSent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ringlimit_handoff_keys_sent_total",
			Help: "Bucket states pushed to their new owners after ring changes.",
		}),
		handoffReceived: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ringlimit_handoff_keys_received_total",
			Help: "Bucket states received from previous owners and merged.",
		}),
		replicated: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ringlimit_peer_replicated_total",
			Help: "Bucket states sent to successors in Replicate calls they acknowledged.",
		}),
		replicateErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ringlimit_peer_replicate_errors_total",
			Help: "Replicate calls to successors that failed (unreachable, timed out, or refused).",
		}),
		replicas: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ringlimit_peer_replicas_received_total",
			Help: "Bucket states received from the owners this node succeeds and accepted.",
		}),
		unauthenticated: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ringlimit_peer_unauthenticated_total",
			Help: "Peer calls refused because the caller showed no verified certificate, or one that does not name the member it claimed to be or a member of this cluster.",
		}),
		certClosed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ringlimit_peer_connections_closed_total",
			Help: "Peer connections this node served that it closed after a CA or certificate reload, because the other side's certificate no longer verifies against the CAs loaded.",
		}),
	}
}

// NewMetrics returns the transport's metrics, registered with reg unless
// reg is nil.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := newMetrics()
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.batches, m.reverseBatches, m.forwarded, m.abandoned, m.busy, m.refused, m.invalidStates, m.batchSize, m.received, m.handoffSent, m.handoffReceived,
		m.replicated, m.replicateErrors, m.replicas, m.unauthenticated, m.certClosed} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
