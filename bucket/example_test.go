package bucket_test

import (
	"fmt"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/clock"
)

// A token bucket of capacity 20 refilled at 10 per second: a batch of 20 goes
// through, the next check 50 ms later is told to come back in 50 ms.
func Example() {
	lim, err := bucket.NewLimit(bucket.TokenBucket, 10, time.Second, 20)
	if err != nil {
		panic(err)
	}
	b := bucket.New(lim)
	var now clock.Instant // production code reads clock.System().Now()
	d, _ := b.TakeAt(now, 20)
	fmt.Println(d.Allowed, d.Remaining)
	d, _ = b.TakeAt(now.Add(50*time.Millisecond), 1)
	fmt.Println(d.Allowed, d.RetryAfter)
	// Output:
	// true 0
	// false 50ms
}

// The store keeps many keys, each under the limit its checks name.
func ExampleStore_Take() {
	store, err := bucket.NewStore(bucket.StoreConfig{MaxKeys: 1000})
	if err != nil {
		panic(err)
	}
	lim := bucket.MustLimit(bucket.FixedWindow, 2, time.Minute, 0)
	now := clock.FromTime(time.Date(2026, 1, 1, 10, 4, 59, 0, time.UTC))
	for _, key := range []string{"user:1", "user:1", "user:1", "user:2"} {
		d, _ := store.Take(key, &lim, now, 1)
		fmt.Println(key, d.Allowed, d.Remaining, d.RetryAfter)
	}
	// Output:
	// user:1 true 1 0s
	// user:1 true 0 0s
	// user:1 false 0 1s
	// user:2 true 1 0s
}

// A leaky bucket shapes: it admits while the queue has room and says how
// long each caller waits for its turn.
func ExampleLeaky() {
	b := bucket.New(bucket.MustLimit(bucket.LeakyBucket, 10, time.Second, 3))
	for range 4 {
		d, _ := b.TakeAt(0, 1)
		fmt.Println(d.Allowed, d.Delay, d.RetryAfter)
	}
	// Output:
	// true 0s 0s
	// true 100ms 0s
	// true 200ms 0s
	// false 0s 100ms
}

// A limit as a request or a file writes it, parsed once; an error names
// the field under the caller's path.
func ExampleLimitSpec_Parse() {
	set, err := (&bucket.LimitSpec{Limit: 10, Per: "1s", Burst: 50, FailureMode: "fail_open"}).Parse("limit")
	fmt.Println(set.Limit, set.FailureMode, err)
	_, err = (&bucket.LimitSpec{Limit: 10, Per: "10"}).Parse("limit")
	fmt.Println(err)
	_, err = (&bucket.LimitSpec{Algorithm: "fixed_window", Limit: 10, Per: "1m", Lease: true}).Parse("tiers.free")
	fmt.Println(err)
	// Output:
	// token_bucket 10/1s burst 50 fail_open <nil>
	// limit.per: "10" is not a duration (try 10s)
	// tiers.free.lease: only the token bucket can lease, not fixed_window
}
