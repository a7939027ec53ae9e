package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/client"
)

// TestReserveCostSettle: reserve 100 of 1,000, settle 30 (970 left), the
// same settle again (ErrAlreadySettled), a forged id
// (ErrReservationNotFound); a refused reserve holds no reservation.
func TestReserveCostSettle(t *testing.T) {
	cl, done := exampleClient()
	defer done()
	lim, err := client.NewLimiter(cl, client.Per(1000, 1000*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	h, err := lim.ReserveCost(ctx, "llm", 100, time.Minute)
	if err != nil || !h.Allowed || h.Remaining != 900 || h.Reservation == "" {
		t.Fatalf("ReserveCost 100: %+v, %v", h, err)
	}
	if s, err := lim.Settle(ctx, h.Reservation, 30); err != nil || s.Remaining != 970 || s.Cost != 30 {
		t.Fatalf("Settle 30: %+v, %v", s, err)
	}
	if _, err := cl.Settle(ctx, h.Reservation, 30); !errors.Is(err, client.ErrAlreadySettled) {
		t.Fatalf("second Settle: %v", err)
	}
	forged := h.Reservation[:len(h.Reservation)-1] + "A"
	if forged == h.Reservation {
		forged = h.Reservation[:len(h.Reservation)-1] + "B"
	}
	if _, err := cl.Settle(ctx, forged, 1); !errors.Is(err, client.ErrReservationNotFound) {
		t.Fatalf("forged Settle: %v", err)
	}
	if h, err := lim.ReserveCost(ctx, "llm", 1000, 0); err != nil || h.Allowed || h.Reservation != "" {
		t.Fatalf("refused ReserveCost: %+v, %v", h, err)
	}
}

// TestSettleMiddlewareDefaults: 1,000 tokens refilling one an hour. A
// handler that reports no usage is settled at its estimate: 400 reserved,
// settled at 400, 600 left. A request estimating 700 is then refused
// before its handler runs: 429, Retry-After 360000 (the 100 tokens
// missing take 100 hours, less the milliseconds since the first reserve,
// rounded up to whole seconds) and a body with the same wait in ms.
func TestSettleMiddlewareDefaults(t *testing.T) {
	cl, done := exampleClient()
	defer done()
	lim, err := client.NewLimiter(cl, client.Per(1000, 1000*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	type settled struct {
		s   client.Settlement
		err error
	}
	var got []settled
	mw, err := client.SettleMiddleware(client.SettleConfig{
		Limiter:  lim,
		Key:      func(*http.Request) string { return "mw" },
		Estimate: func(r *http.Request) int { n, _ := strconv.Atoi(r.URL.Query().Get("estimate")); return n },
		OnSettle: func(_ *http.Request, s client.Settlement, err error) { got = append(got, settled{s, err}) },
	})
	if err != nil {
		t.Fatal(err)
	}
	ran := 0
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { ran++ })) // reports no usage
	serve := func(estimate string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/?estimate="+estimate, nil))
		return w
	}
	if w := serve("400"); w.Code != 200 || ran != 1 {
		t.Fatalf("estimate 400: %d, handler ran %d times", w.Code, ran)
	}
	if len(got) != 1 || got[0].err != nil || got[0].s.Cost != 400 || got[0].s.Remaining != 600 {
		t.Fatalf("settles %+v; want one at 400, 600 left", got)
	}
	w := serve("700")
	if w.Code != http.StatusTooManyRequests || ran != 1 || len(got) != 1 {
		t.Fatalf("estimate 700 of 600 left: %d, handler ran %d times, %d settles; want 429, 1, 1", w.Code, ran, len(got))
	}
	if ra := w.Header().Get("Retry-After"); ra != "360000" {
		t.Fatalf("Retry-After %q, want 360000", ra)
	}
	var body struct {
		Code    string `json:"code"`
		RetryMs int64  `json:"retry_after_ms"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || body.Code != "RATE_LIMITED" || body.RetryMs <= 359_999_000 || body.RetryMs > 360_000_000 {
		t.Fatalf("body %s (%v); want RATE_LIMITED and a wait within 1s under 360,000,000 ms", w.Body, err)
	}
}
