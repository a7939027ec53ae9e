package api

import (
	"bytes"
	"errors"
	"io"
	"unicode/utf8"
)

// The body of POST /v1/check is read whole into a pooled buffer and
// decoded by hand when it is plain: an object of the fields CheckRequest
// names, spelled exactly, each at most once, with strings free of escapes
// and control characters, integers without fraction or exponent, no null.
// That is what clients send, and it costs a fraction of encoding/json's
// reflection. Anything else, malformed JSON included, is decoded again by
// encoding/json from the same bytes, which gives the answer, and the error
// message, it always gave. FuzzCheckBody checks that whatever the hand
// decoder accepts, encoding/json decodes to the same request.

// checkBody is a decoded CheckRequest and the storage its pointers point
// to, so that a decoded request allocates nothing beyond its strings.
type checkBody struct {
	req   CheckRequest
	limit LimitJSON
	cost  int64
}

// errorReader returns err on every read.
type errorReader struct{ err error }

func (r errorReader) Read([]byte) (int, error) { return 0, r.err }

// readBody appends what r yields to buf until EOF. It returns the error
// that stopped it, nil at EOF.
func readBody(r io.Reader, buf []byte) ([]byte, error) {
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err != nil {
			if errors.Is(err, io.EOF) {
				return buf, nil
			}
			return buf, err
		}
	}
}

// bodySource is what encoding/json reads when the hand decoder declines:
// the bytes read, then the error reading stopped at (nil: EOF), as the
// body itself would have given them.
func bodySource(body []byte, readErr error) io.Reader {
	if readErr == nil {
		return bytes.NewReader(body)
	}
	return io.MultiReader(bytes.NewReader(body), errorReader{readErr})
}

// Bits of the fields seen, to refuse (and leave to encoding/json) a field
// given twice.
const (
	seenKey = 1 << iota
	seenCost
	seenLimit
	seenPolicy
	seenAPIKey
	seenUser
	seenIP
	seenRoute
	seenTier
	seenReserve
	seenReserveTTL
	seenPeek
)

const (
	seenAlgorithm = 1 << iota
	seenLimitCount
	seenPer
	seenBurst
	seenFailureMode
	seenLease
	seenReplication
	seenCalendar
	seenTimezone
	seenWeekStart
)

// decodeCheckFast decodes b into cb as encoding/json, with
// DisallowUnknownFields and nothing but white space after the value, would
// decode it into a zero CheckRequest. It reports false, with cb in any
// state, when b is not plain (see above), valid or not.
func decodeCheckFast(b []byte, cb *checkBody) bool {
	p := scanner{b: b}
	if !p.open() {
		return false
	}
	seen := 0
	for more := !p.close(); more; {
		name, ok := p.name()
		if !ok {
			return false
		}
		var bit int
		switch string(name) {
		case "key":
			bit = seenKey
			cb.req.Key, ok = p.str()
		case "cost":
			bit = seenCost
			cb.cost, ok = p.int()
			cb.req.Cost = &cb.cost
		case "limit":
			bit = seenLimit
			ok = decodeLimitFast(&p, &cb.limit)
			cb.req.Limit = &cb.limit
		case "policy":
			bit = seenPolicy
			cb.req.Policy, ok = p.str()
		case "api_key":
			bit = seenAPIKey
			cb.req.APIKey, ok = p.str()
		case "user":
			bit = seenUser
			cb.req.User, ok = p.str()
		case "ip":
			bit = seenIP
			cb.req.IP, ok = p.str()
		case "route":
			bit = seenRoute
			cb.req.Route, ok = p.str()
		case "tier":
			bit = seenTier
			cb.req.Tier, ok = p.str()
		case "reserve":
			bit = seenReserve
			cb.req.Reserve, ok = p.bool()
		case "reserve_ttl":
			bit = seenReserveTTL
			cb.req.ReserveTTL, ok = p.str()
		case "peek":
			bit = seenPeek
			cb.req.Peek, ok = p.bool()
		}
		if !ok || bit == 0 || seen&bit != 0 {
			return false
		}
		seen |= bit
		if more, ok = p.next(); !ok {
			return false
		}
	}
	return p.end()
}

