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

// Concurrency leases ride the peer API in two places: a concurrency key's
// state (BucketState.lease_set and leases, in handoffs and replicas)
// carries the key's whole lease set, and Acquire, Renew and Release ask a
// key's owner to change it.

// Leaser decides the concurrency operations other nodes send
// (forward.Router). Its methods may be called concurrently and must not
// trust what they are given; with final, they decide whatever this node's
// ring says.
type Leaser interface {
	AcquireFor(ctx context.Context, from string, q peermsg.AcquireRequest) peermsg.LeaseAnswer
	RenewFor(ctx context.Context, from, id string, ttl time.Duration, final bool) peermsg.LeaseAnswer
	ReleaseFor(ctx context.Context, from, id string, outcome uint8, latency time.Duration, final bool) peermsg.LeaseAnswer
}

// MaxStateLeases is the most leases one state may carry; a state with
// more keeps the first ones.
const MaxStateLeases = 4096

// Field numbers of BucketState.lease_set and leases, and of message
// LeaseRecord.
const (
	fStateLeaseSet, fStateLeases, fStateRingVersion = 6, 7, 8
	fStateWindow                                    = 9
	fLeaseID, fLeaseTTL, fLeaseRequestID, fLeaseMax = 1, 2, 3, 4
)

func leaseRecordSize(l *peermsg.Lease) int {
	return stringSize(fLeaseID, l.ID) + varintSize(fLeaseTTL, uint64(l.TTL)) + stringSize(fLeaseRequestID, l.RequestID) +
		varintSize(fLeaseMax, uint64(l.MaxTTL))
}

// leasesSize is the size of a state's lease_set, leases and ring_version
// fields.
func leasesSize(s *State) int {
	n := varintSize(fStateLeaseSet, boolVal(s.LeaseSet))
	for i := range s.Leases {
		n += bytesSize(fStateLeases, leaseRecordSize(&s.Leases[i]))
	}
	return n + varintSize(fStateRingVersion, s.RingVersion)
}

// appendLeases appends a state's lease_set, leases and ring_version
// fields.
func appendLeases(b []byte, s *State) []byte {
	b = appendVarint(b, fStateLeaseSet, boolVal(s.LeaseSet))
	for i := range s.Leases {
		l := &s.Leases[i]
		b = protowire.AppendTag(b, fStateLeases, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(leaseRecordSize(l)))
		b = appendString(b, fLeaseID, l.ID)
		b = appendVarint(b, fLeaseTTL, uint64(l.TTL))
		b = appendString(b, fLeaseRequestID, l.RequestID)
		b = appendVarint(b, fLeaseMax, uint64(l.MaxTTL))
	}
	return appendVarint(b, fStateRingVersion, s.RingVersion)
}

func parseLeaseRecord(b []byte) (peermsg.Lease, error) {
	var l peermsg.Lease
	err := fields(b, func(tag, v uint64, val []byte) error {
		switch tag {
		case fLeaseID<<3 | 2:
			l.ID = str(val)
		case fLeaseTTL << 3:
			l.TTL = time.Duration(v)
		case fLeaseRequestID<<3 | 2:
			l.RequestID = str(val)
		case fLeaseMax << 3:
			l.MaxTTL = time.Duration(v)
		}
		return nil
	})
	return l, err
}

func leasesToProto(ls []peermsg.Lease) []*peerv1.LeaseRecord {
	if len(ls) == 0 {
		return nil
	}
	out := make([]*peerv1.LeaseRecord, len(ls))
	for i, l := range ls {
		out[i] = &peerv1.LeaseRecord{Id: l.ID, TtlNs: int64(l.TTL), RequestId: l.RequestID, MaxTtlNs: int64(l.MaxTTL)}
	}
	return out
}

func leasesFromProto(ps []*peerv1.LeaseRecord) []peermsg.Lease {
	if len(ps) == 0 {
		return nil
	}
	ps = ps[:min(len(ps), MaxStateLeases)]
	out := make([]peermsg.Lease, len(ps))
	for i, p := range ps {
		out[i] = peermsg.Lease{ID: p.GetId(), TTL: time.Duration(p.GetTtlNs()), RequestID: p.GetRequestId(), MaxTTL: time.Duration(p.GetMaxTtlNs())}
	}
	return out
}

func leaseAnswerToProto(a *peermsg.LeaseAnswer) *peerv1.PeerLeaseResponse {
	return &peerv1.PeerLeaseResponse{Status: peerv1.PeerLeaseResponse_Status(a.Status), Lease: a.Lease, InFlight: a.InFlight,
		Limit: a.Limit, ExpiresInNs: int64(a.ExpiresIn), RetryAfterNs: int64(a.RetryAfter), Owner: a.Owner, Redirect: a.Redirect}
}

func leaseAnswerFromProto(p *peerv1.PeerLeaseResponse) peermsg.LeaseAnswer {
	st := peermsg.LeaseStatus(p.GetStatus())
	if st > peermsg.LeaseUnavailable {
		st = peermsg.LeaseUnavailable
	}
	return peermsg.LeaseAnswer{Status: st, Lease: p.GetLease(), InFlight: p.GetInFlight(), Limit: p.GetLimit(),
		ExpiresIn: time.Duration(p.GetExpiresInNs()), RetryAfter: time.Duration(p.GetRetryAfterNs()), Owner: p.GetOwner(), Redirect: p.GetRedirect()}
}

