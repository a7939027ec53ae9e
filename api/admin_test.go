package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/policy"
)

func TestParseTokens(t *testing.T) {
	cases := []struct {
		name, file string
		want       []Token
		err        string
	}{
		{"bare", "0123456789abcdef\n", []Token{{"admin", "0123456789abcdef"}}, ""},
		{"named, comments and blanks", "# ops\n\n  alice : tok-of-alice-0001  \nci-bot@ex:tok-of-the-ci-bot-1\n",
			[]Token{{"alice", "tok-of-alice-0001"}, {"ci-bot@ex", "tok-of-the-ci-bot-1"}}, ""},
		{"empty", "\n# nothing\n", nil, "no token in the file"},
		{"short", "alice:short\n", nil, "line 1: a token is at least 16 bytes"},
		{"space in token", "alice:tok of alice 0001\n", nil, "line 1: a token is at least 16 bytes without spaces"},
		{"bad name", "al ice:tok-of-alice-0001\n", nil, "line 1: a name is"},
		{"empty name", ":tok-of-alice-0001\n", nil, "line 1: a name is"},
		{"twice", "a:tok-of-alice-0001\n\nb:tok-of-alice-0001\n", nil, "line 3: the same token is given twice"},
	}
	for _, c := range cases {
		got, err := ParseTokens([]byte(c.file))
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: ParseTokens = %v, %v; want an error containing %q", c.name, got, err, c.err)
			}
			if err != nil && strings.Contains(err.Error(), "tok-of-alice") {
				t.Errorf("%s: the error %q shows the token", c.name, err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("%s: ParseTokens = %v, %v; want %v", c.name, got, err, c.want)
		}
	}
}

