package api

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/ringlimit/ringlimit/proto/ringlimitv1"
)

// leaseOut is an acquire's answer.
type leaseOut struct {
	Allowed     bool   `json:"allowed"`
	Code        string `json:"code"`
	Limit       int64  `json:"limit"`
	Remaining   int64  `json:"remaining"`
	RetryMs     int64  `json:"retry_after_ms"`
	Scope       string `json:"scope"`
	Lease       string `json:"lease"`
	InFlight    int64  `json:"in_flight"`
	ExpiresInMs int64  `json:"expires_in_ms"`
}

func (s *httpServer) post(t *testing.T, path, body string, out any) httpResult {
	t.Helper()
	r := s.do(t, http.MethodPost, path, "application/json", []byte(body))
	if out != nil {
		if err := json.Unmarshal(r.body, out); err != nil {
			t.Fatalf("%s %s: %d %s", path, body, r.status, r.body)
		}
	}
	return r
}

// TestAcquireRenewRelease: a limit of 2 in flight with a TTL of 10s: two
// acquires (in_flight 1, 2; remaining 1, 0), a third refused 429 with
// Retry-After 10 and retry_after_ms 10000 (the earliest expiry). The first
// lease renewed for 20s at 5s outlives the second, which expires at 10s:
// at 11s an acquire is granted with in_flight 2. A release answers
// released true, in_flight 1, then false; a renew of it 404
// LEASE_NOT_FOUND. An acquire repeated with its request_id answers the
// same lease with in_flight unchanged. An inline concurrency limit on
// /v1/check is 400 naming limit.algorithm.
func TestAcquireRenewRelease(t *testing.T) {
	e := newTestEnv(t, nil)
	s := e.startHTTP(t)
	const acq = `{"key":"jobs","limit":{"algorithm":"concurrency","limit":2},"ttl":"10s"}`
	var a, b, c leaseOut
	r := s.post(t, "/v1/acquire", acq, &a)
	if r.status != 200 || !a.Allowed || !strings.HasPrefix(a.Lease, "l1.") || a.InFlight != 1 || a.Limit != 2 || a.Remaining != 1 ||
		a.ExpiresInMs != 10000 || a.Scope != "inline" || r.header.Get("X-Ratelimit-Remaining") != "1" {
		t.Fatalf("acquire 1: %d %s %v", r.status, r.body, r.header)
	}
	if r = s.post(t, "/v1/acquire", acq, &b); r.status != 200 || b.InFlight != 2 || b.Remaining != 0 || b.Lease == a.Lease {
		t.Fatalf("acquire 2: %d %s", r.status, r.body)
	}
	if r = s.post(t, "/v1/acquire", acq, &c); r.status != 429 || c.Allowed || c.Code != CodeRateLimited || c.Lease != "" ||
		c.RetryMs != 10000 || r.header.Get("Retry-After") != "10" || c.InFlight != 2 {
		t.Fatalf("acquire 3: %d %s %v", r.status, r.body, r.header)
	}
	e.clock.Advance(5 * time.Second)
	var ren RenewResponse
	if r = s.post(t, "/v1/renew", `{"lease":"`+a.Lease+`","ttl":"20s"}`, &ren); r.status != 200 || !ren.Renewed || ren.ExpiresInMs != 20000 || ren.InFlight != 2 {
		t.Fatalf("renew: %d %s", r.status, r.body)
	}
	e.clock.Advance(6 * time.Second)
	if r = s.post(t, "/v1/acquire", acq, &c); r.status != 200 || c.InFlight != 2 {
		t.Fatalf("acquire after the second lease expired: %d %s", r.status, r.body)
	}
	var rel ReleaseResponse
	if r = s.post(t, "/v1/release", `{"lease":"`+a.Lease+`","outcome":"error","latency_ms":120}`, &rel); r.status != 200 || !rel.Released || rel.InFlight != 1 {
		t.Fatalf("release: %d %s", r.status, r.body)
	}
	if r = s.post(t, "/v1/release", `{"lease":"`+a.Lease+`"}`, &rel); r.status != 200 || rel.Released || rel.InFlight != 1 {
		t.Fatalf("second release: %d %s", r.status, r.body)
	}
	var er ErrorResponse
	if r = s.post(t, "/v1/renew", `{"lease":"`+a.Lease+`"}`, &er); r.status != 404 || er.Code != CodeLeaseNotFound {
		t.Fatalf("renew of a released lease: %d %s", r.status, r.body)
	}
	const idem = `{"key":"idem","limit":{"algorithm":"concurrency","limit":3},"request_id":"job-7"}`
	var first, again leaseOut
	s.post(t, "/v1/acquire", idem, &first)
	if r = s.post(t, "/v1/acquire", idem, &again); r.status != 200 || again.Lease != first.Lease || first.InFlight != 1 || again.InFlight != 1 {
		t.Fatalf("acquire again with its request_id: %+v then %+v", first, again)
	}
	if r = s.post(t, "/v1/check", `{"key":"jobs","limit":{"algorithm":"concurrency","limit":2,"per":"1s"}}`, &er); r.status != 400 ||
		!strings.Contains(er.Message, "limit") {
		t.Fatalf("check of a concurrency limit: %d %s", r.status, r.body)
	}
	if r = s.post(t, "/v1/check", `{"key":"jobs","limit":{"algorithm":"concurrency","limit":2}}`, &er); r.status != 400 ||
		!strings.HasPrefix(er.Message, "limit.") {
		t.Fatalf("check of a concurrency limit: %d %s", r.status, r.body)
	}
}

