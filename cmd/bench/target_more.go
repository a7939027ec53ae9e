package main

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/ringlimit/ringlimit/client"
	pb "github.com/ringlimit/ringlimit/proto/ringlimitv1"
)

// clientTarget checks through the project's Go client (--proto client):
// what a Go service would use. Concurrent checks from the goroutines are
// coalesced into batched calls per node.
type clientTarget struct {
	addrs     []string
	c         *client.Client
	limit     *pb.Limit
	unbatched bool
	peek      bool // --op peek: every check peeks
	// --op reserve-settle (op.go): the reserve's cost and TTL, and the draw
	// of each settle's true cost.
	reserveCost int64
	reserveTTL  time.Duration
	trueCost    func(reserved int64) int64
}

func newClientTarget(cfg *config) (*clientTarget, error) {
	alg, err := algorithmFromName(cfg.algorithm)
	if err != nil {
		return nil, err
	}
	c, err := client.New(client.Config{Targets: cfg.targets, Timeout: cfg.timeout, Unbatched: cfg.unbatched, MaxInFlight: cfg.inflight})
	if err != nil {
		return nil, err
	}
	return &clientTarget{addrs: cfg.targets, c: c, unbatched: cfg.unbatched,
		limit: &pb.Limit{Algorithm: alg, Limit: cfg.limit, PerMs: cfg.per.Milliseconds(), Burst: cfg.burst, Lease: cfg.lease},
		peek:  cfg.op == opPeek, reserveCost: cfg.reserveCost, reserveTTL: cfg.reserveTTL, trueCost: trueCost}, nil
}

func (t *clientTarget) Check(ctx context.Context, keys []string) (allowed, rejected, degraded int, err error) {
	checks := make([]*pb.Check, len(keys))
	for i, k := range keys {
		checks[i] = &pb.Check{Key: k, Limit: t.limit, Peek: t.peek}
	}
	ds, err := t.c.Check(ctx, checks...)
	if err != nil {
		return 0, 0, 0, err
	}
	allowed, rejected, degraded = countDecisions(ds)
	return allowed, rejected, degraded, nil
}

func (t *clientTarget) Describe() string {
	mode := "coalescing"
	if t.unbatched {
		mode = "one call per check, routed to owners"
	}
	if t.limit.GetLease() {
		mode += ", leases"
	}
	return fmt.Sprintf("go client (%s) %v", mode, t.addrs)
}
func (t *clientTarget) Close() error { return t.c.Close() }

// redisTarget is the baseline a user would otherwise pick: Redis with
// go-redis and redis_rate (GCRA in one Lua script), one call per check,
// with a pool as large as the concurrency.
type redisTarget struct {
	addr string
	rdb  *redis.Client
	lim  *redis_rate.Limiter
	rate redis_rate.Limit
}

func newRedisTarget(cfg *config) (*redisTarget, error) {
	u, err := url.Parse(cfg.redis)
	if err != nil || u.Scheme != "redis" || u.Host == "" {
		return nil, fmt.Errorf("--target: want redis://host:port, got %q", cfg.redis)
	}
	rdb := redis.NewClient(&redis.Options{Addr: u.Host, PoolSize: cfg.concurrency, MinIdleConns: cfg.concurrency / 2,
		ReadTimeout: cfg.timeout, WriteTimeout: cfg.timeout})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("--target %s: %w", cfg.redis, err)
	}
	burst := cfg.burst
	if burst == 0 {
		burst = cfg.limit
	}
	return &redisTarget{addr: u.Host, rdb: rdb, lim: redis_rate.NewLimiter(rdb),
		rate: redis_rate.Limit{Rate: int(cfg.limit), Burst: int(burst), Period: cfg.per}}, nil
}

func (t *redisTarget) Check(ctx context.Context, keys []string) (allowed, rejected, degraded int, err error) {
	for _, k := range keys {
		res, err := t.lim.Allow(ctx, k, t.rate)
		if err != nil {
			return allowed, rejected, 0, err
		}
		if res.Allowed > 0 {
			allowed++
		} else {
			rejected++
		}
	}
	return allowed, rejected, 0, nil
}

func (t *redisTarget) Describe() string { return "redis_rate " + t.addr }
func (t *redisTarget) Close() error     { return t.rdb.Close() }
