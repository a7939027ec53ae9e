package peer

import (
	"context"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/ringlimit/ringlimit/internal/peermsg"
	peerv1 "github.com/ringlimit/ringlimit/proto/peerv1"
)

// Reservations ride the peer API in two places: a key's state
// (BucketState.reservations, in handoffs, replicas and fetches) carries
// the key's records, and Settle asks a key's owner to settle one.

// Settler settles reservations other nodes send (forward.Router). It may
// be called concurrently.
type Settler interface {
	// SettleFor settles id at cost for the node from; with final, whatever
	// this node's ring says. It must not trust id or cost. An error means
	// nothing changed and the sender may retry (Unavailable).
	SettleFor(ctx context.Context, from, id string, cost int64, final bool) (peermsg.SettleAnswer, error)
}

// MaxStateReservations is the most records one state may carry; a state
// with more keeps the first ones (the owner's table is bounded anyway).
const MaxStateReservations = 256

// Field numbers of message Reservation and BucketState.reservations.
const (
	fStateReservations                                          = 5
	fResID, fResReserved, fResTTL, fResSettled, fResSettledCost = 1, 2, 3, 4, 5
)

func reservationSize(r *peermsg.Reservation) int {
	return stringSize(fResID, r.ID) + varintSize(fResReserved, uint64(r.Reserved)) +
		varintSize(fResTTL, uint64(r.TTL)) + varintSize(fResSettled, boolVal(r.Settled)) +
		varintSize(fResSettledCost, uint64(r.SettledCost))
}

func appendReservation(b []byte, r *peermsg.Reservation) []byte {
	b = protowire.AppendTag(b, fStateReservations, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(reservationSize(r)))
	b = appendString(b, fResID, r.ID)
	b = appendVarint(b, fResReserved, uint64(r.Reserved))
	b = appendVarint(b, fResTTL, uint64(r.TTL))
	b = appendVarint(b, fResSettled, boolVal(r.Settled))
	return appendVarint(b, fResSettledCost, uint64(r.SettledCost))
}

// reservationsSize is the size of a state's reservations field.
func reservationsSize(rs []peermsg.Reservation) int {
	n := 0
	for i := range rs {
		n += bytesSize(fStateReservations, reservationSize(&rs[i]))
	}
	return n
}

func parseReservation(b []byte) (peermsg.Reservation, error) {
	var r peermsg.Reservation
	err := fields(b, func(tag, v uint64, val []byte) error {
		switch tag {
		case fResID<<3 | 2:
			r.ID = str(val)
		case fResReserved << 3:
			r.Reserved = int64(v)
		case fResTTL << 3:
			r.TTL = time.Duration(v)
		case fResSettled << 3:
			r.Settled = v != 0
		case fResSettledCost << 3:
			r.SettledCost = int64(v)
		}
		return nil
	})
	return r, err
}

func reservationsToProto(rs []peermsg.Reservation) []*peerv1.Reservation {
	if len(rs) == 0 {
		return nil
	}
	out := make([]*peerv1.Reservation, len(rs))
	for i, r := range rs {
		out[i] = &peerv1.Reservation{Id: r.ID, Reserved: r.Reserved, TtlNs: int64(r.TTL), Settled: r.Settled, SettledCost: r.SettledCost}
	}
	return out
}

func reservationsFromProto(ps []*peerv1.Reservation) []peermsg.Reservation {
	if len(ps) == 0 {
		return nil
	}
	ps = ps[:min(len(ps), MaxStateReservations)]
	out := make([]peermsg.Reservation, len(ps))
	for i, p := range ps {
		out[i] = peermsg.Reservation{ID: p.GetId(), Reserved: p.GetReserved(), TTL: time.Duration(p.GetTtlNs()),
			Settled: p.GetSettled(), SettledCost: p.GetSettledCost()}
	}
	return out
}

// Settle settles a reservation for the node the call names, on the Settler
// of ServerConfig (Unimplemented without one).
func (s *Server) Settle(ctx context.Context, req *peerv1.PeerSettleRequest) (*peerv1.PeerSettleResponse, error) {
	if s.settler == nil {
		return nil, status.Error(codes.Unimplemented, "peer: this node settles nothing")
	}
	if err := s.authorize(ctx, req.GetFrom()); err != nil {
		return nil, err
	}
	a, err := s.settler.SettleFor(ctx, strings.Clone(req.GetFrom()), req.GetReservation(), req.GetCost(), req.GetFinal())
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	return &peerv1.PeerSettleResponse{Status: peerv1.PeerSettleResponse_Status(a.Status), Redirect: a.Redirect,
		Remaining: a.Remaining, Limit: a.Limit, Owner: a.Owner}, nil
}

// Settle asks the member name to settle id at cost, within Timeout.
func (p *Pool) Settle(ctx context.Context, name, id string, cost int64, final bool) (peermsg.SettleAnswer, error) {
	c, err := p.conn(name, true)
	if err != nil {
		return peermsg.SettleAnswer{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	resp, err := c.rpc.Settle(ctx, &peerv1.PeerSettleRequest{From: c.cfg.Self, Reservation: id, Cost: cost, Final: final})
	if err != nil {
		return peermsg.SettleAnswer{}, err
	}
	st := peermsg.SettleStatus(resp.GetStatus())
	if st > peermsg.SettleRedirect {
		st = peermsg.SettleNotFound
	}
	return peermsg.SettleAnswer{Status: st, Redirect: resp.GetRedirect(), Remaining: resp.GetRemaining(),
		Limit: resp.GetLimit(), Owner: resp.GetOwner()}, nil
}