// TestRequireAdmin: the answers of a guarded endpoint, step by step, as
// the tokens change (none configured, two, then a rotation).
func TestRequireAdmin(t *testing.T) {
	tokens := &Tokens{}
	var mu sync.Mutex
	var names []string
	h := RequireAdmin(tokens, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		names = append(names, AdminName(r.Context()))
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	steps := []struct {
		set          []Token // replaces the tokens when not nil
		header       string
		status       int
		code, name   string
		authenticate bool // WWW-Authenticate: Bearer expected
	}{
		{nil, "Bearer tok-of-alice-0001", 403, CodePermissionDenied, "", false}, // none configured
		{[]Token{{"alice", "tok-of-alice-0001"}, {"bob", "tok-of-bob-00000001"}}, "", 401, CodeUnauthenticated, "", true},
		{nil, "Basic YWxpY2U6eA==", 401, CodeUnauthenticated, "", true},
		{nil, "Bearer", 401, CodeUnauthenticated, "", true},
		{nil, "Bearer ", 401, CodeUnauthenticated, "", true},
		{nil, "Bearer tok-of-alice-0002", 403, CodePermissionDenied, "", false},
		{nil, "Bearer tok-of-alice-000", 403, CodePermissionDenied, "", false},
		{nil, "Bearer tok-of-alice-0001", 204, "", "alice", false},
		{nil, "bearer tok-of-bob-00000001", 204, "", "bob", false},
		// Rotation: alice's token replaced.
		{[]Token{{"alice", "tok-of-alice-0003"}}, "Bearer tok-of-alice-0001", 403, CodePermissionDenied, "", false},
		{nil, "Bearer tok-of-bob-00000001", 403, CodePermissionDenied, "", false},
		{nil, "Bearer tok-of-alice-0003", 204, "", "alice", false},
	}
	for i, st := range steps {
		if st.set != nil {
			tokens.Set(st.set)
		}
		mu.Lock()
		names = nil
		mu.Unlock()
		req := httptest.NewRequest(http.MethodPost, "/v1/overrides", nil)
		if st.header != "" {
			req.Header.Set("Authorization", st.header)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		var e ErrorResponse
		json.Unmarshal(rec.Body.Bytes(), &e)
		mu.Lock()
		gotNames := slices.Clone(names)
		mu.Unlock()
		wantNames := []string(nil)
		if st.name != "" {
			wantNames = []string{st.name}
		}
		auth := rec.Header().Get("WWW-Authenticate")
		if rec.Code != st.status || e.Code != st.code || !slices.Equal(gotNames, wantNames) || strings.HasPrefix(auth, "Bearer") != st.authenticate {
			t.Errorf("step %d: Authorization %q: %d %s (WWW-Authenticate %q), served as %v; want %d %q served as %v, WWW-Authenticate %v",
				i, st.header, rec.Code, rec.Body.Bytes(), auth, gotNames, st.status, st.code, wantNames, st.authenticate)
		}
		if i == 0 && !strings.Contains(e.Message, "no admin token configured") {
			t.Errorf("step 0: message %q, want it to say the node has no admin token configured", e.Message)
		}
	}
}

// TestHTTPOverrideAdmin: POST /v1/overrides without a token is 401, with a
// wrong one 403, with the right one 200 and audited under the token's name
// whatever actor the body names; DELETE /v1/overrides/{id} takes it away
// at once (404 for an unknown ID, and the same 401/403); the read-only
// endpoints need no token.
func TestHTTPOverrideAdmin(t *testing.T) {
	var audit syncBuf
	_, s, mgr, _ := newPolicyEnvAudited(t, &audit)
	none, wrong := *s, *s
	none.auth, wrong.auth = "", "Bearer not-the-token-of-ops"
	body := []byte(`{"actor":"mallory","reason":"incident","user":"42","tier":"gold","expires_in":"10m"}`)

	if got := none.do(t, http.MethodPost, "/v1/overrides", "application/json", body); got.status != http.StatusUnauthorized ||
		!strings.HasPrefix(got.header.Get("WWW-Authenticate"), "Bearer") {
		t.Errorf("POST without a token: %d %s (WWW-Authenticate %q), want 401 and WWW-Authenticate: Bearer", got.status, got.body, got.header.Get("WWW-Authenticate"))
	}
	if got := wrong.do(t, http.MethodPost, "/v1/overrides", "application/json", body); got.status != http.StatusForbidden {
		t.Errorf("POST with a wrong token: %d %s, want 403", got.status, got.body)
	}
	if n := len(mgr.Overrides()); n != 0 {
		t.Fatalf("%d overrides after refused POSTs, want 0", n)
	}
	got := s.do(t, http.MethodPost, "/v1/overrides", "application/json", body)
	var o policy.Override
	if got.status != http.StatusOK || json.Unmarshal(got.body, &o) != nil || o.Actor != "ops" {
		t.Fatalf("POST with the token: %d %s, want 200 and actor ops", got.status, got.body)
	}
	if line := audit.lastAction(t, "override"); line["actor"] != "ops" {
		t.Errorf("override audited as %v, want actor ops (the token's name, not the body's mallory)", line)
	}
	if r := s.check(t, `{"user":"42"}`); decodeMap(t, r.body)["scope"] != "override:tier:gold" {
		t.Fatalf("with the override: %s", r.body)
	}
	// Read-only endpoints stay open.
	for _, path := range []string{"/v1/overrides", "/v1/policy"} {
		if got := none.do(t, http.MethodGet, path, "", nil); got.status != http.StatusOK || !bytes.Contains(got.body, []byte(o.ID)) {
			t.Errorf("GET %s without a token: %d %s, want 200 listing %s", path, got.status, got.body, o.ID)
		}
	}

	del := "/v1/overrides/" + o.ID
	if got := none.do(t, http.MethodDelete, del, "", nil); got.status != http.StatusUnauthorized {
		t.Errorf("DELETE without a token: %d %s, want 401", got.status, got.body)
	}
	if got := wrong.do(t, http.MethodDelete, del, "", nil); got.status != http.StatusForbidden {
		t.Errorf("DELETE with a wrong token: %d %s, want 403", got.status, got.body)
	}
	if got := s.do(t, http.MethodDelete, "/v1/overrides/ovr-nope", "", nil); got.status != http.StatusNotFound ||
		decodeMap(t, got.body)["code"] != CodeNotFound {
		t.Errorf("DELETE an unknown id: %d %s, want 404 NOT_FOUND", got.status, got.body)
	}
	if got := s.do(t, http.MethodDelete, del, "", nil); got.status != http.StatusOK {
		t.Fatalf("DELETE %s: %d %s, want 200", del, got.status, got.body)
	}
	if r := s.check(t, `{"user":"42"}`); decodeMap(t, r.body)["scope"] != "tier:free" {
		t.Errorf("after the DELETE: %s, want tier:free", r.body)
	}
	if line := audit.lastAction(t, "override_revoked"); line["actor"] != "ops" || line["what"] != "api|user:42" {
		t.Errorf("revocation audited as %v, want actor ops, what api|user:42", line)
	}
	if got := s.do(t, http.MethodDelete, del, "", nil); got.status != http.StatusNotFound {
		t.Errorf("DELETE %s again: %d %s, want 404", del, got.status, got.body)
	}
}

// TestHTTPOverrideWithoutAdminTokens: a node without admin tokens refuses
// POST and DELETE /v1/overrides with 403, saying why.
func TestHTTPOverrideWithoutAdminTokens(t *testing.T) {
	e, _, _ := newPolicyEnv(t)
	e.api.admin = nil
	s := e.startHTTP(t)
	s.auth = "Bearer " + testAdminToken
	for _, method := range []string{http.MethodPost, http.MethodDelete} {
		path := "/v1/overrides"
		if method == http.MethodDelete {
			path += "/ovr-1"
		}
		got := s.do(t, method, path, "application/json", []byte(`{}`))
		if got.status != http.StatusForbidden || !bytes.Contains(got.body, []byte("no admin token configured")) {
			t.Errorf("%s %s without admin tokens: %d %s, want 403 saying no admin token is configured", method, path, got.status, got.body)
		}
	}
}

// TestHTTPOverrideCap: with policy.MaxOverrides in force, POSTing one more
// for a new caller is 400 and changes nothing; expires_in beyond
// MaxOverride is 400.
func TestHTTPOverrideCap(t *testing.T) {
	e, s, mgr := newPolicyEnv(t)
	for i := range policy.MaxOverrides {
		if _, err := mgr.AddOverride(policy.Override{Actor: "ops", Reason: "r", User: fmt.Sprint("u", i), Tier: "gold",
			Expires: e.clock.Now().Add(time.Hour).Time()}); err != nil {
			t.Fatalf("override %d: %v", i+1, err)
		}
	}
	got := s.do(t, http.MethodPost, "/v1/overrides", "application/json",
		[]byte(`{"reason":"incident","user":"one-more","tier":"gold","expires_in":"10m"}`))
	var e400 ErrorResponse
	if got.status != http.StatusBadRequest || json.Unmarshal(got.body, &e400) != nil || e400.Code != CodeInvalidArgument ||
		!strings.Contains(e400.Message, "10000 are in force, at most 10000") {
		t.Errorf("override %d: %d %s, want 400 saying at most 10000 are in force", policy.MaxOverrides+1, got.status, got.body)
	}
	if n := len(mgr.Overrides()); n != policy.MaxOverrides {
		t.Errorf("%d overrides, want %d", n, policy.MaxOverrides)
	}
	got = s.do(t, http.MethodPost, "/v1/overrides", "application/json",
		[]byte(`{"reason":"incident","user":"u1","tier":"gold","expires_in":"169h"}`))
	if got.status != http.StatusBadRequest || !bytes.Contains(got.body, []byte("expires_in")) {
		t.Errorf("expires_in 169h: %d %s, want 400 naming expires_in", got.status, got.body)
	}
}

// syncBuf is an audit log in memory, safe for concurrent writes.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// lastAction is the last audit line of the action.
func (s *syncBuf) lastAction(t *testing.T, action string) map[string]any {
	t.Helper()
	s.mu.Lock()
	text := s.b.String()
	s.mu.Unlock()
	var last map[string]any
	for line := range strings.Lines(text) {
		m := decodeMap(t, []byte(line))
		if m["action"] == action {
			last = m
		}
	}
	if last == nil {
		t.Fatalf("no %s line in the audit log:\n%s", action, text)
	}
	return last
}

// TestHTTPPrivateReads: with PrivateReads, the read-only endpoints need an
// admin token (401 without, 403 with a wrong one) while checks and
// /healthz stay open.
func TestHTTPPrivateReads(t *testing.T) {
	e, _, _ := newPolicyEnv(t)
	e.api.privReads = true
	s := e.startHTTP(t)
	s.auth = "Bearer " + testAdminToken
	none, wrong := *s, *s
	none.auth, wrong.auth = "", "Bearer not-the-token-of-ops"
	for _, path := range []string{"/v1/overrides", "/v1/policy", "/metrics"} {
		if got := none.do(t, http.MethodGet, path, "", nil); got.status != http.StatusUnauthorized {
			t.Errorf("GET %s without a token: %d, want 401", path, got.status)
		}
		if got := wrong.do(t, http.MethodGet, path, "", nil); got.status != http.StatusForbidden {
			t.Errorf("GET %s with a wrong token: %d, want 403", path, got.status)
		}
		if got := s.do(t, http.MethodGet, path, "", nil); got.status != http.StatusOK {
			t.Errorf("GET %s with the token: %d %s, want 200", path, got.status, got.body)
		}
	}
	if got := none.do(t, http.MethodGet, "/healthz", "", nil); got.status != http.StatusOK {
		t.Errorf("GET /healthz without a token: %d, want 200", got.status)
	}
	if r := none.check(t, `{"user":"42"}`); r.status != http.StatusOK {
		t.Errorf("a check without a token: %d %s, want 200", r.status, r.body)
	}
}
