package client_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/client"
)

// exampleClient starts a node of one (no policy needed for inline limits;
// it has the example policy all the same) and a Client on it. done stops
// both.
func exampleClient() (cl *client.Client, done func()) {
	addr, stop, err := startExampleNode(examplePolicy)
	if err != nil {
		log.Fatal(err)
	}
	cl, err = client.New(client.Config{Targets: []string{addr}})
	if err != nil {
		stop()
		log.Fatal(err)
	}
	return cl, func() { cl.Close(); stop() }
}

func ExamplePerSecond() {
	fmt.Println(client.PerSecond(5))
	fmt.Println(client.PerMinute(100).WithBurst(20))
	fmt.Println(client.Per(5, 10*time.Second))
	fmt.Println(client.PerSecond(5).WithAlgorithm(bucket.LeakyBucket))
	// A bad limit is an error where it is used, never a panic.
	fmt.Println(client.PerSecond(0).Validate())
	// Output:
	// 5 per 1s
	// 100 per 1m0s, burst 20
	// 5 per 10s
	// 5 per 1s, leaky_bucket
	// client: limit 0 per 1s: limit: must be at least 1, got 0
}

func ExampleLimiter_Allow() {
	cl, done := exampleClient()
	defer done()
	lim, err := client.NewLimiter(cl, client.PerMinute(3))
	if err != nil {
		log.Fatal(err)
	}
	for range 5 {
		fmt.Print(lim.Allow(context.Background(), "user:42"), " ")
	}
	fmt.Println()
	// Output:
	// true true true false false
}

func ExampleLimiter_AllowN() {
	cl, done := exampleClient()
	defer done()
	lim, err := client.NewLimiter(cl, client.PerMinute(5))
	if err != nil {
		log.Fatal(err)
	}
	for range 2 {
		d, err := lim.AllowN(context.Background(), "upload:42", 3)
		if err != nil {
			log.Fatal(err)
		}
		// One token of 5 per minute is 12 s (less the time since the
		// first call, hence the rounding).
		fmt.Println(d.Allowed, "remaining", d.Remaining, "retry after", d.RetryAfter.Round(time.Second))
	}
	// Output:
	// true remaining 2 retry after 0s
	// false remaining 2 retry after 12s
}

func ExampleLimiter_Wait() {
	cl, done := exampleClient()
	defer done()
	// 20 per second, one at a time: one every 50 ms.
	lim, err := client.NewLimiter(cl, client.PerSecond(20).WithBurst(1))
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	for range 3 {
		if err := lim.Wait(ctx, "job:nightly"); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println("3 admitted; waited at least 100ms:", time.Since(start) >= 100*time.Millisecond)

	// A wait that would outlast the deadline fails at once.
	short, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	fmt.Println(lim.Wait(short, "job:nightly") != nil)
	// Output:
	// 3 admitted; waited at least 100ms: true
	// true
}

func ExampleLimiter_Reserve() {
	cl, done := exampleClient()
	defer done()
	// A leaky bucket shapes: each reservation holds the next place in the
	// key's queue, one a second.
	lim, err := client.NewLimiter(cl, client.PerSecond(1).WithBurst(5).WithAlgorithm(bucket.LeakyBucket))
	if err != nil {
		log.Fatal(err)
	}
	for range 3 {
		r, err := lim.Reserve(context.Background(), "webhook:acme")
		if err != nil {
			log.Fatal(err)
		}
		// A caller sleeps r.Delay(), then acts. Delay shrinks as time
		// passes, hence the rounding.
		fmt.Println(r.OK(), r.Delay().Round(time.Second))
	}
	// Output:
	// true 0s
	// true 1s
	// true 2s
}

// "5 per 10 s per IP", with no policy file on the cluster.
func ExampleMiddleware_inline() {
	cl, done := exampleClient()
	defer done()
	limit, err := client.Middleware(client.MiddlewareConfig{
		Client: cl,
		Limit:  client.Per(5, 10*time.Second), // per client IP by default
	})
	if err != nil {
		log.Fatal(err)
	}
	srv := httptest.NewServer(limit(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "hello\n")
	})))
	defer srv.Close()

	for range 6 {
		resp, err := srv.Client().Get(srv.URL)
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
		fmt.Println(resp.StatusCode, resp.Header.Get("RateLimit-Policy"), resp.Header.Get("RateLimit"))
	}
	// Output:
	// 200 "inline";q=5;w=10 "inline";r=4;t=2
	// 200 "inline";q=5;w=10 "inline";r=3;t=4
	// 200 "inline";q=5;w=10 "inline";r=2;t=6
	// 200 "inline";q=5;w=10 "inline";r=1;t=8
	// 200 "inline";q=5;w=10 "inline";r=0;t=10
	// 429 "inline";q=5;w=10 "inline";r=0;t=10
}

// With no node answering, the middleware serves (the default, fail open)
// and marks the answer X-RateLimit-Status: unavailable; the Client logs the
// outage once and counts every call in Errors.
func ExampleMiddleware_onError() {
	// An address nothing listens on stands for a cluster that is down.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	down := lis.Addr().String()
	lis.Close()

	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey || a.Key == "err" {
				return slog.Attr{} // keep the output stable
			}
			return a
		},
	}))
	cl, err := client.New(client.Config{Targets: []string{down}, Logger: logger})
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()
	limit, err := client.Middleware(client.MiddlewareConfig{Client: cl, Limit: client.PerSecond(5)})
	if err != nil {
		log.Fatal(err)
	}
	h := limit(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "hello\n") }))
	for range 3 {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
		fmt.Println(w.Code, w.Header().Get(client.StatusHeader))
	}
	fmt.Println("errors:", cl.Errors())
	// Output:
	// level=WARN msg="ringlimit: cluster unreachable: no node answered" targets=1
	// 200 unavailable
	// 200 unavailable
	// 200 unavailable
	// errors: 3
}
