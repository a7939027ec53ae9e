package client_test

import (
	"context"
	"errors"
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