// decodeLimitFast decodes the inline limit object at p into l.
func decodeLimitFast(p *scanner, l *LimitJSON) bool {
	if !p.open() {
		return false
	}
	seen := 0
	for more := !p.close(); more; {
		name, ok := p.name()
		if !ok {
			return false
		}
		var bit int
		switch string(name) {
		case "algorithm":
			bit = seenAlgorithm
			var v []byte
			if v, ok = p.raw(); ok {
				l.Algorithm = knownAlgorithm(v)
			}
		case "limit":
			bit = seenLimitCount
			l.Limit, ok = p.int()
		case "per":
			bit = seenPer
			l.Per, ok = p.str()
		case "burst":
			bit = seenBurst
			l.Burst, ok = p.int()
		case "failure_mode":
			bit = seenFailureMode
			var v []byte
			if v, ok = p.raw(); ok {
				// An error is encoding/json's to report, in its words.
				ok = l.FailureMode.UnmarshalText(v) == nil
			}
		case "lease":
			bit = seenLease
			l.Lease, ok = p.bool()
		case "replication":
			bit = seenReplication
			l.Replication, ok = p.str()
		case "calendar":
			bit = seenCalendar
			l.Calendar, ok = p.str()
		case "timezone":
			bit = seenTimezone
			l.Timezone, ok = p.str()
		case "week_start":
			bit = seenWeekStart
			l.WeekStart, ok = p.str()
		}
		if !ok || bit == 0 || seen&bit != 0 {
			return false
		}
		seen |= bit
		if more, ok = p.next(); !ok {
			return false
		}
	}
	return true
}

// knownAlgorithm returns v as a string, without allocating for the names
// of the algorithms.
func knownAlgorithm(v []byte) string {
	switch string(v) {
	case "token_bucket":
		return "token_bucket"
	case "leaky_bucket":
		return "leaky_bucket"
	case "fixed_window":
		return "fixed_window"
	case "sliding_window_log":
		return "sliding_window_log"
	case "sliding_window_counter":
		return "sliding_window_counter"
	}
	return string(v)
}

// scanner reads plain JSON from b at i. Each method skips the white space
// before what it reads and reports false when that is not there.
type scanner struct {
	b []byte
	i int
}

func (p *scanner) skip() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// byte consumes c.
func (p *scanner) byte(c byte) bool {
	p.skip()
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// open consumes the '{' that opens an object.
func (p *scanner) open() bool { return p.byte('{') }

// close consumes the '}' of an empty object.
func (p *scanner) close() bool { return p.byte('}') }

// name reads a member's name and the colon after it.
func (p *scanner) name() ([]byte, bool) {
	n, ok := p.raw()
	return n, ok && p.byte(':')
}

// next consumes the ',' between members (more) or the '}' after the last.
func (p *scanner) next() (more, ok bool) {
	p.skip()
	if p.i < len(p.b) {
		switch p.b[p.i] {
		case ',':
			p.i++
			return true, true
		case '}':
			p.i++
			return false, true
		}
	}
	return false, false
}

// end reports whether only white space is left.
func (p *scanner) end() bool {
	p.skip()
	return p.i == len(p.b)
}

// raw reads a string without escapes or control characters, in valid
// UTF-8, and returns its content (a slice of b).
func (p *scanner) raw() ([]byte, bool) {
	if !p.byte('"') {
		return nil, false
	}
	start, ascii := p.i, true
	for ; p.i < len(p.b); p.i++ {
		switch c := p.b[p.i]; {
		case c == '"':
			v := p.b[start:p.i]
			p.i++
			return v, ascii || utf8.Valid(v)
		case c == '\\' || c < 0x20:
			return nil, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return nil, false
}

// str reads a string (see raw) into a new string.
func (p *scanner) str() (string, bool) {
	v, ok := p.raw()
	return string(v), ok
}

// int reads an integer: an optional minus, then 0 or digits not starting
// with 0, at most 18 of them (so it cannot overflow), and no fraction or
// exponent after them.
func (p *scanner) int() (int64, bool) {
	p.skip()
	neg := p.i < len(p.b) && p.b[p.i] == '-'
	if neg {
		p.i++
	}
	start := p.i
	var n int64
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		n = n*10 + int64(p.b[p.i]-'0')
		p.i++
	}
	digits := p.i - start
	if digits == 0 || digits > 18 || digits > 1 && p.b[start] == '0' {
		return 0, false
	}
	if p.i < len(p.b) {
		if c := p.b[p.i]; c == '.' || c == 'e' || c == 'E' {
			return 0, false
		}
	}
	if neg {
		n = -n
	}
	return n, true
}

// bool reads true or false.
func (p *scanner) bool() (bool, bool) {
	p.skip()
	switch {
	case bytes.HasPrefix(p.b[p.i:], []byte("true")):
		p.i += len("true")
		return true, true
	case bytes.HasPrefix(p.b[p.i:], []byte("false")):
		p.i += len("false")
		return false, true
	}
	return false, false
}
