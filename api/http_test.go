package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/clock"
	"github.com/ringlimit/ringlimit/forward"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
	"github.com/ringlimit/ringlimit/peer"
	"github.com/ringlimit/ringlimit/ring"
)

func TestMain(m *testing.M) {
	testkit.Main(countPairs{m})
}

// t0 is 2026-01-05 10:04:00 UTC: a whole minute, so windows of 250ms, 1s,
// 10s and 1m all start exactly at it.
var t0 = clock.FromTime(time.Date(2026, time.January, 5, 10, 4, 0, 0, time.UTC))

// waitFor bounds every synchronisation in these tests.
const waitFor = 5 * time.Second

// testEnv is one node's worth of API: a fake clock, a store, a router and
// the API on top.
type testEnv struct {
	clock  *testkit.Clock
	store  *bucket.Store
	router *forward.Router
	api    *API
	reg    *prometheus.Registry // the API's metrics
}

// newTestEnv builds a fresh environment. wrap, if not nil, wraps the router
// into the Checker the API uses.
func newTestEnv(t testing.TB, wrap func(Checker) Checker) *testEnv {
	t.Helper()
	clk := testkit.NewClock(t0)
	store, err := bucket.NewStore(bucket.StoreConfig{MaxKeys: 1 << 16, Shards: 16})
	if err != nil {
		t.Fatalf("NewStore: %v", err)
	}
	// One node alone: it owns every key, and its pool never dials.
	peers, err := peer.NewPool(peer.Config{Self: "node-1", Clock: clk})
	if err != nil {
		t.Fatalf("peer.NewPool: %v", err)
	}
	router, err := forward.New(forward.Config{Self: "node-1", Store: store, Clock: clk, Peers: peers,
		NewRing: func(members []string) (forward.Owners, error) { return ring.New(ring.DefaultConfig(), members) }})
	if err != nil {
		peers.Close(context.Background())
		t.Fatalf("forward.New: %v", err)
	}
	t.Cleanup(func() {
		router.Close(context.Background())
		peers.Close(context.Background())
	})
	var checker Checker = router
	if wrap != nil {
		checker = wrap(router)
	}
	reg := prometheus.NewRegistry()
	a, err := New(Config{
		Checker:    checker,
		Settler:    router,
		Leaser:     router,
		Stats:      store,
		Registerer: reg,
		Gatherer:   reg,
		Logger:     slog.New(slog.NewTextHandler(t.Output(), nil)),
	})
	if err != nil {
		t.Fatalf("api.New: %v", err)
	}
	return &testEnv{clock: clk, store: store, router: router, api: a, reg: reg}
}

// httpServer is the env's HTTP surface on a real loopback listener.
type httpServer struct {
	url    string
	client *http.Client
	auth   string // the Authorization header do sends, if any
}

func (e *testEnv) startHTTP(t testing.TB) *httpServer {
	t.Helper()
	srv := httptest.NewServer(validated(t, e.api.Handler(nil)))
	t.Cleanup(srv.Close)
	return &httpServer{url: srv.URL, client: srv.Client()}
}

type httpResult struct {
	status int
	header http.Header
	body   []byte
}

func (s *httpServer) do(t testing.TB, method, path, contentType string, body []byte) httpResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.url+path, r)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if s.auth != "" {
		req.Header.Set("Authorization", s.auth)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading body: %v", method, path, err)
	}
	return httpResult{status: resp.StatusCode, header: resp.Header, body: b}
}

func (s *httpServer) check(t testing.TB, body string) httpResult {
	t.Helper()
	return s.do(t, http.MethodPost, "/v1/check", "application/json", []byte(body))
}

// chk builds a POST /v1/check body. cost "" leaves the cost out.
func chk(key, cost, limit string) string {
	if cost == "" {
		return `{"key":` + strconv.Quote(key) + `,"limit":` + limit + `}`
	}
	return `{"key":` + strconv.Quote(key) + `,"cost":` + cost + `,"limit":` + limit + `}`
}

// want is an expected answer to one check, with the headers spelled out.
type want struct {
	status                        int
	allowed                       bool
	limit, remaining              int64
	retryMs, resetMs, delayMs     int64
	policy, rateLimit, retryAfter string // retryAfter "" means no header
}

// body is the complete JSON body the answer must carry.
func (w want) body() map[string]any {
	m := map[string]any{
		"allowed":        w.allowed,
		"limit":          float64(w.limit),
		"remaining":      float64(w.remaining),
		"retry_after_ms": float64(w.retryMs),
		"reset_after_ms": float64(w.resetMs),
		"delay_ms":       float64(w.delayMs),
		"scope":          "inline",
		"owner":          "node-1",
	}
	if !w.allowed {
		m["code"] = "RATE_LIMITED"
	}
	return m
}

func decodeMap(t testing.TB, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("body %q is not a JSON object: %v", b, err)
	}
	return m
}

