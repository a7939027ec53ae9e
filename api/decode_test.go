package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/ringlimit/ringlimit/bucket"
)

// decodeCheckJSON decodes b as the handler did before the hand decoder:
// encoding/json, unknown fields refused, one value and nothing after it.
func decodeCheckJSON(b []byte) (CheckRequest, error) {
	var req CheckRequest
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return req, errors.New("more than one JSON value")
	}
	return req, nil
}

// checkFastDecoder fails when the hand decoder accepts b and encoding/json
// either refuses it or decodes another request. It reports whether the
// hand decoder accepted b.
func checkFastDecoder(t *testing.T, b []byte) bool {
	t.Helper()
	var cb checkBody
	if !decodeCheckFast(b, &cb) {
		return false
	}
	want, err := decodeCheckJSON(b)
	if err != nil {
		t.Fatalf("%q: the hand decoder accepts what encoding/json refuses: %v", b, err)
	}
	if !reflect.DeepEqual(cb.req, want) {
		t.Fatalf("%q: hand decoder\n %+v (limit %+v)\nencoding/json\n %+v (limit %+v)", b, cb.req, cb.req.Limit, want, want.Limit)
	}
	return true
}

// checkBodies are bodies the hand decoder takes (true) or leaves to
// encoding/json (false).
var checkBodies = []struct {
	body string
	fast bool
}{
	{`{"key":"user:42","cost":1,"limit":{"algorithm":"token_bucket","limit":10,"per":"1s","burst":50}}`, true},
	{`{"key":"k","limit":{"limit":10,"per":"1s"}}`, true},
	{" \t\r\n{ \"key\" : \"k\" , \"limit\" : { \"limit\" : 10 , \"per\" : \"1s\" } } \n", true},
	{`{"key":"k","limit":{"algorithm":"leaky_bucket","limit":1,"per":"1m","burst":0,"failure_mode":"fail_closed","lease":false}}`, true},
	{`{"key":"k","limit":{"algorithm":"fixed_window","limit":1,"per":"1h","failure_mode":"fail_open","lease":true}}`, true},
	{`{"key":"k","limit":{"algorithm":"sliding_window_log","limit":1,"per":"1s","failure_mode":""}}`, true},
	{`{"key":"k","limit":{"limit":5,"per":"1h","replication":"sync"}}`, true},
	{`{"key":"k","limit":{"limit":5,"per":"1h","replication":"async","lease":true}}`, true},
	{`{"key":"k","limit":{"algorithm":"sliding_window_counter","limit":1,"per":"1s"}}`, true},
	{`{"key":"k","limit":{"algorithm":"nope","limit":-5,"per":"soon","burst":-0}}`, true},
	{`{"key":"nöde ✓","cost":-3,"limit":{}}`, true},
	{`{"key":"k","cost":999999999999999999,"limit":{"limit":0,"per":""}}`, true},
	{`{"policy":"api","api_key":"k1","user":"u","ip":"203.0.113.9","route":"/login","tier":"free","cost":2}`, true},
	{`{}`, true},
	{`{"key":""}`, true},
	{`{"key":"k","limit":{"limit":10,"per":"1s"},"peek":true}`, true},
	{`{"api_key":"k1","peek":false}`, true},

	// Left to encoding/json: its answer, right or wrong, stands.
	{``, false},
	{`   `, false},
	{`null`, false},
	{`[]`, false},
	{`{`, false},
	{`{"key":"k"`, false},
	{`{"key":"k",}`, false},
	{`{"key":"k"}{}`, false},
	{`{"key":"k"} x`, false},
	{`{"key":"k","key":"k2"}`, false}, // duplicate: encoding/json keeps the last
	{`{"key":"k","limit":{"limit":1,"limit":2}}`, false},        // duplicate inside the limit
	{`{"Key":"k"}`, false},                                      // encoding/json folds case
	{`{"key":"k","extra":1}`, false},                            // unknown: refused by encoding/json
	{`{"key":"k","limit":{"limit":1,"per":"1s","x":1}}`, false}, // unknown inside the limit
	{`{"key":null}`, false},
	{`{"cost":null}`, false},
	{`{"limit":null}`, false},
	{`{"key":"a\"b"}`, false},
	{`{"key":"a\u0041"}`, false},
	{"{\"key\":\"a\tb\"}", false},
	{"{\"key\":\"\xff\"}", false},
	{`{"key":5}`, false},
	{`{"cost":1.5}`, false},
	{`{"cost":1e3}`, false},
	{`{"cost":01}`, false},
	{`{"cost":-}`, false},
	{`{"cost":"1"}`, false},
	{`{"cost":9223372036854775807}`, false},
	{`{"cost":99999999999999999999}`, false},
	{`{"limit":{"lease":"true"}}`, false},
	{`{"limit":{"replication":true}}`, false},
	{`{"limit":{"lease":truex}}`, false},
	{`{"limit":{"failure_mode":"sometimes"}}`, false},
	{`{"limit":{"failure_mode":1}}`, false},
	{`{"limit":5}`, false},
	{`{"peek":1}`, false},
	{`{"peek":"true"}`, false},
	{`{"peek":true,"peek":false}`, false},
	{"\xef\xbb\xbf{}", false},
	{`{"key":"k","cost":3,"reserve":true,"reserve_ttl":"90s","limit":{"limit":5,"per":"1s"}}`, true},
	{`{"reserve":false,"reserve_ttl":""}`, true},
	{`{"reserve":"true"}`, false},
	{`{"reserve":true,"reserve":true}`, false},
	{`{"reserve_ttl":5}`, false},
}

