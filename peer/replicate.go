package peer

import (
	"context"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/internal/peermsg"
	peerv1 "github.com/ringlimit/ringlimit/proto/peerv1"
)

// Replicate is encoded by hand too (see wire.go): an owner sends its
// successors a call every 20 ms with up to 1024 states, and the generated
// code allocates a BucketState, a Limit and a key per state on both sides.
// A node calls Replicate with content-subtype codecName; the bytes are
// those of ReplicateRequest and ReplicateResponse, and wire_test.go checks
// both directions against the generated code.
//
// The server's Replicate method is not the generated handler: Register
// registers a copy of the service desc whose Replicate decodes into a
// pooled replicateIn. A generated client on the default content-subtype
// ("proto") still works: replicateIn is also a proto.Message, whose
// reflection is a generated ReplicateRequest it holds, so the protobuf
// codec fills that, and the call takes the generated path
// (Server.Replicate).

// Field numbers, from peer.proto.
const (
	fStateKey, fStateLimit, fStateUsed        = 1, 2, 3
	fStateResetAt                             = 4
	fReplFrom, fReplRingVersion, fReplBuckets = 1, 2, 3
	fReplAccepted                             = 1
)

// replicateBatch is a Replicate call as the sender writes it (message
// ReplicateRequest), straight from the caller's states.
type replicateBatch struct {
	from    string
	version uint64
	states  []State
}

// stateSize is the size of message BucketState for s, whose limit is l.
// The limit is always written, as proto.Marshal writes a set message field
// even when it is empty.
func stateSize(s *State, l *wireLimit) int {
	return stringSize(fStateKey, s.Key) + bytesSize(fStateLimit, l.size()) + varintSize(fStateUsed, uint64(s.Used)) +
		varintSize(fStateResetAt, uint64(s.ResetAt)) + reservationsSize(s.Reservations) + leasesSize(s) +
		varintSize(fStateWindow, uint64(s.Window)) + adaptiveStateSize(s.Adaptive)
}

func (m *replicateBatch) size() int {
	n := stringSize(fReplFrom, m.from) + varintSize(fReplRingVersion, m.version)
	for i := range m.states {
		s := &m.states[i]
		l := toWireLimit(&s.Limit)
		n += bytesSize(fReplBuckets, stateSize(s, &l))
	}
	return n
}

func (m *replicateBatch) appendTo(b []byte) []byte {
	b = appendString(b, fReplFrom, m.from)
	b = appendVarint(b, fReplRingVersion, m.version)
	for i := range m.states {
		s := &m.states[i]
		l := toWireLimit(&s.Limit)
		b = protowire.AppendTag(b, fReplBuckets, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(stateSize(s, &l)))
		b = appendString(b, fStateKey, s.Key)
		b = protowire.AppendTag(b, fStateLimit, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(l.size()))
		b = l.appendTo(b)
		b = appendVarint(b, fStateUsed, uint64(s.Used))
		b = appendVarint(b, fStateResetAt, uint64(s.ResetAt))
		for j := range s.Reservations {
			b = appendReservation(b, &s.Reservations[j])
		}
		b = appendLeases(b, s)
		b = appendVarint(b, fStateWindow, uint64(s.Window))
		b = appendAdaptiveState(b, s.Adaptive)
	}
	return b
}

// wireState is one received state (message BucketState). A missing limit
// reads as zeros, which validation refuses.
type wireState struct {
	key          string
	limit        wireLimit
	used         int64
	resetAt      int64
	reservations []peermsg.Reservation // validStates keeps MaxStateReservations
	leaseSet     bool
	ringVersion  uint64
	leases       []peermsg.Lease // validStates keeps MaxStateLeases
	adaptive     *peermsg.AdaptiveState
	window       int64
}