// assertCheck compares one answer, status, full body and headers, with want.
func assertCheck(t testing.TB, step int, req string, got httpResult, w want) {
	t.Helper()
	fail := func(what string, g, wnt any) {
		t.Helper()
		t.Errorf("step %d: POST /v1/check %s\n  %s: got %v, want %v\n  body: %s", step, req, what, g, wnt, got.body)
	}
	if got.status != w.status {
		fail("status", got.status, w.status)
	}
	if ct := got.header.Get("Content-Type"); ct != "application/json" {
		fail("Content-Type", ct, "application/json")
	}
	if m := decodeMap(t, got.body); !reflect.DeepEqual(m, w.body()) {
		fail("body", m, w.body())
	}
	headers := []struct{ name, want string }{
		{"X-RateLimit-Limit", strconv.FormatInt(w.limit, 10)},
		{"X-RateLimit-Remaining", strconv.FormatInt(w.remaining, 10)},
		{"RateLimit-Policy", w.policy},
		{"RateLimit", w.rateLimit},
	}
	for _, h := range headers {
		if g := got.header.Values(h.name); len(g) != 1 || g[0] != h.want {
			fail(h.name, g, h.want)
		}
	}
	if g := got.header.Values("Retry-After"); w.retryAfter == "" && len(g) != 0 {
		fail("Retry-After", g, "absent")
	} else if w.retryAfter != "" && (len(g) != 1 || g[0] != w.retryAfter) {
		fail("Retry-After", g, w.retryAfter)
	}
}

type httpStep struct {
	advance time.Duration
	req     string
	want    want
}

func runHTTPSteps(t *testing.T, steps []httpStep) {
	t.Helper()
	e := newTestEnv(t, nil)
	s := e.startHTTP(t)
	for i, st := range steps {
		e.clock.Advance(st.advance)
		got := s.check(t, st.req)
		assertCheck(t, i, st.req, got, st.want)
	}
}

