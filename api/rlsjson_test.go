package api

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestRLSJSON: POST /json decides a RateLimitRequest in protobuf's JSON
// mapping as ShouldRateLimit does, answering 200 while the descriptor is
// within its limit and 429 once it is over, with the answer in the same
// mapping, compact; bad input is 400 with the field named; a node without an RLS
// configuration does not serve the path.
func TestRLSJSON(t *testing.T) {
	e, s := newRLSEnv(t, rlsUnitConfig, false)
	e.api.rls = s
	e.clock.Advance(15 * time.Second) // 45 s before the minute's window ends
	h := validated(t, e.api.Handler(nil))
	post := func(body string) (int, string) {
		t.Helper()
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/json", strings.NewReader(body)))
		b, _ := io.ReadAll(w.Result().Body)
		return w.Code, strings.TrimSpace(string(b))
	}
	const req = `{"domain":"d","descriptors":[{"entries":[{"key":"user_id","value":"a"}]}]}`
	for i, want := range []struct {
		code int
		body string
	}{
		{200, `{"overallCode":"OK","statuses":[{"code":"OK","currentLimit":{"name":"per_user","requestsPerUnit":3,"unit":"MINUTE"},"limitRemaining":2,"durationUntilReset":"45s"}]}`},
		{200, `{"overallCode":"OK","statuses":[{"code":"OK","currentLimit":{"name":"per_user","requestsPerUnit":3,"unit":"MINUTE"},"limitRemaining":1,"durationUntilReset":"45s"}]}`},
		{200, `{"overallCode":"OK","statuses":[{"code":"OK","currentLimit":{"name":"per_user","requestsPerUnit":3,"unit":"MINUTE"},"durationUntilReset":"45s"}]}`},
		{429, `{"overallCode":"OVER_LIMIT","statuses":[{"code":"OVER_LIMIT","currentLimit":{"name":"per_user","requestsPerUnit":3,"unit":"MINUTE"},"durationUntilReset":"45s"}]}`},
	} {
		code, body := post(req)
		if code != want.code || body != want.body {
			t.Fatalf("call %d: %d %s\nwant %d %s", i+1, code, body, want.code, want.body)
		}
	}
	for _, tc := range []struct{ body, want string }{
		{`{"domain":"","descriptors":[{"entries":[{"key":"user_id","value":"a"}]}]}`, `{"code":"INVALID_ARGUMENT","message":"domain: must not be empty"}`},
		{`{"domain":"d"}`, `{"code":"INVALID_ARGUMENT","message":"descriptors: at least one is required"}`},
	} {
		if code, body := post(tc.body); code != 400 || body != tc.want {
			t.Errorf("%s: %d %s, want 400 %s", tc.body, code, body, tc.want)
		}
	}
	if code, body := post(`{"domain":"d","descriptors":[{"entries":[{"key":"user_id","value":"a"}]}],"extra":1}`); code != 400 || !strings.HasPrefix(body, `{"code":"INVALID_ARGUMENT","message":"body: not a RateLimitRequest: `) {
		t.Errorf("unknown field: %d %s, want 400 INVALID_ARGUMENT", code, body)
	}

	plain := newTestEnv(t, nil)
	w := httptest.NewRecorder()
	plain.api.Handler(nil).ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/json", strings.NewReader(req)))
	if w.Code != http.StatusNotFound {
		t.Errorf("without an RLS configuration: POST /json answered %d, want 404", w.Code)
	}
}