func (s *wireState) parse(b []byte) error {
	*s = wireState{}
	return fields(b, func(tag, v uint64, val []byte) error {
		switch tag {
		case fStateKey<<3 | 2:
			s.key = str(val)
		case fStateLimit<<3 | 2:
			return s.limit.parse(val)
		case fStateUsed << 3:
			s.used = int64(v)
		case fStateReservations<<3 | 2:
			r, err := parseReservation(val)
			if err != nil {
				return err
			}
			s.reservations = append(s.reservations, r)
		case fStateResetAt << 3:
			s.resetAt = int64(v)
		case fStateLeaseSet << 3:
			s.leaseSet = v != 0
		case fStateRingVersion << 3:
			s.ringVersion = v
		case fStateWindow << 3:
			s.window = int64(v)
		case fStateLeases<<3 | 2:
			l, err := parseLeaseRecord(val)
			if err != nil {
				return err
			}
			s.leases = append(s.leases, l)
		case fStateAdaptive<<3 | 2:
			if s.adaptive == nil {
				s.adaptive = new(peermsg.AdaptiveState)
			}
			return parseAdaptiveState(val, s.adaptive)
		}
		return nil
	})
}

// replicateIn is a received Replicate call (message ReplicateRequest),
// reused through replicatePool. Read by parse (content-subtype codecName),
// its from and keys point into buf. Read by the protobuf codec (a generated
// client), it is pb that holds the call.
type replicateIn struct {
	from    string
	version uint64
	states  []wireState
	buf     []byte
	hand    bool // parse read the call; otherwise pb holds it

	pb    *peerv1.ReplicateRequest
	valid []State // the states handed to the Handler
}

var replicatePool = sync.Pool{New: func() any { return new(replicateIn) }}

func (m *replicateIn) buffer(n int) []byte {
	m.buf = grow(m.buf, n)
	return m.buf
}

func (m *replicateIn) parse(b []byte) error {
	m.from, m.version, m.states, m.hand = "", 0, m.states[:0], true
	return fields(b, func(tag, v uint64, val []byte) error {
		switch tag {
		case fReplFrom<<3 | 2:
			m.from = str(val)
		case fReplRingVersion << 3:
			m.version = v
		case fReplBuckets<<3 | 2:
			m.states = append(m.states, wireState{})
			return m.states[len(m.states)-1].parse(val)
		}
		return nil
	})
}

// ProtoReflect makes m a proto.Message for the protobuf codec, which then
// fills m.pb: the call of a generated client on content-subtype "proto".
// An interceptor that reads the request as protobuf sees pb, which is
// empty when parse read the call.
func (m *replicateIn) ProtoReflect() protoreflect.Message {
	if m.pb == nil {
		m.pb = new(peerv1.ReplicateRequest)
	}
	return m.pb.ProtoReflect()
}

// decode reads the call with dec.
func (m *replicateIn) decode(dec func(any) error) error {
	m.hand = false
	if m.pb != nil {
		m.pb.Reset()
	}
	return dec(m)
}

// validStates returns the valid states of a call parse read; invalid ones
// (bad key or limit, negative used) are left out, as statesFromProto
// leaves them out. Their
// keys point into m.buf; the slice is m's, reused by the next call.
func (m *replicateIn) validStates() []State {
	m.valid = m.valid[:0]
	var (
		last  wireLimit // the states of a batch mostly share a limit: build it once
		l     bucket.Limit
		err   error
		built bool
	)
	for i := range m.states {
		w := &m.states[i]
		if !built || w.limit != last {
			last, built = w.limit, true
			l, err = w.limit.toLimit()
		}
		if err != nil || bucket.CheckKey(w.key) != nil || w.used < 0 {
			continue
		}
		m.valid = append(m.valid, State{Key: w.key, Limit: l, Used: w.used,
			Reservations: w.reservations[:min(len(w.reservations), MaxStateReservations)], ResetAt: w.resetAt,
			LeaseSet: w.leaseSet, Leases: w.leases[:min(len(w.leases), MaxStateLeases)], RingVersion: w.ringVersion, Adaptive: w.adaptive,
			Window: w.window})
	}
	return m.valid
}