func TestHTTPAlgorithms(t *testing.T) {
	// Pol and RL abbreviate the header values.
	pol := func(q, w int) string { return fmt.Sprintf(`"inline";q=%d;w=%d`, q, w) }
	rl := func(r, t int) string { return fmt.Sprintf(`"inline";r=%d;t=%d`, r, t) }

	t.Run("token_bucket", func(t *testing.T) {
		// Algorithm and burst omitted: token bucket of 5, one token per 200ms.
		const lim = `{"limit":5,"per":"1s"}`
		const full = `{"algorithm":"token_bucket","limit":5,"per":"1s","burst":0}`
		runHTTPSteps(t, []httpStep{
			{0, chk("tb", "", lim), want{status: 200, allowed: true, limit: 5, remaining: 4, resetMs: 200, policy: pol(5, 1), rateLimit: rl(4, 1)}},
			{0, chk("tb", "3", lim), want{status: 200, allowed: true, limit: 5, remaining: 1, resetMs: 800, policy: pol(5, 1), rateLimit: rl(1, 1)}},
			{0, chk("tb", "2", lim), want{status: 429, limit: 5, remaining: 1, retryMs: 200, resetMs: 800, policy: pol(5, 1), rateLimit: rl(1, 1), retryAfter: "1"}},
			{100 * time.Millisecond, chk("tb", "2", lim), want{status: 429, limit: 5, remaining: 1, retryMs: 100, resetMs: 700, policy: pol(5, 1), rateLimit: rl(1, 1), retryAfter: "1"}},
			{100 * time.Millisecond, chk("tb", "2", lim), want{status: 200, allowed: true, limit: 5, remaining: 0, resetMs: 1000, policy: pol(5, 1), rateLimit: rl(0, 1)}},
			// Same limit spelled out in full: same fingerprint, same bucket.
			{1500 * time.Millisecond, chk("tb", "5", full), want{status: 200, allowed: true, limit: 5, remaining: 0, resetMs: 1000, policy: pol(5, 1), rateLimit: rl(0, 1)}},
			{0, chk("tb", "1", full), want{status: 429, limit: 5, remaining: 0, retryMs: 200, resetMs: 1000, policy: pol(5, 1), rateLimit: rl(0, 1), retryAfter: "1"}},
		})
	})

	t.Run("token_bucket_burst", func(t *testing.T) {
		// 2 per second, bucket of 4: one token per 500ms.
		const lim = `{"algorithm":"token_bucket","limit":2,"per":"1s","burst":4}`
		runHTTPSteps(t, []httpStep{
			{0, chk("tb2", "4", lim), want{status: 200, allowed: true, limit: 2, remaining: 0, resetMs: 2000, policy: pol(2, 1), rateLimit: rl(0, 2)}},
			// 3 tokens at 2/s: 1500ms, Retry-After rounds up to 2.
			{0, chk("tb2", "3", lim), want{status: 429, limit: 2, remaining: 0, retryMs: 1500, resetMs: 2000, policy: pol(2, 1), rateLimit: rl(0, 2), retryAfter: "2"}},
			// 1499ms later: 2.998 tokens, 0.002 short: 1ms.
			{1499 * time.Millisecond, chk("tb2", "3", lim), want{status: 429, limit: 2, remaining: 2, retryMs: 1, resetMs: 501, policy: pol(2, 1), rateLimit: rl(2, 1), retryAfter: "1"}},
			{time.Millisecond, chk("tb2", "3", lim), want{status: 200, allowed: true, limit: 2, remaining: 0, resetMs: 2000, policy: pol(2, 1), rateLimit: rl(0, 2)}},
		})
	})

	t.Run("token_bucket_periods", func(t *testing.T) {
		runHTTPSteps(t, []httpStep{
			{0, chk("tb-min", "1", `{"algorithm":"token_bucket","limit":60,"per":"1m"}`),
				want{status: 200, allowed: true, limit: 60, remaining: 59, resetMs: 1000, policy: pol(60, 60), rateLimit: rl(59, 1)}},
			// A 1.5s period is advertised as w=2 (rounded up).
			{0, chk("tb-1500", "2", `{"limit":3,"per":"1500ms"}`),
				want{status: 200, allowed: true, limit: 3, remaining: 1, resetMs: 1000, policy: pol(3, 2), rateLimit: rl(1, 1)}},
			{0, chk("tb-1500", "2", `{"limit":3,"per":"1500ms"}`),
				want{status: 429, limit: 3, remaining: 1, retryMs: 500, resetMs: 1000, policy: pol(3, 2), rateLimit: rl(1, 1), retryAfter: "1"}},
		})
	})

	t.Run("leaky_bucket", func(t *testing.T) {
		// Drains 2 per second (one per 500ms) from a queue of 3.
		const lim = `{"algorithm":"leaky_bucket","limit":2,"per":"1s","burst":3}`
		runHTTPSteps(t, []httpStep{
			{0, chk("lb", "1", lim), want{status: 200, allowed: true, limit: 2, remaining: 2, resetMs: 500, policy: pol(2, 1), rateLimit: rl(2, 1)}},
			{0, chk("lb", "1", lim), want{status: 200, allowed: true, limit: 2, remaining: 1, resetMs: 1000, delayMs: 500, policy: pol(2, 1), rateLimit: rl(1, 1)}},
			{0, chk("lb", "", lim), want{status: 200, allowed: true, limit: 2, remaining: 0, resetMs: 1500, delayMs: 1000, policy: pol(2, 1), rateLimit: rl(0, 2)}},
			{0, chk("lb", "1", lim), want{status: 429, limit: 2, remaining: 0, retryMs: 500, resetMs: 1500, policy: pol(2, 1), rateLimit: rl(0, 2), retryAfter: "1"}},
			{250 * time.Millisecond, chk("lb", "1", lim), want{status: 429, limit: 2, remaining: 0, retryMs: 250, resetMs: 1250, policy: pol(2, 1), rateLimit: rl(0, 2), retryAfter: "1"}},
			{250 * time.Millisecond, chk("lb", "1", lim), want{status: 200, allowed: true, limit: 2, remaining: 0, resetMs: 1500, delayMs: 1000, policy: pol(2, 1), rateLimit: rl(0, 2)}},
			{3 * time.Second, chk("lb", "3", lim), want{status: 200, allowed: true, limit: 2, remaining: 0, resetMs: 1500, policy: pol(2, 1), rateLimit: rl(0, 2)}},
		})
	})

	t.Run("leaky_bucket_default_burst", func(t *testing.T) {
		// Queue of 4 (= limit), draining one per 250ms.
		const lim = `{"algorithm":"leaky_bucket","limit":4,"per":"1s"}`
		runHTTPSteps(t, []httpStep{
			{0, chk("lb2", "2", lim), want{status: 200, allowed: true, limit: 4, remaining: 2, resetMs: 500, policy: pol(4, 1), rateLimit: rl(2, 1)}},
			{0, chk("lb2", "2", lim), want{status: 200, allowed: true, limit: 4, remaining: 0, resetMs: 1000, delayMs: 500, policy: pol(4, 1), rateLimit: rl(0, 1)}},
			{0, chk("lb2", "1", lim), want{status: 429, limit: 4, remaining: 0, retryMs: 250, resetMs: 1000, policy: pol(4, 1), rateLimit: rl(0, 1), retryAfter: "1"}},
			{100 * time.Millisecond, chk("lb2", "", lim), want{status: 429, limit: 4, remaining: 0, retryMs: 150, resetMs: 900, policy: pol(4, 1), rateLimit: rl(0, 1), retryAfter: "1"}},
			{150 * time.Millisecond, chk("lb2", "", lim), want{status: 200, allowed: true, limit: 4, remaining: 0, resetMs: 1000, delayMs: 750, policy: pol(4, 1), rateLimit: rl(0, 1)}},
		})
	})

	t.Run("fixed_window", func(t *testing.T) {
		// 3 per 10s window; burst is ignored by window algorithms.
		const lim = `{"algorithm":"fixed_window","limit":3,"per":"10s","burst":100}`
		runHTTPSteps(t, []httpStep{
			{0, chk("fw", "2", lim), want{status: 200, allowed: true, limit: 3, remaining: 1, resetMs: 10000, policy: pol(3, 10), rateLimit: rl(1, 10)}},
			{2500 * time.Millisecond, chk("fw", "", lim), want{status: 200, allowed: true, limit: 3, remaining: 0, resetMs: 7500, policy: pol(3, 10), rateLimit: rl(0, 8)}},
			{time.Second, chk("fw", "1", lim), want{status: 429, limit: 3, remaining: 0, retryMs: 6500, resetMs: 6500, policy: pol(3, 10), rateLimit: rl(0, 7), retryAfter: "7"}},
			// 10:04:10 opens the next window.
			{6500 * time.Millisecond, chk("fw", "3", lim), want{status: 200, allowed: true, limit: 3, remaining: 0, resetMs: 10000, policy: pol(3, 10), rateLimit: rl(0, 10)}},
			{10001 * time.Millisecond, chk("fw", "", lim), want{status: 200, allowed: true, limit: 3, remaining: 2, resetMs: 9999, policy: pol(3, 10), rateLimit: rl(2, 10)}},
		})
	})

	t.Run("sliding_window_log", func(t *testing.T) {
		const lim = `{"algorithm":"sliding_window_log","limit":3,"per":"1s"}`
		runHTTPSteps(t, []httpStep{
			{0, chk("swl", "", lim), want{status: 200, allowed: true, limit: 3, remaining: 2, resetMs: 1000, policy: pol(3, 1), rateLimit: rl(2, 1)}},
			{300 * time.Millisecond, chk("swl", "2", lim), want{status: 200, allowed: true, limit: 3, remaining: 0, resetMs: 1000, policy: pol(3, 1), rateLimit: rl(0, 1)}},
			// The oldest unit (at 0ms) leaves at 1000ms.
			{200 * time.Millisecond, chk("swl", "1", lim), want{status: 429, limit: 3, remaining: 0, retryMs: 500, resetMs: 800, policy: pol(3, 1), rateLimit: rl(0, 1), retryAfter: "1"}},
			// At 1000ms the unit from 0ms is gone; two from 300ms remain.
			{500 * time.Millisecond, chk("swl", "2", lim), want{status: 429, limit: 3, remaining: 1, retryMs: 300, resetMs: 300, policy: pol(3, 1), rateLimit: rl(1, 1), retryAfter: "1"}},
			{300 * time.Millisecond, chk("swl", "3", lim), want{status: 200, allowed: true, limit: 3, remaining: 0, resetMs: 1000, policy: pol(3, 1), rateLimit: rl(0, 1)}},
		})
	})

	t.Run("sliding_window_counter", func(t *testing.T) {
		const lim = `{"algorithm":"sliding_window_counter","limit":4,"per":"1s"}`
		runHTTPSteps(t, []httpStep{
			{0, chk("swc", "2", lim), want{status: 200, allowed: true, limit: 4, remaining: 2, resetMs: 2000, policy: pol(4, 1), rateLimit: rl(2, 2)}},
			// Next window, prev=2 must weigh ≤ 1: from 500ms into it.
			{0, chk("swc", "3", lim), want{status: 429, limit: 4, remaining: 2, retryMs: 1500, resetMs: 2000, policy: pol(4, 1), rateLimit: rl(2, 2), retryAfter: "2"}},
			// 250ms into the next window: used = 0 + ⌈2×0.75⌉ = 2.
			{1250 * time.Millisecond, chk("swc", "", lim), want{status: 200, allowed: true, limit: 4, remaining: 1, resetMs: 1750, policy: pol(4, 1), rateLimit: rl(1, 2)}},
			{0, chk("swc", "2", lim), want{status: 429, limit: 4, remaining: 1, retryMs: 250, resetMs: 1750, policy: pol(4, 1), rateLimit: rl(1, 2), retryAfter: "1"}},
			{250 * time.Millisecond, chk("swc", "2", lim), want{status: 200, allowed: true, limit: 4, remaining: 0, resetMs: 1500, policy: pol(4, 1), rateLimit: rl(0, 2)}},
			// Two windows later both counts are gone.
			{2 * time.Second, chk("swc", "", lim), want{status: 200, allowed: true, limit: 4, remaining: 3, resetMs: 1500, policy: pol(4, 1), rateLimit: rl(3, 2)}},
		})
	})
}

