package client_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strconv"
	"time"

	"github.com/ringlimit/ringlimit/client"
)

// An LLM proxy: each tenant has 10,000 tokens a day. A request reserves
// its max_tokens before the model runs, and the middleware settles the
// tokens the model really used: the unused part goes back, an overrun is
// charged past zero and later requests wait it out.
func ExampleSettleMiddleware() {
	cl, done := exampleClient()
	defer done()
	lim, err := client.NewLimiter(cl, client.Per(10_000, 24*time.Hour))
	if err != nil {
		log.Fatal(err)
	}
	proxy, err := client.SettleMiddleware(client.SettleConfig{
		Limiter: lim,
		Key:     func(r *http.Request) string { return "tenant:" + r.Header.Get("X-Tenant") },
		Estimate: func(r *http.Request) int {
			n, _ := strconv.Atoi(r.URL.Query().Get("max_tokens"))
			return n
		},
		OnSettle: func(_ *http.Request, s client.Settlement, err error) {
			fmt.Println("  settled at", s.Cost, "tokens, remaining", s.Remaining, err)
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	used := 0 // what the model will say it used
	model := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		client.ReportUsage(r.Context(), int64(used)) // the completion's usage.total_tokens
		fmt.Fprintln(w, "a completion")
	})
	h := proxy(model)
	for _, u := range []int{1500, 5000, 100} {
		used = u
		r := httptest.NewRequestWithContext(context.Background(), http.MethodPost, "/v1/chat/completions?max_tokens=4000", nil)
		r.Header.Set("X-Tenant", "acme")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(w.Code)
	}
	// Output:
	//   settled at 1500 tokens, remaining 8500 <nil>
	// 200
	//   settled at 5000 tokens, remaining 3500 <nil>
	// 200
	// 429
}