// replicateAck answers a Replicate call (message ReplicateResponse).
type replicateAck struct {
	accepted int64
	small    [16]byte // holds a received answer, which is at most 11 bytes
}

func (a *replicateAck) size() int { return varintSize(fReplAccepted, uint64(a.accepted)) }

func (a *replicateAck) appendTo(b []byte) []byte {
	return appendVarint(b, fReplAccepted, uint64(a.accepted))
}

func (a *replicateAck) buffer(n int) []byte {
	if n <= len(a.small) {
		return a.small[:n]
	}
	return make([]byte, n)
}

func (a *replicateAck) parse(b []byte) error {
	a.accepted = 0
	return fields(b, func(tag, v uint64, _ []byte) error {
		if tag == fReplAccepted<<3 {
			a.accepted = int64(v)
		}
		return nil
	})
}

// serviceDesc is peerv1.Peer_ServiceDesc with Replicate decoded by hand.
func serviceDesc() *grpc.ServiceDesc {
	desc := peerv1.Peer_ServiceDesc
	desc.Methods = append([]grpc.MethodDesc(nil), desc.Methods...)
	for i := range desc.Methods {
		if desc.Methods[i].MethodName == "Replicate" {
			desc.Methods[i].Handler = replicateHandler
			return &desc
		}
	}
	panic("peer: the generated Peer service has no Replicate method")
}

// replicateHandler is _Peer_Replicate_Handler decoding into a pooled
// replicateIn, which goes back to the pool when the call returns. An
// interceptor on the peer server is handed that request: it must not keep
// it past the call (the node's own, the metrics', does not).
func replicateHandler(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	s := srv.(*Server)
	in := replicatePool.Get().(*replicateIn)
	defer func() {
		in.pb = nil // a generated client's call is not kept
		replicatePool.Put(in)
	}()
	if err := in.decode(dec); err != nil {
		return nil, err
	}
	if interceptor == nil {
		return s.replicate(ctx, in)
	}
	return interceptor(ctx, in, &s.replicateInfo, s.replicateNext)
}

// replicateAny is the handler an interceptor calls: req is the call read
// by hand or, replaced by the interceptor, a generated request.
func (s *Server) replicateAny(ctx context.Context, req any) (any, error) {
	if r, ok := req.(*peerv1.ReplicateRequest); ok {
		return s.Replicate(ctx, r)
	}
	return s.replicate(ctx, req.(*replicateIn))
}

// replicate is Replicate on a call read by hand: the valid states go to the
// Handler, their keys pointing into in's buffer (see Handler.Replicate).
func (s *Server) replicate(ctx context.Context, in *replicateIn) (any, error) {
	if !in.hand {
		return s.Replicate(ctx, in.pb)
	}
	if err := s.checkReplicate(len(in.states)); err != nil {
		return nil, err
	}
	if err := s.authorize(ctx, in.from); err != nil {
		return nil, err
	}
	// The Handler may keep from (as a member's name); it is copied.
	valid := in.validStates()
	s.m.invalidStates.Add(float64(len(in.states) - len(valid)))
	n, err := s.h.Replicate(strings.Clone(in.from), valid)
	if err != nil {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	s.m.replicas.Add(float64(n))
	return &replicateAck{accepted: int64(n)}, nil
}

// EncodeStates appends states to b in the replication encoding, as
// from's (a Replicate call's body): how a node writes the states of its
// state file.
func EncodeStates(b []byte, from string, states []State) []byte {
	m := replicateBatch{from: from, states: states}
	return m.appendTo(b)
}

// DecodeStates reads what EncodeStates wrote. Every state is checked as
// a replica's is (a bad key, limit or used leaves it out: dropped counts
// them); the states alias b.
func DecodeStates(b []byte) (from string, states []State, dropped int, err error) {
	var m replicateIn
	if err := m.parse(b); err != nil {
		return "", nil, 0, err
	}
	valid := m.validStates()
	return m.from, valid, len(m.states) - len(valid), nil
}
