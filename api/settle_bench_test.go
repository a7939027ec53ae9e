package api

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
)

// BenchmarkHTTPSettle is the server's share of reserve and settle against
// a plain check, through the handler on the local store, in one run:
// check (the baseline), reserve (a check that records a reservation), and
// reserve+settle (both calls).
func BenchmarkHTTPSettle(b *testing.B) {
	e := newTestEnv(b, nil)
	h := e.api.Handler(nil)
	const limit = `{"limit":1000000000,"per":"1s"}`
	do := func(path string, body []byte) []byte {
		req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatalf("%s %s: %d %s", path, body, rec.Code, rec.Body)
		}
		return rec.Body.Bytes()
	}
	for _, tc := range []struct {
		name            string
		reserve, settle bool
	}{{"check", false, false}, {"reserve", true, false}, {"reserve+settle", true, true}} {
		b.Run(tc.name, func(b *testing.B) {
			bodies := make([][]byte, benchKeys)
			for i := range bodies {
				body := chk(fmt.Sprintf("bench:%d", i), "2", limit)
				if tc.reserve {
					body = body[:len(body)-1] + `,"reserve":true}`
				}
				bodies[i] = []byte(body)
			}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				out := do("/v1/check", bodies[i%benchKeys])
				if !tc.settle {
					continue
				}
				_, id, ok := bytes.Cut(out, []byte(`"reservation":"`)) // the client's share is not measured
				if end := bytes.IndexByte(id, '"'); !ok || end < 0 {
					b.Fatalf("no reservation in %s", out)
				} else {
					id = id[:end]
				}
				do("/v1/settle", append(append([]byte(`{"reservation":"`), id...), `","cost":1}`...))
			}
		})
	}
}