func TestHTTPBoundaries(t *testing.T) {
	const lim = `{"limit":5,"per":"1s"}`
	ok := want{status: 200, allowed: true, limit: 5, remaining: 4, resetMs: 200, policy: `"inline";q=5;w=1`, rateLimit: `"inline";r=4;t=1`}

	// A body of exactly MaxBodyBytes, padded with JSON whitespace.
	padded := func(key string, size int) string {
		head, tail := `{"key":`+strconv.Quote(key)+`,`, `"limit":`+lim+`}`
		return head + strings.Repeat(" ", size-len(head)-len(tail)) + tail
	}
	steps := []httpStep{
		{0, chk(strings.Repeat("k", bucket.MaxKeyLen), "1", lim), ok},
		{0, padded("padded", MaxBodyBytes), ok},
		// Trailing whitespace after the one JSON value is fine.
		{0, chk("trailing-space", "", lim) + " \n\t", ok},
		// The shortest and longest periods.
		{0, chk("per-1ms", "1", `{"limit":5,"per":"1ms"}`), want{status: 200, allowed: true, limit: 5, remaining: 4, resetMs: 1, policy: `"inline";q=5;w=1`, rateLimit: `"inline";r=4;t=1`}},
		// The 366-day windows are cut from the Unix epoch; the one holding
		// 2026-01-05 10:04 ends at 2026-02-12 00:00 UTC, 3,246,960 s later.
		{0, chk("per-366d", "1", `{"algorithm":"fixed_window","limit":5,"per":"8784h"}`), want{status: 200, allowed: true, limit: 5, remaining: 4,
			resetMs: 3246960000, policy: `"inline";q=5;w=31622400`, rateLimit: `"inline";r=4;t=3246960`}},
	}
	runHTTPSteps(t, steps)
}

