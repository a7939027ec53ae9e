package cluster

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
)

// gathered returns the value of every counter, gauge and summary count in
// reg, by metric name (labels, if any, are summed).
func gathered(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == routeLabel {
					t.Errorf("%s carries the routing label", mf.GetName())
				}
			}
			switch {
			case m.Counter != nil:
				out[mf.GetName()] += m.GetCounter().GetValue()
			case m.Gauge != nil:
				out[mf.GetName()] += m.GetGauge().GetValue()
			case m.Summary != nil:
				out[mf.GetName()+"_count"] += float64(m.GetSummary().GetSampleCount())
			}
		}
	}
	return out
}

// Each Cluster's memberlist metrics reach its own registry, and only its
// own, though go-metrics has one global sink: two members that joined
// each other see at least two alive messages (their own and the other's),
// a member alone in the same process exactly one (its own). The series of
// rare events exist at 0 from the start.
func TestMemberlistMetricsPerCluster(t *testing.T) {
	regs := map[string]*prometheus.Registry{"a": prometheus.NewRegistry(), "b": prometheus.NewRegistry(), "alone": prometheus.NewRegistry()}
	a := startNode(t, "a", func(c *Config) { c.Registerer = regs["a"] })
	b := startNode(t, "b", withSeeds(a.LocalAddr()), func(c *Config) { c.Registerer = regs["b"] })
	startNode(t, "alone", func(c *Config) { c.Registerer = regs["alone"] })
	testkit.WaitFor(t, 10*time.Second, "a and b converge", func() error { return expectAlive([]*testNode{a, b}, a, b) })
	testkit.WaitFor(t, 10*time.Second, "a and b gossip and probe", func() error {
		for _, name := range []string{"a", "b"} {
			got := gathered(t, regs[name])
			for _, m := range []string{"memberlist_msg_alive", "memberlist_gossip_count", "memberlist_probeNode_count", "memberlist_udp_sent"} {
				if got[m] < 1 {
					return &missing{name, m}
				}
			}
		}
		return nil
	})
	for name, reg := range regs {
		got := gathered(t, reg)
		for _, m := range []string{"memberlist_msg_suspect", "memberlist_msg_dead", "memberlist_degraded_probe", "memberlist_health_score"} {
			if _, ok := got[m]; !ok {
				t.Errorf("%s: no %s series", name, m)
			}
		}
		want := 2.0
		if name == "alone" {
			if got["memberlist_msg_alive"] != 1 {
				t.Errorf("alone: memberlist_msg_alive = %v, want 1 (its own): the others' metrics leaked into its registry", got["memberlist_msg_alive"])
			}
			continue
		}
		if got["memberlist_msg_alive"] < want {
			t.Errorf("%s: memberlist_msg_alive = %v, want at least %v", name, got["memberlist_msg_alive"], want)
		}
	}
}

// Close removes a Cluster's route: its sink gets nothing more.
func TestMemberlistMetricsRouteRemovedOnClose(t *testing.T) {
	before := routes()
	n := startNode(t, "x", func(c *Config) { c.Registerer = prometheus.NewRegistry() })
	if got := routes(); got != before+1 {
		t.Fatalf("%d routes after New, want %d", got, before+1)
	}
	if err := n.Close(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if got := routes(); got != before {
		t.Fatalf("%d routes after Close, want %d", got, before)
	}
}

func routes() int {
	router.mu.RLock()
	defer router.mu.RUnlock()
	return len(router.sinks)
}

type missing struct{ node, metric string }

func (m *missing) Error() string { return m.node + ": " + m.metric + " not reported yet" }