// TestLeaseBadInput: every bad acquire, renew, release and report is 400
// naming its field, and takes nothing: an acquire afterwards answers
// in_flight 1.
func TestLeaseBadInput(t *testing.T) {
	e := newTestEnv(t, nil)
	s := e.startHTTP(t)
	lim := `"limit":{"algorithm":"concurrency","limit":5}`
	lease := `l1.` + strings.Repeat("A", 4) + `.AAAAAAAAAAAAAAAA`
	for _, c := range []struct{ path, body, field string }{
		{"/v1/acquire", `{"key":"k","limit":{"algorithm":"token_bucket","limit":5}}`, "limit.algorithm"},
		{"/v1/acquire", `{"key":"k","limit":{"limit":5}}`, "limit.algorithm"},
		{"/v1/acquire", `{"key":"k","limit":{"algorithm":"concurrency","limit":0}}`, "limit.limit"},
		{"/v1/acquire", `{"key":"k","limit":{"algorithm":"concurrency","limit":5,"per":"1s"}}`, "body"},
		{"/v1/acquire", `{"key":"k","limit":{"algorithm":"concurrency","limit":5,"failure_mode":"local"}}`, "limit.failure_mode"},
		{"/v1/acquire", `{"key":"k",` + lim + `,"ttl":"500ms"}`, "ttl"},
		{"/v1/acquire", `{"key":"k",` + lim + `,"ttl":"2h"}`, "ttl"},
		{"/v1/acquire", `{"key":"k",` + lim + `,"ttl":"soon"}`, "ttl"},
		{"/v1/acquire", `{"key":"k",` + lim + `,"request_id":"` + strings.Repeat("r", 129) + `"}`, "request_id"},
		{"/v1/acquire", `{"key":"",` + lim + `}`, "key"},
		{"/v1/acquire", `{"key":"k"}`, "limit"},
		{"/v1/acquire", `{"key":"k",` + lim + `,"user":"u"}`, "limit"},
		{"/v1/acquire", `{"user":"u"}`, "policy"},
		{"/v1/renew", `{"lease":"x"}`, "lease"},
		{"/v1/renew", `{"lease":""}`, "lease"},
		{"/v1/renew", `{"lease":"` + lease + `","ttl":"0s"}`, "ttl"},
		{"/v1/renew", `{"lease":"` + strings.Repeat(lease+",", 5) + lease + `"}`, "lease"},
		{"/v1/release", `{"lease":"` + lease + `","outcome":"maybe"}`, "outcome"},
		{"/v1/release", `{"lease":"` + lease + `","latency_ms":-1}`, "latency_ms"},
		{"/v1/release", `{"lease":"` + lease + `","latency_ms":"1s"}`, "latency_ms"},
		{"/v1/report", `{"user":"u","outcome":"ok"}`, "policy"},
		{"/v1/report", `{"user":"u","outcome":"fine"}`, "outcome"},
	} {
		var er ErrorResponse
		r := s.post(t, c.path, c.body, &er)
		if r.status != 400 || er.Code != CodeInvalidArgument || !strings.HasPrefix(er.Message, c.field) {
			t.Errorf("%s %s: %d %s; want 400 naming %s", c.path, c.body, r.status, r.body, c.field)
		}
	}
	var a leaseOut
	if r := s.post(t, "/v1/acquire", `{"key":"k",`+lim+`}`, &a); r.status != 200 || a.InFlight != 1 {
		t.Fatalf("acquire after the bad ones: %d %s", r.status, r.body)
	}
}