// badCase is one invalid POST /v1/check.
type badCase struct {
	name  string
	body  string
	field string // the message must name it
	// key is a valid key the bad request was about; a valid check on it
	// afterwards must find it untouched.
	key string
}

func TestHTTPInvalid(t *testing.T) {
	e := newTestEnv(t, nil)
	s := e.startHTTP(t)

	const lim = `{"limit":5,"per":"1s","burst":8}`
	oversize := func(key string) string {
		head, tail := `{"key":`+strconv.Quote(key)+`,`, `"limit":`+lim+`}`
		return head + strings.Repeat(" ", MaxBodyBytes+1-len(head)-len(tail)) + tail
	}
	cases := []badCase{
		{"malformed JSON", `{"key":"k0","limit":` + lim, "body", "k0"},
		{"syntax error", `{"key" "k1","limit":` + lim + `}`, "body", "k1"},
		{"empty body", ``, "body", "k2"},
		{"unknown top-level field", `{"key":"k3","limit":` + lim + `,"colour":"red"}`, "colour", "k3"},
		{"unknown field in limit", `{"key":"k4","limit":{"limit":5,"per":"1s","brust":8}}`, "brust", "k4"},
		{"two JSON values", chk("k5", "1", lim) + chk("k5", "1", lim), "body", "k5"},
		{"JSON value then garbage", chk("k6", "1", lim) + ` x`, "body", "k6"},
		{"JSON value then a stray brace", chk("k6b", "1", lim) + `}`, "body", "k6b"},
		{"JSON value then a stray bracket and garbage", chk("k6c", "1", lim) + `]]garbage`, "body", "k6c"},
		{"empty key", chk("", "1", lim), "key", "k7"},
		{"key of 1025 bytes", chk(strings.Repeat("k", bucket.MaxKeyLen+1), "1", lim), "key", "k8"},
		{"key not a string", `{"key":42,"limit":` + lim + `}`, "key", "k9"},
		{"cost 0", chk("k10", "0", lim), "cost", "k10"},
		{"cost -1", chk("k11", "-1", lim), "cost", "k11"},
		{"cost above burst", chk("k12", "9", lim), "cost", "k12"},
		{"cost not an integer", chk("k13", "1.5", lim), "cost", "k13"},
		{"cost above limit of a window", chk("k14", "6", `{"algorithm":"fixed_window","limit":5,"per":"1s","burst":100}`), "cost", "k14"},
		{"cost above limit of a log", chk("k15", "6", `{"algorithm":"sliding_window_log","limit":5,"per":"1s"}`), "cost", "k15"},
		{"limit 0", chk("k16", "1", `{"limit":0,"per":"1s"}`), "limit.limit", "k16"},
		{"limit -1", chk("k17", "1", `{"limit":-1,"per":"1s"}`), "limit.limit", "k17"},
		{"limit omitted", chk("k18", "1", `{"per":"1s"}`), "limit.limit", "k18"},
		{"limit as a string", chk("k19", "1", `{"limit":"5","per":"1s"}`), "limit.limit", "k19"},
		{"limit above the maximum", chk("k20", "1", `{"limit":2147483648,"per":"1s"}`), "limit", "k20"},
		{"unknown algorithm", chk("k21", "1", `{"algorithm":"gcra","limit":5,"per":"1s"}`), "limit.algorithm", "k21"},
		{"per empty", chk("k22", "1", `{"limit":5,"per":""}`), "limit.per", "k22"},
		{"per omitted", chk("k23", "1", `{"limit":5}`), "limit.per", "k23"},
		{"per abc", chk("k24", "1", `{"limit":5,"per":"abc"}`), "limit.per", "k24"},
		{"per 0s", chk("k25", "1", `{"limit":5,"per":"0s"}`), "limit.per", "k25"},
		{"per -1s", chk("k26", "1", `{"limit":5,"per":"-1s"}`), "limit.per", "k26"},
		{"per below 1ms", chk("k27", "1", `{"limit":5,"per":"999us"}`), "per", "k27"},
		{"per above 366 days", chk("k28", "1", `{"limit":5,"per":"8785h"}`), "per", "k28"},
		{"per overflowing", chk("k29", "1", `{"limit":5,"per":"9999999999h"}`), "limit.per", "k29"},
		{"burst -1", chk("k30", "1", `{"limit":5,"per":"1s","burst":-1}`), "limit.burst", "k30"},
		{"missing limit", `{"key":"k31","cost":1}`, "limit", "k31"},
		{"null limit", `{"key":"k32","limit":null}`, "limit", "k32"},
		{"limit not an object", `{"key":"k33","limit":5}`, "limit", "k33"},
		{"JSON array", `[` + chk("k34", "1", lim) + `]`, "body", "k34"},
		{"body over 64 KiB", oversize("k35"), "body", "k35"},
		{"unknown failure mode", chk("k36", "1", `{"limit":5,"per":"1s","failure_mode":"fail_maybe"}`), "limit.failure_mode", "k36"},
		{"failure mode not a string", chk("k37", "1", `{"limit":5,"per":"1s","failure_mode":1}`), "limit.failure_mode", "k37"},
	}

	for i, c := range cases {
		before := e.store.Len()
		got := s.check(t, c.body)
		show := c.body
		if len(show) > 120 {
			show = show[:60] + fmt.Sprintf("...(%d bytes)...", len(show)) + show[len(show)-40:]
		}
		if got.status != http.StatusBadRequest {
			t.Errorf("step %d (%s): POST /v1/check %s\n  status: got %d, want 400\n  body: %s", i, c.name, show, got.status, got.body)
		}
		if ct := got.header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("step %d (%s): Content-Type: got %q, want application/json", i, c.name, ct)
		}
		var er map[string]any
		if err := json.Unmarshal(got.body, &er); err != nil {
			t.Errorf("step %d (%s): body %q: %v", i, c.name, got.body, err)
			continue
		}
		msg, _ := er["message"].(string)
		code := "INVALID_ARGUMENT"
		if strings.HasPrefix(c.name, "key of 1025") {
			code = "KEY_TOO_LONG"
		}
		if er["code"] != code || len(er) != 2 || msg == "" {
			t.Errorf("step %d (%s): POST /v1/check %s\n  body: got %v, want {code: %s, message: ...}", i, c.name, show, er, code)
		}
		if !strings.Contains(msg, c.field) {
			t.Errorf("step %d (%s): message %q does not name the field %q", i, c.name, msg, c.field)
		}
		if n := e.store.Len(); n != before {
			t.Errorf("step %d (%s): store.Len() went from %d to %d after a bad request", i, c.name, before, n)
		}
		// The key is untouched: a valid check finds its bucket full (8 - 3).
		valid := chk(c.key, "3", lim)
		assertCheck(t, i, valid, s.check(t, valid), want{status: 200, allowed: true, limit: 5, remaining: 5, resetMs: 600,
			policy: `"inline";q=5;w=1`, rateLimit: `"inline";r=5;t=1`})
	}

	// Every bad request was counted once.
	m := s.do(t, http.MethodGet, "/metrics", "", nil)
	line := fmt.Sprintf(`ringlimit_invalid_requests_total{surface="http"} %d`, len(cases))
	if !hasLine(string(m.body), line) {
		t.Errorf("metrics: no line %q in\n%s", line, grepLines(string(m.body), "ringlimit_invalid"))
	}
}

