package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// semAcquireScript is the usual Redis semaphore's acquire, atomic in one
// script: drop the members older than the TTL, count the rest, and add
// the caller's member when there is room. KEYS[1] is the key, ARGV the
// caller's clock and the TTL in milliseconds, the limit and the member.
// It answers 1 when granted, 0 when refused.
var semAcquireScript = redis.NewScript(`
local now = tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[2]))
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[3]) then
	redis.call('ZADD', KEYS[1], now, ARGV[4])
	return 1
end
return 0
`)

// redisSemTarget is the baseline of --op acquire-release (--target
// redis://…): the sorted-set semaphore a user would otherwise write with
// go-redis. Acquire is semAcquireScript (EVALSHA) with a random member,
// release is ZREM of that member: two calls per granted pair, one per
// refused, over a pool as large as the concurrency. The keys are the
// workload's keys as they are. Safe for use by many goroutines.
type redisSemTarget struct {
	addr  string
	rdb   *redis.Client
	limit int64
	ttl   time.Duration
	now   func() time.Time // the callers' clock, the scores' milliseconds
}

func newRedisSemTarget(cfg *config) (*redisSemTarget, error) {
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
	// Load the script once, so that every acquire is an EVALSHA.
	if err := semAcquireScript.Load(ctx, rdb).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("--target %s: loading the semaphore script: %w", cfg.redis, err)
	}
	return &redisSemTarget{addr: u.Host, rdb: rdb, limit: cfg.concurrencyLimit, ttl: cfg.leaseTTL, now: time.Now}, nil
}

// semMember is a random member id: what a holder names its slot with.
func semMember() string { return strconv.FormatUint(rand.Uint64(), 36) }

// acquire runs the acquire script for member on key at now.
func (t *redisSemTarget) acquire(ctx context.Context, key, member string, now time.Time) (bool, error) {
	n, err := semAcquireScript.Run(ctx, t.rdb, []string{key}, now.UnixMilli(), t.ttl.Milliseconds(), t.limit, member).Int64()
	if err != nil {
		return false, err
	}
	return n == 1, nil
}

// release removes member from key's set; it says an error when the
// member was not there (expired by a later acquire, or released twice).
func (t *redisSemTarget) release(ctx context.Context, key, member string) error {
	n, err := t.rdb.ZRem(ctx, key, member).Result()
	if err != nil {
		return err
	}
	if n != 1 {
		return fmt.Errorf("member %q of %q was not in the set (expired, or released twice)", member, key)
	}
	return nil
}

// CheckCalls is one acquire and, when granted, its release.
func (t *redisSemTarget) CheckCalls(ctx context.Context, keys []string) (allowed, rejected, degraded, calls int, err error) {
	if len(keys) != 1 {
		return 0, 0, 0, 0, fmt.Errorf("acquire-release: %d keys in a request, want 1", len(keys))
	}
	member := semMember()
	ok, err := t.acquire(ctx, keys[0], member, t.now())
	if err != nil {
		return 0, 0, 0, 0, err
	}
	if !ok {
		return 0, 1, 0, 1, nil
	}
	if err := t.release(ctx, keys[0], member); err != nil {
		return 0, 0, 0, 0, fmt.Errorf("release: %w", err)
	}
	return 1, 0, 0, 2, nil
}

// Check is CheckCalls without the count of calls.
func (t *redisSemTarget) Check(ctx context.Context, keys []string) (allowed, rejected, degraded int, err error) {
	allowed, rejected, degraded, _, err = t.CheckCalls(ctx, keys)
	return allowed, rejected, degraded, err
}

func (t *redisSemTarget) Describe() string {
	return fmt.Sprintf("redis semaphore (ZSET, Lua acquire, ZREM release), concurrency %d, ttl %v %s", t.limit, t.ttl, t.addr)
}

func (t *redisSemTarget) Close() error { return t.rdb.Close() }
