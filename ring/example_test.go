package ring_test

import (
	"fmt"

	"github.com/ringlimit/ringlimit/ring"
)

func Example() {
	r, err := ring.New(ring.DefaultConfig(), []string{"node-c", "node-a", "node-b"})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, key := range []string{"user:1", "user:2", "user:5", "ip:203.0.113.9"} {
		owner, err := r.Owner(key)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%s → %s\n", key, owner)
	}
	fmt.Println(r.Members(), r.Len(), r.Has("node-b"))

	// The same members, learned in another order, make the same ring.
	same, _ := ring.New(ring.DefaultConfig(), []string{"node-b", "node-c", "node-a"})
	fmt.Println(same.Version() == r.Version())

	var empty ring.Ring
	_, err = empty.Owner("user:1")
	fmt.Println(err, empty.Version())
	// Output:
	// user:1 → node-c
	// user:2 → node-a
	// user:5 → node-b
	// ip:203.0.113.9 → node-c
	// [node-a node-b node-c] 3 true
	// true
	// ring: no members 0
}
