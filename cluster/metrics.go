package cluster

import (
	"strconv"
	"sync"
	"sync/atomic"

	gometrics "github.com/hashicorp/go-metrics"
	gmprom "github.com/hashicorp/go-metrics/prometheus"
	"github.com/prometheus/client_golang/prometheus"
)

// memberlist reports its metrics (memberlist_gossip, memberlist_msg_alive,
// memberlist_probeNode, ...) to github.com/hashicorp/go-metrics' global
// sink only: there is no per-instance sink. So that several Clusters in one
// process (tests run three nodes in one) each export their own on their
// own registry, the first Cluster with a Registerer installs a router as
// go-metrics' global sink, once per process (replacing any sink set
// before), and each such Cluster tags its memberlist's metrics with a
// label naming it (memberlist.Config.MetricLabels). The router hands each
// metric, the tag removed, to that Cluster's PrometheusSink, registered on
// Config.Registerer; a Cluster's sink is removed from the router on Close.
// This is the package's one global, forced by go-metrics' design.
var (
	routerOnce sync.Once
	router     = &sinkRouter{sinks: map[string]*gmprom.PrometheusSink{}}
	routeSeq   atomic.Uint64
)

// routeLabel is the label that tags a Cluster's memberlist metrics for the
// router; it never reaches Prometheus.
const routeLabel = "ringlimit_cluster_route"

// memberlistMetrics are declared up front, at 0, so that their series exist
// from the start (a failed probe or a dead member may never happen on a
// healthy cluster, and an alert needs a series to read); memberlist creates
// the others when it first reports them. Timings are summaries in
// milliseconds (go-metrics' unit), sizes in bytes.
var (
	memberlistCounters = []gmprom.CounterDefinition{
		{Name: []string{"memberlist", "msg", "alive"}, Help: "Alive messages processed (members joining or refuting a suspicion)."},
		{Name: []string{"memberlist", "msg", "suspect"}, Help: "Suspect messages processed: a member failed a probe."},
		{Name: []string{"memberlist", "msg", "dead"}, Help: "Dead messages processed: a member was declared dead."},
		{Name: []string{"memberlist", "degraded", "probe"}, Help: "Probes that failed or were only answered indirectly while this member's health score was degraded."},
		{Name: []string{"memberlist", "degraded", "timeout"}, Help: "Suspicion timeouts with fewer confirmations than expected."},
		{Name: []string{"memberlist", "tcp", "accept"}, Help: "TCP gossip streams accepted."},
		{Name: []string{"memberlist", "tcp", "connect"}, Help: "TCP gossip streams opened."},
		{Name: []string{"memberlist", "tcp", "sent"}, Help: "Bytes sent over TCP gossip streams."},
		{Name: []string{"memberlist", "udp", "sent"}, Help: "Bytes sent in UDP gossip packets."},
		{Name: []string{"memberlist", "udp", "received"}, Help: "Bytes received in UDP gossip packets."},
	}
	memberlistGauges = []gmprom.GaugeDefinition{
		{Name: []string{"memberlist", "health", "score"}, Help: "This member's health (awareness) score: 0 is healthy, higher means its own probes are failing (a slow or overloaded member)."},
	}
	memberlistSummaries = []gmprom.SummaryDefinition{
		{Name: []string{"memberlist", "gossip"}, Help: "Time of a gossip round, in milliseconds."},
		{Name: []string{"memberlist", "probeNode"}, Help: "Time to probe one member, in milliseconds."},
		{Name: []string{"memberlist", "pushPullNode"}, Help: "Time of a push/pull state exchange, in milliseconds."},
	}
)

// newMetricsRoute registers a PrometheusSink on reg and returns the label
// that routes memberlist's metrics to it, and the function that removes
// the route. It installs the router as go-metrics' global sink on first use.
func newMetricsRoute(reg prometheus.Registerer) (gometrics.Label, func(), error) {
	sink, err := gmprom.NewPrometheusSinkFrom(gmprom.PrometheusOpts{
		Registerer:         reg,
		Name:               "ringlimit_memberlist_sink", // the sink's placeholder descriptor, never collected
		Expiration:         0,                           // never drop a series: the names are few and fixed
		CounterDefinitions: memberlistCounters,
		GaugeDefinitions:   memberlistGauges,
		SummaryDefinitions: memberlistSummaries,
	})
	if err != nil {
		return gometrics.Label{}, nil, err
	}
	routerOnce.Do(func() {
		cfg := gometrics.DefaultConfig("")
		cfg.EnableHostname = false
		cfg.EnableRuntimeMetrics = false
		gometrics.NewGlobal(cfg, router)
	})
	id := strconv.FormatUint(routeSeq.Add(1), 10)
	router.set(id, sink)
	return gometrics.Label{Name: routeLabel, Value: id}, func() { router.set(id, nil) }, nil
}

// sinkRouter is a go-metrics sink that passes each metric to the sink its
// routeLabel names, without that label; a metric without it, or naming a
// removed sink, is dropped. It is safe for concurrent use.
type sinkRouter struct {
	mu    sync.RWMutex
	sinks map[string]*gmprom.PrometheusSink
}

var _ gometrics.PrecisionGaugeMetricSink = (*sinkRouter)(nil)

// set routes id to sink; a nil sink removes the route.
func (r *sinkRouter) set(id string, sink *gmprom.PrometheusSink) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if sink == nil {
		delete(r.sinks, id)
		return
	}
	r.sinks[id] = sink
}

// route finds the sink labels name and returns the labels without the tag.
func (r *sinkRouter) route(labels []gometrics.Label) (*gmprom.PrometheusSink, []gometrics.Label) {
	for i, l := range labels {
		if l.Name != routeLabel {
			continue
		}
		r.mu.RLock()
		sink := r.sinks[l.Value]
		r.mu.RUnlock()
		if sink == nil {
			return nil, nil
		}
		rest := make([]gometrics.Label, 0, len(labels)-1)
		rest = append(append(rest, labels[:i]...), labels[i+1:]...)
		return sink, rest
	}
	return nil, nil
}

func (r *sinkRouter) SetGauge(key []string, val float32) {}

func (r *sinkRouter) SetGaugeWithLabels(key []string, val float32, labels []gometrics.Label) {
	if s, rest := r.route(labels); s != nil {
		s.SetGaugeWithLabels(key, val, rest)
	}
}

func (r *sinkRouter) SetPrecisionGauge(key []string, val float64) {}

func (r *sinkRouter) SetPrecisionGaugeWithLabels(key []string, val float64, labels []gometrics.Label) {
	if s, rest := r.route(labels); s != nil {
		s.SetPrecisionGaugeWithLabels(key, val, rest)
	}
}

func (r *sinkRouter) EmitKey(key []string, val float32) {}

func (r *sinkRouter) IncrCounter(key []string, val float32) {}

func (r *sinkRouter) IncrCounterWithLabels(key []string, val float32, labels []gometrics.Label) {
	if s, rest := r.route(labels); s != nil {
		s.IncrCounterWithLabels(key, val, rest)
	}
}

func (r *sinkRouter) AddSample(key []string, val float32) {}

func (r *sinkRouter) AddSampleWithLabels(key []string, val float32, labels []gometrics.Label) {
	if s, rest := r.route(labels); s != nil {
		s.AddSampleWithLabels(key, val, rest)
	}
}
