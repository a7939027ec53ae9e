package client

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringlimit/ringlimit/clock"
)

// outage follows whether the cluster answers: it counts every call no node
// answered and logs the first of an outage and the first answer after it.
// Safe for concurrent use; the answered path costs one atomic load while
// the cluster is up.
type outage struct {
	errors atomic.Uint64 // calls that ended in ErrNoNode, ever
	down   atomic.Bool   // the last call no node answered

	mu    sync.Mutex // serialises the transitions and their log lines
	since clock.Instant
	// upTo is errors when the last outage ended: every call no node
	// answered since belongs to the next outage.
	upTo uint64
}

// failed records a call that no node answered; the first of an outage logs.
func (o *outage) failed(c *Client, err error) {
	if c.ctx.Err() != nil {
		return // closed: not an outage
	}
	o.errors.Add(1)
	if o.down.Load() {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.down.Load() {
		return
	}
	o.since = c.cfg.Clock.Now()
	o.down.Store(true)
	c.cfg.Logger.Warn("ringlimit: cluster unreachable: no node answered",
		"targets", len(c.nodes()), "err", err)
}

// answered records a call a node answered; the first after an outage logs.
func (o *outage) answered(c *Client) {
	if !o.down.Load() {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.down.Load() {
		return
	}
	o.down.Store(false)
	n := o.errors.Load()
	failed := n - o.upTo
	o.upTo = n
	c.cfg.Logger.Info("ringlimit: cluster reachable again",
		"failed_calls", failed,
		"outage", c.cfg.Clock.Now().Sub(o.since).Round(time.Millisecond))
}

// Errors returns how many calls (Check, and the Limiter and Middleware
// calls made through it) no node answered: each one a check that was not
// rate limited by the cluster. It only grows. Export it as the counter
// ringlimit_client_errors_total, for example with Prometheus:
//
//	prometheus.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
//		Name: "ringlimit_client_errors_total",
//		Help: "Calls to the ringlimit cluster that no node answered.",
//	}, func() float64 { return float64(cl.Errors()) }))
func (c *Client) Errors() uint64 { return c.outage.errors.Load() }