// The inline limit's failure_mode is parsed once, as the body is decoded,
// into the one failure-mode type the router takes.
func TestHTTPFailureModeParsedAtDecode(t *testing.T) {
	steps := []struct {
		field string // the failure_mode member of the limit, "" for none
		want  bucket.FailureMode
	}{
		{``, bucket.Local},
		{`,"failure_mode":""`, bucket.Local},
		{`,"failure_mode":"local"`, bucket.Local},
		{`,"failure_mode":"fail_open"`, bucket.FailOpen},
		{`,"failure_mode":"fail_closed"`, bucket.FailClosed},
	}
	for i, s := range steps {
		body := chk("k", "1", `{"limit":5,"per":"1s"`+s.field+`}`)
		var req CheckRequest
		if err := json.Unmarshal([]byte(body), &req); err != nil {
			t.Fatalf("step %d: decode %s: %v", i, body, err)
		}
		if req.Limit.FailureMode != s.want {
			t.Errorf("step %d: decode %s: FailureMode = %v want %v", i, body, req.Limit.FailureMode, s.want)
		}
		c, err := req.toCheck()
		if err != nil || c.Mode != s.want {
			t.Errorf("step %d: toCheck(%s) = mode %v, %v want %v", i, body, c.Mode, err, s.want)
		}
	}
}

func hasLine(text, line string) bool {
	for l := range strings.Lines(text) {
		if strings.TrimRight(l, "\n") == line {
			return true
		}
	}
	return false
}