// leaser returns the Leaser, or Unimplemented without one.
func (s *Server) leaserFor(ctx context.Context, from string) (Leaser, error) {
	if s.leaser == nil {
		return nil, status.Error(codes.Unimplemented, "peer: this node leases nothing")
	}
	if err := s.authorize(ctx, from); err != nil {
		return nil, err
	}
	return s.leaser, nil
}

// Acquire asks this node, the key's owner, for a lease.
func (s *Server) Acquire(ctx context.Context, req *peerv1.PeerAcquireRequest) (*peerv1.PeerLeaseResponse, error) {
	l, err := s.leaserFor(ctx, req.GetFrom())
	if err != nil {
		return nil, err
	}
	lim, err := limitFromProto(req.GetLimit())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	q := peermsg.AcquireRequest{Key: req.GetKey(), Limit: lim, TTL: time.Duration(req.GetTtlNs()), RequestID: req.GetRequestId(), Final: req.GetFinal(),
		MaxTTL: time.Duration(req.GetMaxTtlNs())}
	if req.GetAdaptive() != nil {
		spec := specFromProto(req.GetAdaptive())
		if err := checkSpec(&spec); err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		q.Adaptive = &spec
		if sc := req.GetAdaptiveScope(); len(sc) <= maxScopeLen {
			q.AdaptiveScope = strings.Clone(sc)
		}
	}
	a := l.AcquireFor(ctx, strings.Clone(req.GetFrom()), q)
	return leaseAnswerToProto(&a), nil
}

// Renew asks this node to renew a lease of a key it owns.
func (s *Server) Renew(ctx context.Context, req *peerv1.PeerRenewRequest) (*peerv1.PeerLeaseResponse, error) {
	l, err := s.leaserFor(ctx, req.GetFrom())
	if err != nil {
		return nil, err
	}
	a := l.RenewFor(ctx, strings.Clone(req.GetFrom()), req.GetLease(), time.Duration(req.GetTtlNs()), req.GetFinal())
	return leaseAnswerToProto(&a), nil
}

// Release asks this node to release a lease of a key it owns.
func (s *Server) Release(ctx context.Context, req *peerv1.PeerReleaseRequest) (*peerv1.PeerLeaseResponse, error) {
	l, err := s.leaserFor(ctx, req.GetFrom())
	if err != nil {
		return nil, err
	}
	out := min(req.GetOutcome(), 255)
	a := l.ReleaseFor(ctx, strings.Clone(req.GetFrom()), req.GetLease(), uint8(out), time.Duration(req.GetLatencyNs()), req.GetFinal())
	return leaseAnswerToProto(&a), nil
}

// AcquireLease asks the member name for a lease, within Timeout.
func (p *Pool) AcquireLease(ctx context.Context, name string, q peermsg.AcquireRequest) (peermsg.LeaseAnswer, error) {
	c, err := p.conn(name, true)
	if err != nil {
		return peermsg.LeaseAnswer{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	resp, err := c.rpc.Acquire(ctx, &peerv1.PeerAcquireRequest{From: c.cfg.Self, Key: q.Key, Limit: limitToProto(&q.Limit),
		TtlNs: int64(q.TTL), RequestId: q.RequestID, Final: q.Final, Adaptive: specToProto(q.Adaptive), AdaptiveScope: q.AdaptiveScope,
		MaxTtlNs: int64(q.MaxTTL)})
	if err != nil {
		return peermsg.LeaseAnswer{}, err
	}
	return leaseAnswerFromProto(resp), nil
}

// RenewLease asks the member name to renew the lease id, within Timeout.
func (p *Pool) RenewLease(ctx context.Context, name, id string, ttl time.Duration, final bool) (peermsg.LeaseAnswer, error) {
	c, err := p.conn(name, true)
	if err != nil {
		return peermsg.LeaseAnswer{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	resp, err := c.rpc.Renew(ctx, &peerv1.PeerRenewRequest{From: c.cfg.Self, Lease: id, TtlNs: int64(ttl), Final: final})
	if err != nil {
		return peermsg.LeaseAnswer{}, err
	}
	return leaseAnswerFromProto(resp), nil
}

// ReleaseLease asks the member name to release the lease id, within
// Timeout.
func (p *Pool) ReleaseLease(ctx context.Context, name, id string, outcome uint8, latency time.Duration, final bool) (peermsg.LeaseAnswer, error) {
	c, err := p.conn(name, true)
	if err != nil {
		return peermsg.LeaseAnswer{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	resp, err := c.rpc.Release(ctx, &peerv1.PeerReleaseRequest{From: c.cfg.Self, Lease: id, Outcome: uint32(outcome),
		LatencyNs: int64(latency), Final: final})
	if err != nil {
		return peermsg.LeaseAnswer{}, err
	}
	return leaseAnswerFromProto(resp), nil
}
