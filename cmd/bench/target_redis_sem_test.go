package main

import (
	"context"
	"net"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// startRedis runs redis-server on a free loopback port (no persistence)
// until the test ends, and returns its address. It skips the test when
// redis-server is not installed.
func startRedis(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server is not installed (apt-get install -y redis-server): the Redis semaphore is not tested")
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_, port, _ := net.SplitHostPort(addr)
	lis.Close()
	cmd := exec.Command(bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := rdb.Ping(ctx).Err()
		cancel()
		if err == nil {
			return addr
		}
		select {
		case err := <-exited:
			t.Fatalf("redis-server on %s exited (%v): %s", addr, err, out.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on %s does not answer: %v", addr, err)
		}
	}
}

// TestRedisSemScript: the acquire script and the release, step by step on
// a fake clock: at most 3 members, a release frees a slot, a member older
// than the TTL is dropped by the next acquire.
func TestRedisSemScript(t *testing.T) {
	addr := startRedis(t)
	cfg := shortConfig(t, "--op", "acquire-release", "--target", "redis://"+addr, "--concurrency-limit", "3", "--lease-ttl", "30s")
	sem, err := newRedisSemTarget(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer sem.Close()
	ctx := context.Background()
	const key = "bench:sem"
	t0 := time.UnixMilli(1_800_000_000_000)
	card := func() int64 {
		t.Helper()
		n, err := sem.rdb.ZCard(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	for i, s := range []struct {
		release bool
		member  string
		at      time.Duration // after t0
		want    bool          // granted; released without an error
		card    int64         // members after the step
	}{
		{false, "m1", 0, true, 1},
		{false, "m2", 0, true, 2},
		{false, "m3", time.Millisecond, true, 3},
		{false, "m4", 2 * time.Millisecond, false, 3},
		{true, "m2", 0, true, 2},
		{false, "m4", 3 * time.Millisecond, true, 3},
		{true, "m2", 0, false, 3},                                   // released twice
		{false, "m5", 30*time.Second - time.Millisecond, false, 3},  // nothing older than the TTL yet
		{false, "m5", 30 * time.Second, true, 3},                    // m1 (at t0) dropped
		{false, "m6", 30*time.Second + 3*time.Millisecond, true, 2}, // m3 and m4 dropped
		{true, "m1", 0, false, 2},                                   // expired
		{true, "m5", 0, true, 1},
		{true, "m6", 0, true, 0},
	} {
		var got bool
		if s.release {
			got = sem.release(ctx, key, s.member) == nil
		} else if got, err = sem.acquire(ctx, key, s.member, t0.Add(s.at)); err != nil {
			t.Fatal(err)
		}
		if n := card(); got != s.want || n != s.card {
			t.Errorf("step %d: release %v of %s at t0+%v = %v with %d members, want %v with %d", i, s.release, s.member, s.at, got, n, s.want, s.card)
		}
	}
	if n, err := sem.rdb.Exists(ctx, key).Result(); err != nil || n != 0 {
		t.Errorf("EXISTS %s = %d, %v after the last release; want 0", key, n, err)
	}
}

// TestRunRedisSemaphore: 8 callers on one key with a limit of 3: the set
// never holds more than 3 members, and it is empty after the run.
func TestRunRedisSemaphore(t *testing.T) {
	addr := startRedis(t)
	cfg := shortConfig(t, "--op", "acquire-release", "--target", "redis://"+addr, "--concurrency-limit", "3",
		"--concurrency", "8", "--dist", "hot")
	const key = "bench:0"
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()

	done := make(chan struct{})
	var polls, most int64
	var pollErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			n, err := rdb.ZCard(context.Background(), key).Result()
			if err != nil {
				pollErr = err
				return
			}
			polls++
			most = max(most, n)
		}
	})
	res, err := run(context.Background(), cfg)
	close(done)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	checkCommon(t, res)
	if pollErr != nil || polls == 0 || most > 3 {
		t.Errorf("ZCARD %s polled %d times (%v): at most %d members, want at most 3", key, polls, pollErr, most)
	}
	if res.Checks != res.Requests || res.Calls != res.Requests+res.Allowed || res.Allowed == 0 || res.Rejected == 0 {
		t.Errorf("requests %d checks %d allowed %d rejected %d calls %d; want calls = requests + allowed, some refused",
			res.Requests, res.Checks, res.Allowed, res.Rejected, res.Calls)
	}
	if res.Proto != "redis" || res.Algorithm != "concurrency" || res.Limit != 3 || !strings.HasPrefix(res.Target, "redis semaphore") {
		t.Errorf("proto %q algorithm %q limit %d target %q", res.Proto, res.Algorithm, res.Limit, res.Target)
	}
	if n, err := rdb.Exists(context.Background(), key).Result(); err != nil || n != 0 {
		t.Errorf("EXISTS %s = %d, %v after the run; want 0 (every member released)", key, n, err)
	}
	if n, err := rdb.DBSize(context.Background()).Result(); err != nil || n != 0 {
		t.Errorf("DBSIZE = %d, %v after the run; want 0", n, err)
	}
	t.Logf("%d pairs, %d refused, %d ZCARD polls, at most %d members", res.Allowed, res.Rejected, polls, most)
}