func grepLines(text, substr string) string {
	var b strings.Builder
	for l := range strings.Lines(text) {
		if strings.Contains(l, substr) {
			b.WriteString(l)
		}
	}
	return b.String()
}

func TestHTTPHealthMetricsMethods(t *testing.T) {
	e := newTestEnv(t, nil)
	s := e.startHTTP(t)

	h := s.do(t, http.MethodGet, "/healthz", "", nil)
	if h.status != 200 || string(h.body) != "ok\n" {
		t.Errorf("GET /healthz: got %d %q, want 200 \"ok\\n\"", h.status, h.body)
	}

	const tb10 = `{"limit":10,"per":"1s"}`
	const tb1 = `{"limit":1,"per":"1s"}`
	reqs := []struct {
		body   string
		status int
	}{
		{chk("m-a", "", tb10), 200}, {chk("m-a", "2", tb10), 200}, {chk("m-a", "", tb10), 200}, {chk("m-a", "", tb10), 200},
		{chk("m-b", "", tb10), 200}, {chk("m-b", "", tb10), 200}, {chk("m-b", "", tb10), 200},
		{chk("m-c", "", tb1), 200}, {chk("m-c", "", tb1), 429}, {chk("m-c", "", tb1), 429},
		{chk("m-d", "", `{"algorithm":"fixed_window","limit":1,"per":"1m"}`), 200},
		{``, 400},
		{chk("m-e", "0", tb10), 400},
	}
	for i, r := range reqs {
		if got := s.check(t, r.body); got.status != r.status {
			t.Errorf("step %d: POST /v1/check %s: status %d, want %d (body %s)", i, r.body, got.status, r.status, got.body)
		}
	}

	m := s.do(t, http.MethodGet, "/metrics", "", nil)
	if m.status != 200 {
		t.Fatalf("GET /metrics: status %d", m.status)
	}
	for _, line := range []string{
		`ringlimit_checks_total{algorithm="token_bucket",result="allowed"} 8`,
		`ringlimit_checks_total{algorithm="token_bucket",result="rejected"} 2`,
		`ringlimit_checks_total{algorithm="token_bucket",result="degraded"} 0`,
		`ringlimit_checks_total{algorithm="fixed_window",result="allowed"} 1`,
		`ringlimit_checks_total{algorithm="leaky_bucket",result="allowed"} 0`,
		`ringlimit_keys 4`,
		`ringlimit_evictions_total 0`,
		`ringlimit_invalid_requests_total{surface="http"} 2`,
		`ringlimit_check_duration_seconds_count{surface="http"} 11`,
	} {
		if !hasLine(string(m.body), line) {
			t.Errorf("GET /metrics: no line %q in\n%s", line, grepLines(string(m.body), "ringlimit_"))
		}
	}

	for i, c := range []struct {
		method, path string
		status       int
		allow        string
	}{
		{http.MethodGet, "/v1/check", http.StatusMethodNotAllowed, "OPTIONS, POST"}, // OPTIONS: CORS preflights
		{http.MethodPut, "/v1/check", http.StatusMethodNotAllowed, "OPTIONS, POST"},
		{http.MethodPost, "/healthz", http.StatusMethodNotAllowed, "GET, HEAD"},
		{http.MethodGet, "/v1/nothing", http.StatusNotFound, ""},
	} {
		got := s.do(t, c.method, c.path, "", nil)
		if got.status != c.status {
			t.Errorf("step %d: %s %s: status %d, want %d", i, c.method, c.path, got.status, c.status)
		}
		if a := got.header.Get("Allow"); a != c.allow {
			t.Errorf("step %d: %s %s: Allow %q, want %q", i, c.method, c.path, a, c.allow)
		}
	}
	if n := e.store.Len(); n != 4 {
		t.Errorf("store.Len() = %d after the wrong-method requests, want 4", n)
	}
}

// gateChecker holds every check at a gate until release is closed.
type gateChecker struct {
	inner   Checker
	entered chan struct{} // one value per call that reached the gate
	release chan struct{}
}

func newGate(inner Checker, n int) *gateChecker {
	return &gateChecker{inner: inner, entered: make(chan struct{}, n), release: make(chan struct{})}
}

func (g *gateChecker) Check(ctx context.Context, checks []forward.Check, out []forward.Result) error {
	g.entered <- struct{}{}
	select {
	case <-g.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return g.inner.Check(ctx, checks, out)
}

// awaitN receives n values from ch, failing the test past deadline.
func awaitN(t *testing.T, ch <-chan struct{}, n int, what string) {
	t.Helper()
	timer := time.NewTimer(waitFor)
	defer timer.Stop()
	for i := range n {
		select {
		case <-ch:
		case <-timer.C:
			t.Fatalf("%s: only %d of %d after %v", what, i, n, waitFor)
		}
	}
}

// notifyListener reports when it is closed.
type notifyListener struct {
	net.Listener
	once   sync.Once
	closed chan struct{}
}

func newNotifyListener(t *testing.T) *notifyListener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nl := &notifyListener{Listener: l, closed: make(chan struct{})}
	t.Cleanup(func() { nl.Close() })
	return nl
}

