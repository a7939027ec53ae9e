package policy_test

import (
	"fmt"

	"github.com/ringlimit/ringlimit/policy"
)

func Example() {
	set, err := policy.Parse([]byte(`
version: demo
policies:
  api:
    default_tier: free
    tiers:
      free: { limit: 10, per: 1s, burst: 20 }
    routes:
      - match: /reports
        cost: 10
      - match: /login
        limit: { limit: 5, per: 1m, key: ip+route, failure_mode: fail_closed }
    global: { limit: 2000, per: 1s, burst: 6000 }
`), "inline")
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, route := range []string{"/reports", "/login"} {
		checks, err := set.Policies[set.Default].Resolve(policy.Request{User: "42", IP: "203.0.113.9", Route: route}, nil)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(route)
		for _, c := range checks {
			fmt.Printf("  %-13s cost %-2d %-32s key %s\n", c.Scope, c.Cost, c.Limit, c.Key)
		}
	}
	// Output:
	// /reports
	//   tier:free     cost 10 token_bucket 10/1s burst 20      key p|api|tier:free|user:42
	//   global        cost 10 token_bucket 2000/1s burst 6000  key p|api|global|all
	// /login
	//   route:/login  cost 1  token_bucket 5/1m0s burst 5      key p|api|route:/login|ip:203.0.113.9|/login
	//   tier:free     cost 1  token_bucket 10/1s burst 20      key p|api|tier:free|user:42
	//   global        cost 1  token_bucket 2000/1s burst 6000  key p|api|global|all
}
