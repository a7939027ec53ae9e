package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"

	"google.golang.org/grpc"

	"github.com/ringlimit/ringlimit/api"
	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/client"
	"github.com/ringlimit/ringlimit/clock"
	"github.com/ringlimit/ringlimit/forward"
	"github.com/ringlimit/ringlimit/peer"
	"github.com/ringlimit/ringlimit/policy"
	"github.com/ringlimit/ringlimit/ring"
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

// startExampleNode wires one node: a key store, a router that owns every
// key, the policy, the API, and a gRPC server on a loopback port serving the
// public API and the peer service. stop shuts it down.
func startExampleNode(policyYAML string) (addr string, stop func(), err error) {
	dir, err := os.MkdirTemp("", "ringlimit-example")
	if err != nil {
		return "", nil, err
	}
	path := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(path, []byte(policyYAML), 0o644); err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	quiet := slog.New(slog.DiscardHandler)
	clk := clock.System() // the node's one clock
	store, err := bucket.NewStore(bucket.StoreConfig{MaxKeys: 1 << 16, Shards: 16})
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	addr = lis.Addr().String()
	pool, err := peer.NewPool(peer.Config{Self: "node-1", Clock: clk, Logger: quiet})
	if err != nil {
		lis.Close()
		os.RemoveAll(dir)
		return "", nil, err
	}
	router, err := forward.New(forward.Config{Self: "node-1", SelfAddr: addr, Store: store, Peers: pool, Clock: clk, Logger: quiet,
		NewRing: func(members []string) (forward.Owners, error) { return ring.New(ring.DefaultConfig(), members) }})
	if err != nil {
		pool.Close(context.Background())
		lis.Close()
		os.RemoveAll(dir)
		return "", nil, err
	}
	cleanup := func() {
		router.Close(context.Background())
		pool.Close(context.Background())
		lis.Close()
		os.RemoveAll(dir)
	}
	pol, err := policy.NewManager(policy.ManagerConfig{Path: path, Clock: clk, Logger: quiet})
	if err != nil {
		cleanup()
		return "", nil, err
	}
	a, err := api.New(api.Config{Checker: router, Stats: store, Policy: pol, Logger: quiet,
		AddOverride: func(_ context.Context, o policy.Override) (policy.Override, error) { return pol.AddOverride(o) },
		RevokeOverride: func(_ context.Context, id, actor string) (policy.Override, error) {
			return pol.RevokeOverride(id, actor)
		}})
	if err != nil {
		cleanup()
		return "", nil, err
	}
	psrv, err := peer.NewServer(peer.ServerConfig{Self: "node-1", Handler: router, Clock: clk})
	if err != nil {
		cleanup()
		return "", nil, err
	}
	srv := grpc.NewServer()
	a.RegisterGRPC(srv)
	psrv.Register(srv)
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Serve(lis)
	}()
	router.SetMembers([]forward.Member{{Name: "node-1", Addr: addr}})
	return addr, func() {
		srv.Stop()
		<-served
		cleanup()
	}, nil
}