func (l *notifyListener) Close() error {
	err := l.Listener.Close()
	l.once.Do(func() { close(l.closed) })
	return err
}

func awaitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(waitFor):
		t.Fatalf("%s: not done after %v", what, waitFor)
	}
}

// assertRefused checks that a new connection to addr fails.
func assertRefused(t *testing.T, addr string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, waitFor)
	if err == nil {
		c.Close()
		t.Errorf("dial %s during shutdown: connected, want refused", addr)
	}
}

func TestHTTPShutdownInFlight(t *testing.T) {
	const n = 5
	var gate *gateChecker
	e := newTestEnv(t, func(c Checker) Checker { gate = newGate(c, n); return gate })
	lis := newNotifyListener(t)
	srv := &http.Server{Handler: validated(t, e.api.Handler(nil)), ReadHeaderTimeout: waitFor}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	t.Cleanup(func() { srv.Close() })

	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr, Timeout: 2 * waitFor}
	url := "http://" + lis.Addr().String() + "/v1/check"

	type result struct {
		i      int
		status int
		body   []byte
		err    error
	}
	results := make(chan result, n)
	reqs := make([]string, n)
	for i := range n {
		reqs[i] = chk(fmt.Sprintf("shutdown-%d", i), "", `{"limit":10,"per":"1s"}`)
		go func() {
			resp, err := client.Post(url, "application/json", strings.NewReader(reqs[i]))
			if err != nil {
				results <- result{i: i, err: err}
				return
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			results <- result{i: i, status: resp.StatusCode, body: b, err: err}
		}()
	}
	awaitN(t, gate.entered, n, "checks blocked in the checker")

	shutdown := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		shutdown <- srv.Shutdown(ctx)
	}()
	awaitClosed(t, lis.closed, "listener closed by Shutdown")
	assertRefused(t, lis.Addr().String())
	select {
	case err := <-shutdown:
		t.Fatalf("Shutdown returned %v with %d checks still in flight", err, n)
	default:
	}

	close(gate.release)
	w := want{status: 200, allowed: true, limit: 10, remaining: 9, resetMs: 100}.body()
	timer := time.NewTimer(waitFor)
	defer timer.Stop()
	for range n {
		select {
		case r := <-results:
			if r.err != nil {
				t.Errorf("check %d: POST /v1/check %s: %v", r.i, reqs[r.i], r.err)
				continue
			}
			if got := decodeMap(t, r.body); r.status != 200 || !reflect.DeepEqual(got, w) {
				t.Errorf("check %d: POST /v1/check %s\n  got %d %v\n  want 200 %v", r.i, reqs[r.i], r.status, got, w)
			}
		case <-timer.C:
			t.Fatalf("in-flight checks did not finish within %v", waitFor)
		}
	}
	select {
	case err := <-shutdown:
		if err != nil {
			t.Errorf("Shutdown: %v, want nil", err)
		}
	case <-timer.C:
		t.Fatalf("Shutdown did not return within %v", waitFor)
	}
	select {
	case err := <-served:
		if !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v, want http.ErrServerClosed", err)
		}
	case <-timer.C:
		t.Fatalf("Serve did not return within %v", waitFor)
	}
	if got := e.store.Len(); got != n {
		t.Errorf("store.Len() = %d, want %d", got, n)
	}
}

// TestReadyz: GET /readyz follows Config.Ready, with the reason in the
// body; without Ready the node is always ready.
func TestReadyz(t *testing.T) {
	e := newTestEnv(t, nil)
	var reason atomic.Pointer[string]
	a, err := New(Config{Checker: e.router, Ready: func() error {
		if r := reason.Load(); r != nil {
			return errors.New(*r)
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(validated(t, a.Handler(nil)))
	t.Cleanup(srv.Close)
	get := func() (int, ReadyResponse) {
		t.Helper()
		resp, err := http.Get(srv.URL + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var r ReadyResponse
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, r
	}
	for _, tc := range []struct {
		reason string
		status int
		want   ReadyResponse
	}{
		{"not joined yet", 503, ReadyResponse{Status: "not ready", Reason: "not joined yet"}},
		{"", 200, ReadyResponse{Status: "ready"}},
		{"draining", 503, ReadyResponse{Status: "not ready", Reason: "draining"}},
	} {
		if tc.reason != "" {
			reason.Store(&tc.reason)
		} else {
			reason.Store(nil)
		}
		if status, r := get(); status != tc.status || r != tc.want {
			t.Errorf("reason %q: GET /readyz = %d %+v, want %d %+v", tc.reason, status, r, tc.status, tc.want)
		}
	}
	s := e.startHTTP(t) // no Ready: always ready
	if h := s.do(t, http.MethodGet, "/readyz", "", nil); h.status != 200 || string(h.body) != "{\"status\":\"ready\"}\n" {
		t.Errorf("GET /readyz without Ready = %d %q, want 200 ready", h.status, h.body)
	}
}
