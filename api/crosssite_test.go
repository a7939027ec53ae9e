package api

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// A browser page of another origin cannot spend: its text/plain and form
// POSTs (which need no preflight) are refused 403 CROSS_ORIGIN and spend
// nothing, as is a JSON POST from a page that is not allowed. curl -d,
// which sends application/x-www-form-urlencoded and no Origin, still
// spends; so do an allowed origin and the node's own pages.
func TestCrossSiteRefused(t *testing.T) {
	e := newTestEnv(t, nil)
	a, err := New(Config{Checker: e.router, CORSOrigins: []string{"https://App.example"}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(validated(t, a.Handler(nil)))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	body := `{"key":"victim","limit":{"limit":10,"per":"1h"}}`
	spent := 0
	for i, st := range []struct {
		name     string
		method   string
		headers  []string
		status   int
		code     string // in the body, when refused
		allowHdr string // Access-Control-Allow-Origin wanted
	}{
		{"cross-site text/plain", "POST", []string{"Origin", "https://evil.example", "Content-Type", "text/plain", "Sec-Fetch-Site", "cross-site"}, 403, CodeCrossOrigin, ""},
		{"cross-site form", "POST", []string{"Origin", "https://evil.example", "Content-Type", "application/x-www-form-urlencoded"}, 403, CodeCrossOrigin, ""},
		{"cross-site multipart", "POST", []string{"Origin", "null", "Content-Type", "multipart/form-data; boundary=x"}, 403, CodeCrossOrigin, ""},
		{"cross-site JSON", "POST", []string{"Origin", "http://" + host + ".evil.example", "Content-Type", "application/json"}, 403, CodeCrossOrigin, ""},
		{"Sec-Fetch-Site alone", "POST", []string{"Sec-Fetch-Site", "cross-site"}, 403, CodeCrossOrigin, ""},
		{"another port", "POST", []string{"Origin", "http://127.0.0.1:1", "Content-Type", "text/plain"}, 403, CodeCrossOrigin, ""},
		{"text/plain without Origin", "POST", []string{"Content-Type", "text/plain"}, 415, CodeUnsupportedMediaType, ""},
		{"curl -d", "POST", []string{"Content-Type", "application/x-www-form-urlencoded", "User-Agent", "curl/8.5.0"}, 200, "", ""},
		{"no Content-Type", "POST", nil, 200, "", ""},
		{"same origin", "POST", []string{"Origin", "http://" + host, "Sec-Fetch-Site", "same-origin", "Content-Type", "application/json"}, 200, "", ""},
		{"allowed origin", "POST", []string{"Origin", "https://app.example", "Sec-Fetch-Site", "cross-site", "Content-Type", "application/json; charset=utf-8"}, 200, "", "https://app.example"},
		{"preflight allowed", "OPTIONS", []string{"Origin", "https://app.example", "Access-Control-Request-Method", "POST"}, 204, "", "https://app.example"},
		{"preflight refused", "OPTIONS", []string{"Origin", "https://evil.example", "Access-Control-Request-Method", "POST"}, 403, CodeCrossOrigin, ""},
	} {
		req, err := http.NewRequestWithContext(context.Background(), st.method, srv.URL+"/v1/check", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Del("Content-Type")
		for j := 0; j+1 < len(st.headers); j += 2 {
			req.Header.Set(st.headers[j], st.headers[j+1])
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != st.status || (st.code != "" && !strings.Contains(string(b), `"`+st.code+`"`)) {
			t.Errorf("step %d (%s): %d %s, want %d %s", i, st.name, resp.StatusCode, b, st.status, st.code)
		}
		if got := resp.Header.Get("Access-Control-Allow-Origin"); got != st.allowHdr {
			t.Errorf("step %d (%s): Access-Control-Allow-Origin %q, want %q", i, st.name, got, st.allowHdr)
		}
		if st.status == 200 {
			spent++
		}
		if spent == 0 && e.store.Len() != 0 {
			t.Errorf("step %d (%s): refused, yet the store holds %d keys", i, st.name, e.store.Len())
		}
	}
	// Exactly the admitted requests spent.
	var resp CheckResponse
	r := (&httpServer{url: srv.URL, client: srv.Client()}).check(t, body)
	if err := json.Unmarshal(r.body, &resp); err != nil || r.status != 200 || resp.Remaining != int64(10-spent-1) {
		t.Errorf("after %d admitted: %d %s, want 200 with remaining %d", spent, r.status, r.body, 10-spent-1)
	}
}
