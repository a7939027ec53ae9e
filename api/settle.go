package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/forward"
	pb "github.com/ringlimit/ringlimit/proto/ringlimitv1"
)

// Reserve and settle: a check with "reserve": true that is
// admitted answers "reservation"; POST /v1/settle makes its spend exactly
// the true cost.

// Error codes of POST /v1/settle.
const (
	// CodeReservationNotFound: no such reservation (unknown, forged or
	// expired): 404.
	CodeReservationNotFound = "RESERVATION_NOT_FOUND"
	// CodeAlreadySettled: the reservation was settled before; nothing
	// changed: 409.
	CodeAlreadySettled = "ALREADY_SETTLED"
)

// SettleRequest is the body of POST /v1/settle.
type SettleRequest struct {
	Reservation string `json:"reservation"`
	// Cost is the true cost, 0 or more; required.
	Cost *int64 `json:"cost"`
}

// SettleResponse is the body of a 200 answer to POST /v1/settle.
type SettleResponse struct {
	Settled bool  `json:"settled"`
	Cost    int64 `json:"cost"`
	// Remaining is what the key has left (0 while in debt).
	Remaining int64  `json:"remaining"`
	Limit     int64  `json:"limit"`
	Owner     string `json:"owner"`
}

// reserveTTL returns the reservation TTL of an inline check: 0 without
// reserve. Every error names its field.
func (req *CheckRequest) reserveTTL(l *bucket.Limit) (time.Duration, error) {
	var ttl time.Duration
	if req.ReserveTTL != "" {
		d, err := time.ParseDuration(req.ReserveTTL)
		if err != nil {
			return 0, fmt.Errorf("reserve_ttl: %q is not a duration such as \"5m\"", req.ReserveTTL)
		}
		ttl = d
	}
	return reserveTTL(req.Reserve, ttl, req.ReserveTTL != "", "reserve_ttl", l)
}

// reserveTTL validates a check's reserve fields, ttl under the name field
// (given says whether the request gave it): 0 without reserve,
// bucket.DefaultReserveTTL when not given.
func reserveTTL(reserve bool, ttl time.Duration, given bool, field string, l *bucket.Limit) (time.Duration, error) {
	if !reserve {
		if given {
			return 0, fmt.Errorf("%s: needs reserve", field)
		}
		return 0, nil
	}
	if err := bucket.CheckReserve(l.Algorithm()); err != nil {
		return 0, err
	}
	if !given {
		return bucket.DefaultReserveTTL, nil
	}
	if err := bucket.CheckReserveTTL(field, ttl); err != nil {
		return 0, err
	}
	return ttl, nil
}

// decodeSettle reads and validates a settle body. Every error names the
// field at fault.
func decodeSettle(w http.ResponseWriter, r *http.Request) (SettleRequest, error) {
	var req SettleRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			return req, fmt.Errorf("body: larger than %d bytes", MaxBodyBytes)
		}
		return req, jsonError(err, "")
	}
	if _, err := dec.Token(); err != io.EOF {
		return req, errors.New("body: more than one JSON value")
	}
	return req, validateSettle(req.Reservation, req.Cost)
}

// validateSettle checks a settle's fields, naming the one at fault.
func validateSettle(id string, cost *int64) error {
	if id == "" {
		return errors.New("reservation: required")
	}
	if _, err := bucket.ParseReservationID(id); err != nil {
		return fmt.Errorf("reservation: %w", err)
	}
	if cost == nil {
		return errors.New("cost: required (the true cost, 0 or more)")
	}
	if *cost < 0 || *cost > forward.MaxSettleCost {
		return fmt.Errorf("cost: must be between 0 and %d, got %d", forward.MaxSettleCost, *cost)
	}
	return nil
}

// handleSettle is POST /v1/settle.
func (a *API) handleSettle(w http.ResponseWriter, r *http.Request) {
	priv := a.private(r.Header.Get("Authorization"))
	req, err := decodeSettle(w, r)
	if err != nil {
		a.m.invalid.WithLabelValues("http").Inc()
		a.m.settles.WithLabelValues("error").Inc()
		writeError(w, http.StatusBadRequest, CodeInvalidArgument, a.message(err, priv))
		return
	}
	res, err := a.d.Settle(r.Context(), req.Reservation, *req.Cost)
	switch {
	case err == nil:
		a.m.settles.WithLabelValues("ok").Inc()
		resp := SettleResponse{Settled: true, Cost: res.Cost, Remaining: res.Remaining, Limit: res.Limit, Owner: res.Owner}
		if priv {
			resp.Owner = ""
		}
		writeJSON(w, http.StatusOK, &resp)
	case errors.Is(err, forward.ErrReservationNotFound):
		a.m.settles.WithLabelValues("not_found").Inc()
		writeError(w, http.StatusNotFound, CodeReservationNotFound, "reservation: not found (unknown, or expired: its reserved spend stays)")
	case errors.Is(err, forward.ErrAlreadySettled):
		a.m.settles.WithLabelValues("already_settled").Inc()
		writeError(w, http.StatusConflict, CodeAlreadySettled, "reservation: already settled; nothing changed")
	default:
		a.m.settles.WithLabelValues("error").Inc()
		a.writeCheckError(w, err, priv)
	}
}

// countReservation counts one check with reserve by its result.
func (m *metrics) countReservation(r *forward.Result) {
	res := "refused"
	switch {
	case r.Reservation != "":
		res = "ok"
	case r.Allowed:
		res = "degraded"
	}
	m.reservations.WithLabelValues(res).Inc()
}

// Settle is the public gRPC Settle: NotFound (RESERVATION_NOT_FOUND),
// AlreadyExists (ALREADY_SETTLED), InvalidArgument naming the field,
// Unavailable when the key's owner cannot be reached.
func (g *grpcServer) Settle(ctx context.Context, req *pb.SettleRequest) (*pb.SettleResponse, error) {
	a := g.api
	priv := a.privateGRPC(ctx)
	cost := req.GetCost()
	if err := validateSettle(req.GetReservation(), &cost); err != nil {
		a.m.invalid.WithLabelValues("grpc").Inc()
		a.m.settles.WithLabelValues("error").Inc()
		return nil, status.Error(codes.InvalidArgument, a.message(err, priv))
	}
	res, err := a.d.Settle(ctx, req.GetReservation(), cost)
	switch {
	case err == nil:
		a.m.settles.WithLabelValues("ok").Inc()
		resp := &pb.SettleResponse{Settled: true, Cost: res.Cost, Remaining: res.Remaining, Limit: res.Limit, Owner: res.Owner}
		if priv {
			resp.Owner = ""
		}
		return resp, nil
	case errors.Is(err, forward.ErrReservationNotFound):
		a.m.settles.WithLabelValues("not_found").Inc()
		return nil, status.Error(codes.NotFound, CodeReservationNotFound+": reservation not found (unknown, or expired: its reserved spend stays)")
	case errors.Is(err, forward.ErrAlreadySettled):
		a.m.settles.WithLabelValues("already_settled").Inc()
		return nil, status.Error(codes.AlreadyExists, CodeAlreadySettled+": reservation already settled; nothing changed")
	}
	a.m.settles.WithLabelValues("error").Inc()
	return nil, grpcError(err, priv)
}
