package peer

import (
	"fmt"
	"strings"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"
)

// Decoding: each parser reads the fields it knows in any order and skips
// the others, as protobuf does; a malformed field fails the message.

// fields calls fn with each field of b in turn: its tag (number<<3 | wire
// type: 0 for a varint, 2 for bytes), and either its varint value or its
// bytes. A field whose number is known but whose wire type is not the
// expected one matches none of the tags the parsers below switch on and is
// skipped, as protobuf skips unknown fields. Groups are refused (the peer
// protocol has none).
func fields(b []byte, fn func(tag, v uint64, val []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errWire
		}
		b = b[n:]
		var v uint64
		var val []byte
		switch typ {
		case protowire.VarintType:
			v, n = protowire.ConsumeVarint(b)
		case protowire.BytesType:
			val, n = protowire.ConsumeBytes(b)
		case protowire.Fixed32Type:
			_, n = protowire.ConsumeFixed32(b)
		case protowire.Fixed64Type:
			v, n = protowire.ConsumeFixed64(b) // a double's bits (adaptive_wire.go)
		default:
			n = -1
		}
		if n < 0 {
			return fmt.Errorf("%w: field %d", errWire, num)
		}
		b = b[n:]
		if err := fn(uint64(num)<<3|uint64(typ), v, val); err != nil {
			return err
		}
	}
	return nil
}

// str views b as a string without copying: it lives as long as b's array.
func str(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

func grow(b []byte, n int) []byte {
	if cap(b) < n {
		return make([]byte, n, n+n/4)
	}
	return b[:n]
}

// parse merges b into l, as protobuf merges a message field that appears
// twice.
func (l *wireLimit) parse(b []byte) error {
	return fields(b, func(tag, v uint64, val []byte) error {
		switch tag {
		case fLimitAlgorithm << 3:
			l.alg = uint32(v)
		case fLimitLimit << 3:
			l.limit = int64(v)
		case fLimitPerNs << 3:
			l.perNs = int64(v)
		case fLimitBurst << 3:
			l.burst = int64(v)
		case fLimitCalendar << 3:
			l.cal = uint32(v)
		case fLimitWeekStart << 3:
			l.week = uint32(v)
		case fLimitTimezone<<3 | 2:
			l.zone = str(val) // LoadZone keeps its own copy
		}
		return nil
	})
}

func (c *wireCheck) parse(b []byte) error {
	*c = wireCheck{}
	return fields(b, func(tag, v uint64, val []byte) error {
		switch tag {
		case fCheckKey<<3 | 2:
			c.key = str(val)
		case fCheckLimit<<3 | 2:
			if err := c.limit.parse(val); err != nil {
				return err
			}
		case fCheckCost << 3:
			c.cost = int64(v)
		case fCheckRefund << 3:
			c.refund = v != 0
		case fCheckLease << 3:
			c.lease = int64(v)
		case fCheckFinal << 3:
			c.final = v != 0
		case fCheckSync << 3:
			c.sync = v != 0
		case fCheckPeek << 3:
			c.peek = v != 0
		case fCheckReserveTTL << 3:
			c.reserveTTLNs = int64(v)
		case fCheckAdaptive<<3 | 2:
			c.hasAdaptive = true
			return parseSpec(val, &c.adaptive)
		case fCheckAdaptiveScope<<3 | 2:
			c.adaptiveScope = str(val)
		case fCheckTrace<<3 | 2:
			// Best effort: a trace context of another length (a later
			// format) is ignored, not a reason to refuse the batch.
			c.traced = len(val) == traceContextLen
			if c.traced {
				copy(c.trace[:], val)
			}
		}
		return nil
	})
}

func (m *checkBatch) buffer(n int) []byte {
	m.buf = grow(m.buf, n)
	return m.buf
}

func (m *checkBatch) parse(b []byte) error {
	m.from, m.id, m.ringVersion, m.checks, m.reverseRaw = "", 0, 0, m.checks[:0], nil
	return fields(b, func(tag, v uint64, val []byte) error {
		switch tag {
		case fReqReverse<<3 | 2:
			m.reverseRaw = val
		case fReqFrom<<3 | 2:
			m.from = str(val)
		case fReqID << 3:
			m.id = v
		case fReqRingVersion << 3:
			m.ringVersion = v
		case fReqChecks<<3 | 2:
			m.checks = append(m.checks, wireCheck{})
			if err := m.checks[len(m.checks)-1].parse(val); err != nil {
				return err
			}
		}
		return nil
	})
}

func (d *wireDecision) parse(b []byte) error {
	*d = wireDecision{}
	return fields(b, func(tag, v uint64, val []byte) error {
		switch tag {
		case fDecAllowed << 3:
			d.allowed = v != 0
		case fDecRemaining << 3:
			d.remaining = int64(v)
		case fDecRetry << 3:
			d.retryAfterMs = int64(v)
		case fDecReset << 3:
			d.resetAfterMs = int64(v)
		case fDecDelay << 3:
			d.delayMs = int64(v)
		case fDecLeaseGranted << 3:
			d.leaseGranted = int64(v)
		case fDecLeaseTTL << 3:
			d.leaseTTLMs = int64(v)
		case fDecRedirect<<3 | 2:
			d.redirect = str(val)
		case fDecFull << 3:
			d.full = v != 0
		case fDecReservation<<3 | 2:
			d.reservation = str(val)
		case fDecLimit << 3:
			d.limit = int64(v)
		}
		return nil
	})
}

func (m *checkAnswer) buffer(n int) []byte {
	m.buf = grow(m.buf, n)
	return m.buf
}

func (m *checkAnswer) parse(b []byte) error {
	m.owner, m.id, m.err, m.drain, m.decisions, m.reverseRaw = "", 0, "", false, m.decisions[:0], nil
	return fields(b, func(tag, v uint64, val []byte) error {
		switch tag {
		case fRespReverse<<3 | 2:
			m.reverseRaw = val
		case fRespOwner<<3 | 2:
			m.owner = str(val)
		case fRespID << 3:
			m.id = v
		case fRespError<<3 | 2:
			m.err = str(val)
		case fRespDrain << 3:
			m.drain = v != 0
		case fRespDecisions<<3 | 2:
			m.decisions = append(m.decisions, wireDecision{})
			if err := m.decisions[len(m.decisions)-1].parse(val); err != nil {
				return err
			}
		}
		return nil
	})
}

// intern returns s, or name when they are equal, so that a string viewed
// in a reused buffer is copied only when it is not the expected one.
func intern(s, name string) string {
	if s == name {
		return name
	}
	return strings.Clone(s)
}
