package api

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
)

// BenchmarkHTTPHandlerPeek is BenchmarkHTTPHandler with "peek": true: in
// one `go test -bench 'HTTPHandler|GRPCHandler'` run, the cost of a peek
// next to a check's on the same keys.
func BenchmarkHTTPHandlerPeek(b *testing.B) {
	e := newTestEnv(b, nil)
	h := e.api.Handler(nil)
	bodies := make([][]byte, benchKeys)
	for i := range bodies {
		bodies[i] = []byte(`{"key":"` + fmt.Sprintf("bench:%d", i) + `","cost":1,"limit":{"limit":1000000000,"per":"1s"},"peek":true}`)
		// The key exists, as BenchmarkHTTPHandler's do after the first
		// round: a peek of an unknown key answers without a lookup's hit.
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/v1/check", bytes.NewReader(bytes.Replace(bodies[i], []byte(`,"peek":true`), nil, 1))))
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		req := httptest.NewRequest(http.MethodPost, "/v1/check", bytes.NewReader(bodies[i%benchKeys]))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatalf("peek %d: status %d", i, rec.Code)
		}
	}
}

// BenchmarkGRPCHandlerPeek is BenchmarkGRPCHandler with every check a
// peek.
func BenchmarkGRPCHandlerPeek(b *testing.B) {
	e := newTestEnv(b, nil)
	g := &grpcServer{api: e.api}
	reqs := benchRequests(benchKeys, 1)
	ctx := context.Background()
	for _, r := range reqs {
		if _, err := g.Check(ctx, r); err != nil { // the keys exist
			b.Fatal(err)
		}
		r.GetChecks()[0].Peek = true
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		resp, err := g.Check(ctx, reqs[i%benchKeys])
		if err != nil || !resp.GetDecisions()[0].GetAllowed() {
			b.Fatalf("peek %d: %v, %v", i, resp, err)
		}
	}
}
