package openapitest

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestCheck: the exchanges Check accepts and those it reports, one of each
// kind of mismatch.
func TestCheck(t *testing.T) {
	spec, err := Load("../../../docs/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	const (
		valid    = `{"key":"user:42","limit":{"limit":10,"per":"1s"}}`
		allowed  = `{"allowed":true,"limit":10,"remaining":9,"retry_after_ms":0,"reset_after_ms":100,"delay_ms":0,"scope":"inline","owner":"node-1"}`
		rejected = `{"allowed":false,"limit":10,"remaining":0,"retry_after_ms":100,"reset_after_ms":1000,"delay_ms":0,"scope":"inline","owner":"node-1","code":"RATE_LIMITED"}`
	)
	headers := func(retry bool) http.Header {
		h := http.Header{"Content-Type": {"application/json"}, "X-Ratelimit-Limit": {"10"}, "X-Ratelimit-Remaining": {"9"},
			"Ratelimit-Policy": {`"inline";q=10;w=1`}, "Ratelimit": {`"inline";r=9;t=1`}}
		if retry {
			h.Set("Retry-After", "1")
		}
		return h
	}
	jsonHeader := http.Header{"Content-Type": {"application/json"}}
	textHeader := http.Header{"Content-Type": {"text/plain; charset=utf-8"}}
	steps := []struct {
		name          string
		method, path  string
		auth, reqBody string
		status        int
		header        http.Header
		body          string
		mismatch      string // "" when consistent
	}{
		{"allowed", "POST", "/v1/check", "", valid, 200, headers(false), allowed, ""},
		{"rejected", "POST", "/v1/check", "", valid, 429, headers(true), rejected, ""},
		{"rejected without Retry-After", "POST", "/v1/check", "", valid, 429, headers(false), rejected, "Retry-After"},
		{"allowed without X-RateLimit-Limit", "POST", "/v1/check", "", valid, 200, func() http.Header { h := headers(false); h.Del("X-Ratelimit-Limit"); return h }(), allowed, "X-RateLimit-Limit"},
		{"a malformed RateLimit", "POST", "/v1/check", "", valid, 200, func() http.Header { h := headers(false); h.Set("Ratelimit", "inline;r=9"); return h }(), allowed, "RateLimit"},
		{"an undescribed field", "POST", "/v1/check", "", valid, 200, headers(false), strings.Replace(allowed, `}`, `,"extra":1}`, 1), "extra"},
		{"an undescribed status", "POST", "/v1/check", "", valid, 418, jsonHeader, `{"code":"INTERNAL","message":"x"}`, "status is not supported"},
		{"a bad request answered 400", "POST", "/v1/check", "", `{"key":"k","cost":0,"limit":{"limit":1,"per":"1s"}}`, 400, jsonHeader, `{"code":"INVALID_ARGUMENT","message":"cost: must be at least 1"}`, ""},
		{"a bad request admitted", "POST", "/v1/check", "", `{"key":"k","cost":0,"limit":{"limit":1,"per":"1s"}}`, 200, headers(false), allowed, "yet was answered 200"},
		{"a valid request answered 400 for a rule listed", "POST", "/v1/check", "", `{"key":"k","cost":5,"limit":{"limit":1,"per":"1s"}}`, 400, jsonHeader, `{"code":"INVALID_ARGUMENT","message":"cost: bucket: invalid cost: cost 5 exceeds the capacity 1 of token_bucket 1/1s"}`, ""},
		{"a valid request answered 400 for no rule listed", "POST", "/v1/check", "", valid, 400, jsonHeader, `{"code":"INVALID_ARGUMENT","message":"key: too odd"}`, "does not list"},
		{"an undescribed path answered 404", "GET", "/v1/nothing", "", "", 404, textHeader, "404 page not found\n", ""},
		{"an undescribed path answered 200", "GET", "/v1/nothing", "", "", 200, textHeader, "ok\n", "not described"},
		{"no token, 401", "POST", "/v1/overrides", "", `{"reason":"r","user":"42","tier":"pro","expires_in":"1m"}`, 401,
			http.Header{"Content-Type": {"application/json"}, "Www-Authenticate": {`Bearer realm="ringlimit"`}}, `{"code":"UNAUTHENTICATED","message":"x"}`, ""},
		{"no token, 200", "POST", "/v1/overrides", "", `{"reason":"r","user":"42","tier":"pro","expires_in":"1m"}`, 200, jsonHeader,
			`{"id":"o","actor":"a","reason":"r","user":"42","tier":"pro","created":"2026-01-05T10:04:00Z","expires":"2026-01-05T10:05:00Z"}`, "yet was answered 200"},
		{"a token, 200", "POST", "/v1/overrides", "Bearer 0123456789abcdef", `{"reason":"r","user":"42","tier":"pro","expires_in":"1m"}`, 200, jsonHeader,
			`{"id":"o","actor":"a","reason":"r","user":"42","tier":"pro","created":"2026-01-05T10:04:00Z","expires":"2026-01-05T10:05:00Z"}`, ""},
		{"both api_key and user", "POST", "/v1/overrides", "Bearer 0123456789abcdef", `{"reason":"r","user":"42","api_key":"k","tier":"pro","expires_in":"1m"}`, 200, jsonHeader,
			`{"id":"o","actor":"a","reason":"r","user":"42","tier":"pro","created":"2026-01-05T10:04:00Z","expires":"2026-01-05T10:05:00Z"}`, "yet was answered 200"},
	}
	for i, st := range steps {
		req := httptest.NewRequest(st.method, st.path, strings.NewReader(st.reqBody))
		if st.auth != "" {
			req.Header.Set("Authorization", st.auth)
		}
		err := spec.Check(req, []byte(st.reqBody), st.status, st.header, []byte(st.body))
		switch {
		case st.mismatch == "" && err != nil:
			t.Errorf("step %d (%s): Check = %v, want nil", i, st.name, err)
		case st.mismatch != "" && (err == nil || !strings.Contains(err.Error(), st.mismatch)):
			t.Errorf("step %d (%s): Check = %v, want a mismatch naming %q", i, st.name, err, st.mismatch)
		}
	}
	if c := spec.Counts(); c.Pairs != 7 || c.Invalid != 3 || c.Semantic != 1 {
		t.Errorf("Counts() = %v, want 7 pairs, 3 invalid, 1 semantic", c)
	}
}