// FuzzLeaseBodies: whatever the body of an acquire, renew, release or
// report, the answer is one the description allows, and a 400 names a
// field.
func FuzzLeaseBodies(f *testing.F) {
	for _, seed := range []string{
		`{"key":"k","limit":{"algorithm":"concurrency","limit":5},"ttl":"30s","request_id":"r"}`,
		`{"lease":"l1.aw.AAAAAAAAAAAAAAAA","ttl":"1m"}`,
		`{"lease":"l1.aw.AAAAAAAAAAAAAAAA,l1.aw.AAAAAAAAAAAAAAAB","outcome":"dropped","latency_ms":5}`,
		`{"user":"u","outcome":"error","latency_ms":1e3}`,
		`[]`, `{"lease":null}`, `{"key":"k","limit":{"algorithm":"concurrency","limit":-1}}`,
	} {
		for i := range 4 {
			f.Add(uint8(i), seed)
		}
	}
	e := newTestEnv(f, nil)
	srv := httptest.NewServer(e.api.Handler(nil)) // not validated: fuzz bodies need not match the description
	f.Cleanup(srv.Close)
	s := &httpServer{url: srv.URL, client: srv.Client()}
	paths := []string{"/v1/acquire", "/v1/renew", "/v1/release", "/v1/report"}
	f.Fuzz(func(t *testing.T, which uint8, body string) {
		path := paths[int(which)%len(paths)]
		got := s.do(t, http.MethodPost, path, "application/json", []byte(body))
		switch got.status {
		case 200, 404, 429:
		case 400:
			var m map[string]any
			if json.Unmarshal(got.body, &m) != nil || !strings.Contains(m["message"].(string), ":") {
				t.Fatalf("%s %q: 400 %s", path, body, got.body)
			}
		default:
			t.Fatalf("%s %q: %d %s", path, body, got.status, got.body)
		}
	})
}

// TestGRPCAcquireRenewRelease: the same over gRPC: acquire a limit of 1
// (lease, in_flight 1, expires_in_ms 30000 by default), a second refused
// with retry_after_ms 30000, renew (expires_in_ms 30000), release (true,
// then false), renew then NotFound; a CONCURRENCY limit in Check is
// InvalidArgument, as is a bad outcome.
func TestGRPCAcquireRenewRelease(t *testing.T) {
	e := newTestEnv(t, nil)
	c := e.startGRPC(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	check := &pb.Check{Key: "jobs", Limit: &pb.Limit{Algorithm: pb.Algorithm_CONCURRENCY, Limit: 1}}
	a, err := c.Acquire(ctx, &pb.AcquireRequest{Check: check})
	if d := a.GetDecision(); err != nil || !d.GetAllowed() || d.GetLease() == "" || d.GetInFlight() != 1 || d.GetExpiresInMs() != 30000 {
		t.Fatalf("acquire: %v, %v", a, err)
	}
	b, err := c.Acquire(ctx, &pb.AcquireRequest{Check: check})
	if d := b.GetDecision(); err != nil || d.GetAllowed() || d.GetLease() != "" || d.GetRetryAfterMs() != 30000 {
		t.Fatalf("second acquire: %v, %v", b, err)
	}
	id := a.GetDecision().GetLease()
	if r, err := c.Renew(ctx, &pb.RenewRequest{Lease: id}); err != nil || !r.GetRenewed() || r.GetExpiresInMs() != 30000 {
		t.Fatalf("renew: %v, %v", r, err)
	}
	for i, want := range []bool{true, false} {
		if r, err := c.Release(ctx, &pb.ReleaseRequest{Lease: id, Outcome: pb.Outcome_OUTCOME_DROPPED}); err != nil || r.GetReleased() != want {
			t.Fatalf("release %d: %v, %v", i+1, r, err)
		}
	}
	if _, err := c.Renew(ctx, &pb.RenewRequest{Lease: id}); status.Code(err) != codes.NotFound {
		t.Fatalf("renew of a released lease: %v", err)
	}
	if _, err := c.Check(ctx, &pb.CheckRequest{Checks: []*pb.Check{check}}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("check of a CONCURRENCY limit: %v", err)
	}
	if _, err := c.Release(ctx, &pb.ReleaseRequest{Lease: id, Outcome: 9}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("release with outcome 9: %v", err)
	}
	if _, err := c.Report(ctx, &pb.ReportRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("report without a request: %v", err)
	}
}

// TestReportMetric: two reports refused as invalid (no policy file; a bad
// outcome) count 2 in ringlimit_reports_total{result="invalid"}.
func TestReportMetric(t *testing.T) {
	e := newTestEnv(t, nil)
	s := e.startHTTP(t)
	s.post(t, "/v1/report", `{"user":"u"}`, nil)
	s.post(t, "/v1/report", `{"user":"u","outcome":"late"}`, nil)
	m := s.do(t, http.MethodGet, "/metrics", "", nil)
	if line := `ringlimit_reports_total{result="invalid"} 2`; !hasLine(string(m.body), line) {
		t.Fatalf("/metrics lacks %q:\n%s", line, grepLines(string(m.body), "ringlimit_reports"))
	}
}