func TestDecodeCheckFast(t *testing.T) {
	for _, c := range checkBodies {
		if got := checkFastDecoder(t, []byte(c.body)); got != c.fast {
			t.Errorf("%q: decoded by hand = %v, want %v", c.body, got, c.fast)
		}
	}
}

// FuzzCheckBody: whatever the hand decoder accepts, encoding/json decodes
// to the same request.
func FuzzCheckBody(f *testing.F) {
	for _, c := range checkBodies {
		f.Add([]byte(c.body))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkFastDecoder(t, b) })
}

// decodeCheckReference is decodeCheckBody as it was before the hand
// decoder: encoding/json straight from the bounded body.
func decodeCheckReference(w http.ResponseWriter, r *http.Request) (CheckRequest, error) {
	var req CheckRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	dec.DisallowUnknownFields()
	tooBig := func(err error) bool {
		var e *http.MaxBytesError
		return errors.As(err, &e)
	}
	if err := dec.Decode(&req); err != nil {
		if tooBig(err) {
			return req, fmt.Errorf("body: larger than %d bytes", MaxBodyBytes)
		}
		if fe := (*bucket.FieldError)(nil); errors.As(err, &fe) {
			return req, fe.At("limit")
		}
		return req, jsonError(err, "limit.failure_mode")
	}
	if _, err := dec.Token(); err != io.EOF {
		if tooBig(err) {
			return req, fmt.Errorf("body: larger than %d bytes", MaxBodyBytes)
		}
		return req, errors.New("body: more than one JSON value")
	}
	return req, nil
}

// decodeCheckBody answers what the reference answers, request or error
// message, for bodies plain or not, valid or not, of known length or not.
func TestDecodeCheckBody(t *testing.T) {
	bodies := []string{
		strings.Repeat(" ", MaxBodyBytes) + `{}`,
		`{"key":"k"}` + strings.Repeat(" ", MaxBodyBytes),
		`{"key":"k"} x` + strings.Repeat(" ", MaxBodyBytes),
		`{"key":"` + strings.Repeat("k", MaxBodyBytes) + `"}`,
		`{"key":"k","limit":{"limit":5,"per":"1s","failure_mode":"fail_maybe"}}`,
	}
	for _, c := range checkBodies {
		bodies = append(bodies, c.body)
	}
	for i, body := range bodies {
		for _, chunked := range []bool{false, true} {
			newReq := func() *http.Request {
				r := httptest.NewRequest(http.MethodPost, "/v1/check", strings.NewReader(body))
				if chunked {
					r.ContentLength = -1
				}
				return r
			}
			wantReq, wantErr := decodeCheckReference(httptest.NewRecorder(), newReq())
			var cb checkBody
			err := decodeCheckBody(httptest.NewRecorder(), newReq(), &cb)
			if fmt.Sprint(err) != fmt.Sprint(wantErr) {
				t.Errorf("body %d (chunked %v): error %v, want %v", i, chunked, err, wantErr)
			}
			if err == nil && !reflect.DeepEqual(cb.req, wantReq) {
				t.Errorf("body %d (chunked %v): %+v, want %+v", i, chunked, cb.req, wantReq)
			}
		}
	}
}

// A body cut short by a read error or by the size limit is never decoded
// by hand, and encoding/json sees the same bytes and the same error.
func TestReadBody(t *testing.T) {
	boom := errors.New("boom")
	body := strings.Repeat(" ", 1000) + `{"key":"k"}`
	got, err := readBody(io.MultiReader(strings.NewReader(body), errorReader{boom}), make([]byte, 0, 7))
	if string(got) != body || err != boom {
		t.Fatalf("readBody = %q, %v; want the body and %v", got, err, boom)
	}
	got, err = readBody(strings.NewReader(body), nil)
	if string(got) != body || err != nil {
		t.Fatalf("readBody = %q, %v; want the body and nil", got, err)
	}
	all, err := io.ReadAll(bodySource([]byte("abc"), boom))
	if string(all) != "abc" || err != boom {
		t.Fatalf("bodySource yields %q, %v; want abc and %v", all, err, boom)
	}
}
