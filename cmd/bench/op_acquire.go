package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"google.golang.org/grpc"

	pb "github.com/ringlimit/ringlimit/proto/ringlimitv1"
)

// --op acquire-release: each request of the loop is one Acquire of an
// inline CONCURRENCY limit of --concurrency-limit on the key, for
// --lease-ttl, then, when it is granted, one Release of its lease with
// outcome OK and the latency the lease covered. One operation is the
// pair: its latency is the pair's, calls counts both calls (one when the
// acquire was refused). A pair begun is finished (run.go's loop), so no
// lease the run was granted is left open when it ends.
//
// The targets: ringlimit over gRPC (--proto grpc: RateLimiter/Acquire and
// RateLimiter/Release, each to the next entry node in turn), ringlimit
// through the Go client (--proto client: Client.Acquire and
// Client.Release, op_acquire_client.go) and the Redis semaphore baseline
// (--target redis://…, target_redis_sem.go).
const opAcquireRelease = "acquire-release"

// The flags of --op acquire-release.
const (
	defaultConcurrencyLimit = 64
	defaultLeaseTTL         = 30 * time.Second
)

// acquireFlags registers --concurrency-limit and --lease-ttl on fs.
func (c *config) acquireFlags(fs *flag.FlagSet) {
	fs.Int64Var(&c.concurrencyLimit, "concurrency-limit", defaultConcurrencyLimit,
		"--op acquire-release: leases in flight at once on a key (an inline CONCURRENCY limit; the Redis semaphore's size)")
	fs.DurationVar(&c.leaseTTL, "lease-ttl", defaultLeaseTTL,
		"--op acquire-release: how long a lease lives unless released (whole milliseconds, 1ms to 24h)")
}

// validateAcquire checks the flags of --op acquire-release.
func (c *config) validateAcquire() error {
	switch {
	case c.targetHealth:
		return errors.New("--op acquire-release: ringlimit (--proto grpc or client) or the Redis semaphore (--target redis://…), not --target-health")
	case c.redis == "" && c.proto != "grpc" && c.proto != "client":
		return fmt.Errorf("--op acquire-release: --proto grpc or client, got %q", c.proto)
	case c.batch != 1:
		return fmt.Errorf("--batch: --op acquire-release sends one acquire per request, got %d", c.batch)
	case c.lease:
		return errors.New("--op acquire-release: --lease is for checks (token leases), not concurrency leases")
	case c.concurrencyLimit < 1:
		return fmt.Errorf("--concurrency-limit: at least 1, got %d", c.concurrencyLimit)
	case c.leaseTTL < time.Millisecond || c.leaseTTL > 24*time.Hour || c.leaseTTL%time.Millisecond != 0:
		return fmt.Errorf("--lease-ttl: whole milliseconds from 1ms to 24h, got %v", c.leaseTTL)
	}
	return nil
}

// acquireRequest is the Acquire of one slot on key under limit, for ttl.
func acquireRequest(key string, limit *pb.Limit, ttl time.Duration) *pb.AcquireRequest {
	return &pb.AcquireRequest{Check: &pb.Check{Key: key, Limit: limit}, TtlMs: ttl.Milliseconds()}
}

// releaseRequest is the Release of lease after work that went well and
// took latency (whole milliseconds, rounded down).
func releaseRequest(lease string, latency time.Duration) *pb.ReleaseRequest {
	return &pb.ReleaseRequest{Lease: lease, Outcome: pb.Outcome_OUTCOME_OK, LatencyMs: latency.Milliseconds()}
}

// leaseAnswer reads an acquire's decision: whether it was granted and the
// lease to release ("" when refused or degraded: a degraded acquire holds
// no lease). A granted acquire without a lease is an error: a node that
// does not know acquire must not be measured as if it did.
func leaseAnswer(d *pb.Decision) (lease string, err error) {
	switch {
	case d == nil:
		return "", errors.New("an acquire answered without a decision")
	case !d.GetAllowed() || d.GetDegraded():
		return "", nil
	case d.GetLease() == "":
		return "", errors.New("a granted acquire without a lease (does the node know acquire?)")
	}
	return d.GetLease(), nil
}

