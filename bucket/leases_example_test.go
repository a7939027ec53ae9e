package bucket_test

import (
	"fmt"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/clock"
)

// At most 2 in flight: a third acquire waits for the earliest lease to
// expire, a release frees a slot at once, and a second release of the
// same lease changes nothing.
func ExampleLeases() {
	set, err := (&bucket.LimitSpec{Algorithm: "concurrency", Limit: 2}).Parse("limit")
	if err != nil {
		panic(err)
	}
	t := bucket.NewLeases(0)
	var now clock.Instant
	a, _ := t.Acquire("c|report", set.Limit, 30*time.Second, "", now)
	b, _ := t.Acquire("c|report", set.Limit, 30*time.Second, "", now.Add(time.Second))
	c, _ := t.Acquire("c|report", set.Limit, 30*time.Second, "", now.Add(2*time.Second))
	fmt.Println(a.Granted, b.Granted, c.Granted, c.RetryAfter)
	_, ok := t.Release(a.Lease.ID, now.Add(3*time.Second))
	_, again := t.Release(a.Lease.ID, now.Add(3*time.Second))
	fmt.Println(ok, again, t.InFlight("c|report", now.Add(3*time.Second)))
	// Output:
	// true true false 28s
	// true false 1
}
