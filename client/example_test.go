package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/ringlimit/ringlimit/client"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
	"github.com/ringlimit/ringlimit/node"
)

// examplePolicy lets every caller make 2 requests per hour.
const examplePolicy = `
policies:
  api:
    default_tier: free
    tiers:
      free: { limit: 2, per: 1h }
`

// authenticated is the Identity of the example: the user the application
// has verified, here by looking its bearer token up. A real service asks
// its session store or checks a signed token, or reads what its
// authentication middleware put in the request's context. A caller without
// a valid token is known by its IP.
func authenticated(r *http.Request) (apiKey, user string) {
	users := map[string]string{"Bearer alice-secret": "alice"}
	return "", users[r.Header.Get("Authorization")]
}

// Example limits an HTTP handler with Middleware: a node (a cluster of one,
// serving gRPC on a loopback port) runs the policy above; the third request
// of the same user within the hour is answered 429 by the middleware,
// naming the layer that rejected it. The user comes from the application's
// own authentication (Identity), never from a header the client picks.
func Example() {
	addr, stop, err := startExampleNode(examplePolicy)
	if err != nil {
		log.Fatal(err)
	}
	defer stop()

	cl, err := client.New(client.Config{Targets: []string{addr}})
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()
	limit, err := client.Middleware(client.MiddlewareConfig{
		Client:   cl,
		Identity: authenticated,
	})
	if err != nil {
		log.Fatal(err)
	}
	hello := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "hello\n") })
	srv := httptest.NewServer(limit(hello))
	defer srv.Close()

	for range 3 {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/", nil)
		req.Header.Set("Authorization", "Bearer alice-secret")
		resp, err := srv.Client().Do(req)
		if err != nil {
			log.Fatal(err)
		}
		var rejected client.RejectBody
		if resp.StatusCode == http.StatusTooManyRequests {
			json.NewDecoder(resp.Body).Decode(&rejected)
		}
		resp.Body.Close()
		fmt.Println(resp.StatusCode, "remaining", resp.Header.Get("X-RateLimit-Remaining"))
		if rejected.Code != "" {
			fmt.Println(rejected.Code, "by", rejected.Scope)
		}
	}
	// Output:
	// 200 remaining 1
	// 200 remaining 0
	// 429 remaining 0
	// RATE_LIMITED by tier:free
}

// startExampleNode starts one node (a cluster of one) with the policy
// policyYAML, on loopback ports, and returns its gRPC address. stop shuts
// it down.
func startExampleNode(policyYAML string) (addr string, stop func(), err error) {
	dir, err := os.MkdirTemp("", "ringlimit-example")
	if err != nil {
		return "", nil, err
	}
	cfg := node.DefaultLocalConfig()
	cfg.Name, cfg.PolicyPath = "node-1", filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(cfg.PolicyPath, []byte(policyYAML), 0o644); err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	n, err := node.Start(context.Background(), cfg)
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	// Until the node owns keys: on its own ring.
	testkit.Poll(10*time.Second, func() bool { return slices.Contains(n.Router().RingMembers(), "node-1") })
	return n.GRPCAddr(), func() {
		n.Close(context.Background())
		os.RemoveAll(dir)
	}, nil
}
