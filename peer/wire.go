package peer

import (
	"errors"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/ringlimit/ringlimit/adaptive"
)

// The Check stream between nodes is encoded by hand: it carries every
// forwarded check, and the generated protobuf code allocates three objects
// per check to decode one (the Check, its Limit and its key) and one per
// decision to encode the answer. The bytes are exactly those of the
// messages CheckRequest and CheckResponse in proto/peer/v1/peer.proto
// (fields in number order, zero values left out, as proto.Marshal writes
// them); wire_test.go checks both directions against the generated code.
//
// The codec is chosen per call by content-subtype: a node opens its Check
// streams with grpc.CallContentSubtype(codecName). For any other value
// than the types below it falls back to protobuf, so a generated client on
// the same content-subtype interoperates.

const codecName = "ringlimit-peer"

func init() { encoding.RegisterCodecV2(peerCodec{}) }

type peerCodec struct{}

func (peerCodec) Name() string { return codecName }

// appender is a message that can write itself.
type appender interface {
	size() int
	appendTo(b []byte) []byte
}

func (peerCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(appender)
	if !ok {
		return encoding.GetCodecV2("proto").Marshal(v)
	}
	pool := mem.DefaultBufferPool()
	buf := pool.Get(m.size())
	*buf = m.appendTo((*buf)[:0])
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

// parser is a message that can read itself from b. It may keep b.
type parser interface {
	buffer(n int) []byte
	parse(b []byte) error
}

func (peerCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(parser)
	if !ok {
		return encoding.GetCodecV2("proto").Unmarshal(data, v)
	}
	b := m.buffer(data.Len())
	data.CopyTo(b)
	return m.parse(b)
}

// wireCheck is one check of a batch (message Check).
type wireCheck struct {
	key    string
	limit  wireLimit
	cost   int64
	refund bool
	lease  int64
	final  bool
	sync   bool
	peek   bool
	// trace is the check's W3C trace context when traced is set (field
	// trace, written only then: an untraced check has the bytes it had
	// before the field existed).
	trace  traceContext
	traced bool
	// reserveTTLNs asks for a reservation (field reserve_ttl_ns, 0: none).
	reserveTTLNs int64
	// adaptive is the layer's adaptive spec when hasAdaptive (field
	// adaptive), adaptiveScope its scope (adaptive_wire.go).
	adaptive      adaptive.Spec
	hasAdaptive   bool
	adaptiveScope string
}

// checkBatch is one batch on the Check stream (message CheckRequest). A
// received batch's keys point into buf: they are valid until the batch is
// reused. A message that carries only an answer to a reverse batch has id
// 0 and no checks.
type checkBatch struct {
	from        string
	id          uint64
	ringVersion uint64
	checks      []wireCheck
	buf         []byte
	// reverse is the answer to a batch the receiver sent on the stream,
	// written with the message when set; reverseRaw is a received one's
	// bytes (in buf), nil when it carries none.
	reverse    *checkAnswer
	reverseRaw []byte
}

// wireDecision is one decision (message Decision).
type wireDecision struct {
	allowed      bool
	remaining    int64
	retryAfterMs int64
	resetAfterMs int64
	delayMs      int64
	leaseGranted int64
	leaseTTLMs   int64
	redirect     string
	full         bool
	reservation  string
	limit        int64 // field limit: an adaptive limit's current count
}

// checkAnswer answers one batch (message CheckResponse). A received answer's
// owner, error and redirects point into buf. A message that carries only a
// reverse batch has id 0 and no decisions.
type checkAnswer struct {
	owner     string
	id        uint64
	decisions []wireDecision
	err       string
	drain     bool
	buf       []byte
	// reverse is a batch of the sender's own checks for the stream's
	// opener, written with the message when set; reverseRaw is a received
	// one's bytes (in buf), nil when it carries none.
	reverse    *checkBatch
	reverseRaw []byte
}

// Field numbers, from peer.proto.
const (
	fLimitAlgorithm, fLimitLimit, fLimitPerNs, fLimitBurst                     = 1, 2, 3, 4
	fLimitCalendar, fLimitWeekStart, fLimitTimezone                            = 5, 6, 7
	fCheckKey, fCheckLimit, fCheckCost, fCheckRefund, fCheckLease, fCheckFinal = 1, 2, 3, 4, 5, 6
	fCheckTrace, fCheckSync, fCheckPeek, fCheckReserveTTL                      = 7, 8, 9, 10
	fReqFrom, fReqChecks, fReqID, fReqRingVersion                              = 1, 2, 3, 4
	fDecAllowed, fDecRemaining, fDecRetry, fDecReset, fDecDelay                = 1, 2, 3, 4, 5
	fDecLeaseGranted, fDecLeaseTTL, fDecRedirect, fDecFull, fDecReservation    = 6, 7, 8, 9, 10
	fRespOwner, fRespDecisions, fRespID, fRespError, fRespDrain                = 1, 2, 3, 4, 5
	fReqReverse, fRespReverse                                                  = 5, 6
)

func varintSize(f protowire.Number, v uint64) int {
	if v == 0 {
		return 0
	}
	return protowire.SizeTag(f) + protowire.SizeVarint(v)
}

func appendVarint(b []byte, f protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	return protowire.AppendVarint(protowire.AppendTag(b, f, protowire.VarintType), v)
}

func bytesSize(f protowire.Number, n int) int {
	return protowire.SizeTag(f) + protowire.SizeBytes(n)
}

func appendString(b []byte, f protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	return protowire.AppendString(protowire.AppendTag(b, f, protowire.BytesType), s)
}

func stringSize(f protowire.Number, s string) int {
	if s == "" {
		return 0
	}
	return bytesSize(f, len(s))
}

func boolVal(v bool) uint64 {
	if v {
		return 1
	}
	return 0
}

func (c *wireCheck) size() int {
	// The limit is always present (proto.Marshal writes a set message
	// field even when it is empty).
	return stringSize(fCheckKey, c.key) + bytesSize(fCheckLimit, c.limit.size()) +
		varintSize(fCheckCost, uint64(c.cost)) + varintSize(fCheckRefund, boolVal(c.refund)) +
		varintSize(fCheckLease, uint64(c.lease)) + varintSize(fCheckFinal, boolVal(c.final)) + c.traceSize() +
		varintSize(fCheckSync, boolVal(c.sync)) + varintSize(fCheckPeek, boolVal(c.peek)) + varintSize(fCheckReserveTTL, uint64(c.reserveTTLNs)) +
		c.adaptiveSize() + stringSize(fCheckAdaptiveScope, c.adaptiveScope)
}

func (c *wireCheck) adaptiveSize() int {
	if !c.hasAdaptive {
		return 0
	}
	return bytesSize(fCheckAdaptive, specSize(&c.adaptive))
}

func (c *wireCheck) traceSize() int {
	if !c.traced {
		return 0
	}
	return bytesSize(fCheckTrace, traceContextLen)
}

func (c *wireCheck) appendTo(b []byte) []byte {
	b = appendString(b, fCheckKey, c.key)
	b = protowire.AppendTag(b, fCheckLimit, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(c.limit.size()))
	b = c.limit.appendTo(b)
	b = appendVarint(b, fCheckCost, uint64(c.cost))
	b = appendVarint(b, fCheckRefund, boolVal(c.refund))
	b = appendVarint(b, fCheckLease, uint64(c.lease))
	b = appendVarint(b, fCheckFinal, boolVal(c.final))
	if c.traced {
		b = protowire.AppendTag(b, fCheckTrace, protowire.BytesType)
		b = protowire.AppendBytes(b, c.trace[:])
	}
	b = appendVarint(b, fCheckSync, boolVal(c.sync))
	b = appendVarint(b, fCheckPeek, boolVal(c.peek))
	b = appendVarint(b, fCheckReserveTTL, uint64(c.reserveTTLNs))
	if c.hasAdaptive {
		b = protowire.AppendTag(b, fCheckAdaptive, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(specSize(&c.adaptive)))
		b = appendSpec(b, &c.adaptive)
	}
	return appendString(b, fCheckAdaptiveScope, c.adaptiveScope)
}

func (m *checkBatch) size() int {
	n := stringSize(fReqFrom, m.from) + varintSize(fReqID, m.id) + varintSize(fReqRingVersion, m.ringVersion)
	for i := range m.checks {
		n += bytesSize(fReqChecks, m.checks[i].size())
	}
	if m.reverse != nil {
		n += bytesSize(fReqReverse, m.reverse.size())
	}
	return n
}

func (m *checkBatch) appendTo(b []byte) []byte {
	b = appendString(b, fReqFrom, m.from)
	for i := range m.checks {
		c := &m.checks[i]
		b = protowire.AppendTag(b, fReqChecks, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(c.size()))
		b = c.appendTo(b)
	}
	b = appendVarint(b, fReqID, m.id)
	b = appendVarint(b, fReqRingVersion, m.ringVersion)
	if m.reverse != nil {
		b = protowire.AppendTag(b, fReqReverse, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(m.reverse.size()))
		b = m.reverse.appendTo(b)
	}
	return b
}

func (d *wireDecision) size() int {
	return varintSize(fDecAllowed, boolVal(d.allowed)) + varintSize(fDecRemaining, uint64(d.remaining)) +
		varintSize(fDecRetry, uint64(d.retryAfterMs)) + varintSize(fDecReset, uint64(d.resetAfterMs)) +
		varintSize(fDecDelay, uint64(d.delayMs)) + varintSize(fDecLeaseGranted, uint64(d.leaseGranted)) +
		varintSize(fDecLeaseTTL, uint64(d.leaseTTLMs)) + stringSize(fDecRedirect, d.redirect) +
		varintSize(fDecFull, boolVal(d.full)) + stringSize(fDecReservation, d.reservation) +
		varintSize(fDecLimit, uint64(d.limit))
}

func (d *wireDecision) appendTo(b []byte) []byte {
	b = appendVarint(b, fDecAllowed, boolVal(d.allowed))
	b = appendVarint(b, fDecRemaining, uint64(d.remaining))
	b = appendVarint(b, fDecRetry, uint64(d.retryAfterMs))
	b = appendVarint(b, fDecReset, uint64(d.resetAfterMs))
	b = appendVarint(b, fDecDelay, uint64(d.delayMs))
	b = appendVarint(b, fDecLeaseGranted, uint64(d.leaseGranted))
	b = appendVarint(b, fDecLeaseTTL, uint64(d.leaseTTLMs))
	b = appendString(b, fDecRedirect, d.redirect)
	b = appendVarint(b, fDecFull, boolVal(d.full))
	b = appendString(b, fDecReservation, d.reservation)
	return appendVarint(b, fDecLimit, uint64(d.limit))
}

func (m *checkAnswer) size() int {
	n := stringSize(fRespOwner, m.owner) + varintSize(fRespID, m.id) + stringSize(fRespError, m.err) +
		varintSize(fRespDrain, boolVal(m.drain))
	for i := range m.decisions {
		n += bytesSize(fRespDecisions, m.decisions[i].size())
	}
	if m.reverse != nil {
		n += bytesSize(fRespReverse, m.reverse.size())
	}
	return n
}

func (m *checkAnswer) appendTo(b []byte) []byte {
	b = appendString(b, fRespOwner, m.owner)
	for i := range m.decisions {
		d := &m.decisions[i]
		b = protowire.AppendTag(b, fRespDecisions, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(d.size()))
		b = d.appendTo(b)
	}
	b = appendVarint(b, fRespID, m.id)
	b = appendString(b, fRespError, m.err)
	b = appendVarint(b, fRespDrain, boolVal(m.drain))
	if m.reverse != nil {
		b = protowire.AppendTag(b, fRespReverse, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(m.reverse.size()))
		b = m.reverse.appendTo(b)
	}
	return b
}

// ---- decoding ----

var errWire = errors.New("forward: malformed peer message")
