package api

import (
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
)

// The answer to POST /v1/check is written by hand rather than through
// encoding/json's reflection: it is the hot path of the HTTP API, and its
// shape is fixed. TestCheckResponseEncoding checks that it matches what
// encoding/json would write, field for field.

// bufPool holds the buffers of request bodies and answers. A buffer that
// grew beyond maxPooledBuf (a body far larger than a check) is dropped.
var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

const maxPooledBuf = 4 << 10

func writeCheckResponse(w http.ResponseWriter, status int, r *CheckResponse) {
	bp := bufPool.Get().(*[]byte)
	b := appendCheckResponse((*bp)[:0], r)
	w.Header()["Content-Type"] = []string{"application/json"} // canonical already: Set would check
	w.WriteHeader(status)
	w.Write(b)
	*bp = b
	bufPool.Put(bp)
}

// appendCheckResponse appends r as encoding/json would encode it, plus the
// newline json.Encoder adds.
func appendCheckResponse(b []byte, r *CheckResponse) []byte {
	b = append(b, `{"allowed":`...)
	b = strconv.AppendBool(b, r.Allowed)
	b = append(b, `,"limit":`...)
	b = strconv.AppendInt(b, r.Limit, 10)
	b = append(b, `,"remaining":`...)
	b = strconv.AppendInt(b, r.Remaining, 10)
	b = append(b, `,"retry_after_ms":`...)
	b = strconv.AppendInt(b, r.RetryAfterMs, 10)
	b = append(b, `,"reset_after_ms":`...)
	b = strconv.AppendInt(b, r.ResetAfterMs, 10)
	b = append(b, `,"delay_ms":`...)
	b = strconv.AppendInt(b, r.DelayMs, 10)
	b = append(b, `,"scope":`...)
	b = appendJSONString(b, r.Scope)
	b = append(b, `,"owner":`...)
	b = appendJSONString(b, r.Owner)
	if r.Degraded {
		b = append(b, `,"degraded":true`...)
	}
	if r.Code != "" {
		b = append(b, `,"code":`...)
		b = appendJSONString(b, r.Code)
	}
	if len(r.WouldReject) > 0 {
		b = append(b, `,"would_reject":[`...)
		for i, s := range r.WouldReject {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, s)
		}
		b = append(b, ']')
	}
	if r.PolicyVersion != "" {
		b = append(b, `,"policy_version":`...)
		b = appendJSONString(b, r.PolicyVersion)
	}
	if r.Reservation != "" {
		b = append(b, `,"reservation":`...)
		b = appendJSONString(b, r.Reservation)
	}
	if r.Lease != "" {
		b = append(b, `,"lease":`...)
		b = appendJSONString(b, r.Lease)
	}
	if r.InFlight != 0 {
		b = append(b, `,"in_flight":`...)
		b = strconv.AppendInt(b, r.InFlight, 10)
	}
	if r.ExpiresInMs != 0 {
		b = append(b, `,"expires_in_ms":`...)
		b = strconv.AppendInt(b, r.ExpiresInMs, 10)
	}
	return append(b, "}\n"...)
}

// appendJSONString appends s as a JSON string. Plain ASCII without quotes,
// backslashes or the characters encoding/json escapes for HTML goes as is;
// anything else takes encoding/json's own path.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
