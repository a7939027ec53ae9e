package forward

import "github.com/prometheus/client_golang/prometheus"

// leaseOps counts concurrency operations (ringlimit_leases_total) by op
// and result, the label lookups cached.
type leaseOps struct {
	vec *prometheus.CounterVec
	c   map[[2]string]prometheus.Counter // filled once; read-only after
}

// leaseResults are the results of each op.
var leaseResults = map[string][]string{
	"acquire": {"granted", "refused", "degraded", "error"},
	"renew":   {"ok", "not_found", "unavailable"},
	"release": {"released", "unknown", "unavailable"},
}

func newLeaseOps(reg prometheus.Registerer) (*leaseOps, error) {
	o := &leaseOps{vec: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ringlimit_leases_total",
		Help: "Concurrency operations this node's API asked for, by op (acquire, renew, release) and result (acquire: granted, refused, degraded, error; renew: ok, not_found, unavailable; release: released, unknown, unavailable).",
	}, []string{"op", "result"}), c: map[[2]string]prometheus.Counter{}}
	for op, results := range leaseResults {
		for _, res := range results {
			o.c[[2]string{op, res}] = o.vec.WithLabelValues(op, res)
		}
	}
	if reg != nil {
		if err := reg.Register(o.vec); err != nil {
			return nil, err
		}
	}
	return o, nil
}

// leaseOp counts one operation.
func (m *metrics) leaseOp(op, result string) {
	if c, ok := m.leases.c[[2]string{op, result}]; ok {
		c.Inc()
	}
}