// acquireTarget is ringlimit under --op acquire-release over gRPC: one
// RateLimiter/Acquire, then RateLimiter/Release of the lease it granted,
// each to the next entry node in turn (a lease names its key: any node
// routes it). Safe for use by many goroutines.
type acquireTarget struct {
	addrs   []string
	conns   []*grpc.ClientConn
	clients []pb.RateLimiterClient
	rr      roundRobin
	limit   *pb.Limit // CONCURRENCY, --concurrency-limit; shared read-only
	ttl     time.Duration
}

func newAcquireTarget(cfg *config) (*acquireTarget, error) {
	conns, err := dialAll(cfg.targets)
	if err != nil {
		return nil, err
	}
	t := &acquireTarget{addrs: cfg.targets, conns: conns, rr: roundRobin{n: uint64(len(conns))},
		limit: &pb.Limit{Algorithm: pb.Algorithm_CONCURRENCY, Limit: cfg.concurrencyLimit}, ttl: cfg.leaseTTL}
	for _, cc := range conns {
		t.clients = append(t.clients, pb.NewRateLimiterClient(cc))
	}
	return t, nil
}

// CheckCalls is one acquire and, when granted, its release.
func (t *acquireTarget) CheckCalls(ctx context.Context, keys []string) (allowed, rejected, degraded, calls int, err error) {
	if len(keys) != 1 {
		return 0, 0, 0, 0, fmt.Errorf("acquire-release: %d keys in a request, want 1", len(keys))
	}
	t0 := time.Now()
	resp, err := t.clients[t.rr.pick()].Acquire(ctx, acquireRequest(keys[0], t.limit, t.ttl))
	if err != nil {
		return 0, 0, 0, 0, err
	}
	d := resp.GetDecision()
	lease, err := leaseAnswer(d)
	if err != nil || lease == "" {
		a, r, dg, n := tally(d, false)
		return a, r, dg, n, err
	}
	rel, err := t.clients[t.rr.pick()].Release(ctx, releaseRequest(lease, time.Since(t0)))
	if err != nil {
		return 0, 0, 0, 0, fmt.Errorf("release: %w", err)
	}
	if !rel.GetReleased() {
		return 0, 0, 0, 0, fmt.Errorf("release: lease %q not released (expired, or released twice)", lease)
	}
	a, r, dg, n := tally(d, true)
	return a, r, dg, n, nil
}

// Check is CheckCalls without the count of calls.
func (t *acquireTarget) Check(ctx context.Context, keys []string) (allowed, rejected, degraded int, err error) {
	allowed, rejected, degraded, _, err = t.CheckCalls(ctx, keys)
	return allowed, rejected, degraded, err
}

func (t *acquireTarget) Describe() string {
	return fmt.Sprintf("grpc acquire+release, concurrency %d, lease ttl %v %v", t.limit.GetLimit(), t.ttl, t.addrs)
}
func (t *acquireTarget) Close() error { return closeAll(t.conns) }

// newPairTarget is the target of --op acquire-release: the Redis
// semaphore with --target, else ringlimit through the Go client with
// --proto client, else over gRPC.
func newPairTarget(cfg *config) (multiCallTarget, error) {
	switch {
	case cfg.redis != "":
		return newRedisSemTarget(cfg)
	case cfg.proto == "client":
		return newClientAcquireTarget(cfg)
	}
	return newAcquireTarget(cfg)
}

// acquireFigures fills in what a run of --op acquire-release measured
// against: the limit is a concurrency limit (no period, no burst).
func acquireFigures(res *result, cfg *config) {
	res.Algorithm, res.Limit, res.PerMs, res.Burst = "concurrency", cfg.concurrencyLimit, 0, 0
	res.RejectMode = false
	res.LeaseTTLMs = cfg.leaseTTL.Milliseconds()
}
