package main

import (
	"context"
	"fmt"
	"time"

	"github.com/ringlimit/ringlimit/client"
	pb "github.com/ringlimit/ringlimit/proto/ringlimitv1"
)

// clientAcquireTarget is ringlimit under --op acquire-release through the
// project's Go client (--proto client): Client.Acquire of one slot, then
// Client.Release of the lease it granted, what a Go service holding a
// slot around its work does. The client batches lease operations (Leases
// calls) and sends each to its key's owner once an answer named it (a
// lease names its key). Safe for use by many goroutines.
type clientAcquireTarget struct {
	addrs []string
	c     *client.Client
	limit int64 // --concurrency-limit
	ttl   time.Duration
}

func newClientAcquireTarget(cfg *config) (*clientAcquireTarget, error) {
	c, err := client.New(client.Config{Targets: cfg.targets, Timeout: cfg.timeout, MaxInFlight: cfg.inflight})
	if err != nil {
		return nil, err
	}
	return &clientAcquireTarget{addrs: cfg.targets, c: c, limit: cfg.concurrencyLimit, ttl: cfg.leaseTTL}, nil
}

// CheckCalls is one Acquire and, when granted, the Release of its lease
// with outcome OK and the latency it covered.
func (t *clientAcquireTarget) CheckCalls(ctx context.Context, keys []string) (allowed, rejected, degraded, calls int, err error) {
	if len(keys) != 1 {
		return 0, 0, 0, 0, fmt.Errorf("acquire-release: %d keys in a request, want 1", len(keys))
	}
	t0 := time.Now()
	l, err := t.c.Acquire(ctx, keys[0], t.limit, t.ttl, "")
	if err != nil {
		return 0, 0, 0, 0, err
	}
	d := &pb.Decision{Allowed: l.Allowed, Degraded: l.Degraded, Lease: l.ID}
	lease, err := leaseAnswer(d)
	if err != nil || lease == "" {
		a, r, dg, n := tally(d, false)
		return a, r, dg, n, err
	}
	released, err := t.c.Release(ctx, lease, client.OutcomeOK, time.Since(t0))
	if err != nil {
		return 0, 0, 0, 0, fmt.Errorf("release: %w", err)
	}
	if !released {
		return 0, 0, 0, 0, fmt.Errorf("release: lease %q not released (expired, or released twice)", lease)
	}
	a, r, dg, n := tally(d, true)
	return a, r, dg, n, nil
}

// Check is CheckCalls without the count of calls.
func (t *clientAcquireTarget) Check(ctx context.Context, keys []string) (allowed, rejected, degraded int, err error) {
	allowed, rejected, degraded, _, err = t.CheckCalls(ctx, keys)
	return allowed, rejected, degraded, err
}

func (t *clientAcquireTarget) Describe() string {
	return fmt.Sprintf("go client acquire+release, concurrency %d, lease ttl %v %v", t.limit, t.ttl, t.addrs)
}
func (t *clientAcquireTarget) Close() error { return t.c.Close() }
