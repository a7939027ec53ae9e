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

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
	pb "github.com/ringlimit/ringlimit/proto/ringlimitv1"
)

// budget is 1,000 tokens refilling 1 a second.
const budget = `{"limit":1000,"per":"1000s"}`

type checkOut struct {
	Allowed     bool   `json:"allowed"`
	Remaining   int64  `json:"remaining"`
	RetryMs     int64  `json:"retry_after_ms"`
	Reservation string `json:"reservation"`
}

func (s *httpServer) reserve(t *testing.T, key string, cost int64, extra string) checkOut {
	t.Helper()
	body := `{"key":"` + key + `","cost":` + itoa(cost) + `,"limit":` + budget + `,"reserve":true` + extra + `}`
	r := s.check(t, body)
	var out checkOut
	if err := json.Unmarshal(r.body, &out); err != nil {
		t.Fatalf("%s: %s", body, r.body)
	}
	return out
}

func (s *httpServer) settle(t *testing.T, id string, cost int64) (int, map[string]any) {
	t.Helper()
	r := s.do(t, http.MethodPost, "/v1/settle", "application/json", []byte(`{"reservation":"`+id+`","cost":`+itoa(cost)+`}`))
	return r.status, decodeMap(t, r.body)
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }

// TestReserveSettle: reserve 100 of 1,000 and settle 30 (970 left);
// spend to 100, reserve 100 and settle 250: a debt of 150 that a check of
// 1 waits out for exactly 151 s. A second settle answers 409 and changes
// nothing; one after the TTL answers 404 and the reserved spend stays.
func TestReserveSettle(t *testing.T) {
	e := newTestEnv(t, nil)
	s := e.startHTTP(t)
	r := s.reserve(t, "llm", 100, "")
	if !r.Allowed || r.Remaining != 900 || !strings.HasPrefix(r.Reservation, "r1.") {
		t.Fatalf("reserve 100: %+v", r)
	}
	if st, m := s.settle(t, r.Reservation, 30); st != 200 || m["settled"] != true || m["remaining"] != 970.0 || m["cost"] != 30.0 {
		t.Fatalf("settle 30: %d %v", st, m)
	}
	if st, m := s.settle(t, r.Reservation, 30); st != 409 || m["code"] != CodeAlreadySettled {
		t.Fatalf("second settle: %d %v", st, m)
	}
	if c := s.check(t, chk("llm", "870", budget)); c.status != 200 || decodeMap(t, c.body)["remaining"] != 100.0 {
		t.Fatalf("spend 870: %s", c.body)
	}
	r = s.reserve(t, "llm", 100, "")
	if !r.Allowed || r.Remaining != 0 {
		t.Fatalf("reserve the last 100: %+v", r)
	}
	if st, m := s.settle(t, r.Reservation, 250); st != 200 || m["remaining"] != 0.0 {
		t.Fatalf("settle 250: %d %v", st, m)
	}
	c := s.check(t, chk("llm", "1", budget))
	if m := decodeMap(t, c.body); c.status != 429 || m["remaining"] != 0.0 || m["retry_after_ms"] != 151000.0 {
		t.Fatalf("check of 1 in a debt of 150: %d %s", c.status, c.body)
	}
	// A refused reserve makes no reservation.
	if r := s.reserve(t, "llm", 1, ""); r.Allowed || r.Reservation != "" {
		t.Fatalf("refused reserve: %+v", r)
	}
	// After the TTL: 404, and the reserved spend stays.
	r = s.reserve(t, "ttl", 100, `,"reserve_ttl":"1s"`)
	e.clock.Advance(time.Second)
	if st, m := s.settle(t, r.Reservation, 0); st != 404 || m["code"] != CodeReservationNotFound {
		t.Fatalf("settle after the TTL: %d %v", st, m)
	}
	if c := s.check(t, chk("ttl", "1", budget)); decodeMap(t, c.body)["remaining"] != 900.0 {
		t.Fatalf("after an expired reservation: %s", c.body)
	}
	// A forged nonce is not found.
	r = s.reserve(t, "forged", 10, "")
	forged := r.Reservation[:len(r.Reservation)-2] + "AA"
	if forged == r.Reservation {
		forged = r.Reservation[:len(r.Reservation)-2] + "BB"
	}
	if st, _ := s.settle(t, forged, 0); st != 404 {
		t.Fatalf("forged id: %d", st)
	}
}

// TestReserveSettleBadInput: every bad field is a 400 naming it, and
// changes nothing.
func TestReserveSettleBadInput(t *testing.T) {
	e := newTestEnv(t, nil)
	s := e.startHTTP(t)
	r := s.reserve(t, "k", 10, "")
	good := r.Reservation
	for _, c := range []struct{ path, body, field string }{
		{"/v1/check", `{"key":"k","limit":` + budget + `,"reserve":true,"reserve_ttl":"0.5s"}`, "reserve_ttl:"},
		{"/v1/check", `{"key":"k","limit":` + budget + `,"reserve":true,"reserve_ttl":"25h"}`, "reserve_ttl:"},
		{"/v1/check", `{"key":"k","limit":` + budget + `,"reserve":true,"reserve_ttl":"soon"}`, "reserve_ttl:"},
		{"/v1/check", `{"key":"k","limit":` + budget + `,"reserve_ttl":"1m"}`, "reserve_ttl:"},
		{"/v1/check", `{"key":"k","limit":{"algorithm":"fixed_window","limit":10,"per":"1s"},"reserve":true}`, "limit.algorithm:"},
		{"/v1/check", `{"user":"u","reserve":true}`, "reserve:"},
		{"/v1/settle", `{"cost":1}`, "reservation:"},
		{"/v1/settle", `{"reservation":"nope","cost":1}`, "reservation:"},
		{"/v1/settle", `{"reservation":"` + good + `"}`, "cost:"},
		{"/v1/settle", `{"reservation":"` + good + `","cost":-1}`, "cost:"},
		{"/v1/settle", `{"reservation":"` + good + `","cost":99999999999}`, "cost:"},
		{"/v1/settle", `{"reservation":"` + good + `","cost":"1"}`, "cost:"},
		{"/v1/settle", `{"reservation":"` + good + `","cost":1,"x":1}`, "body:"},
		{"/v1/settle", ``, "body:"},
	} {
		got := s.do(t, http.MethodPost, c.path, "application/json", []byte(c.body))
		m := decodeMap(t, got.body)
		if got.status != 400 || m["code"] != CodeInvalidArgument || !strings.HasPrefix(m["message"].(string), c.field) {
			t.Errorf("%s %s: %d %s; want 400 naming %s", c.path, c.body, got.status, got.body, c.field)
		}
	}
	if _, used, _ := e.store.Used(bucket.InlineKey("k", ptr(bucket.MustLimit(bucket.TokenBucket, 1000, 1000*time.Second, 1000))), e.clock.Now()); used != 10 {
		t.Fatalf("bad input changed the key: used %d, want 10", used)
	}
	// The good id still settles once.
	if st, _ := s.settle(t, good, 4); st != 200 {
		t.Fatalf("settle after bad input: %d", st)
	}
}

// FuzzSettleBody: whatever the body, a settle answers 200, 400, 404 or
// 409, and a 400 names a field.
func FuzzSettleBody(f *testing.F) {
	f.Add(`{"reservation":"r1.aw.AAAAAAAAAAAAAAAA","cost":1}`)
	f.Add(`{"reservation":"","cost":-1}`)
	f.Add(`{"reservation":"r1..","cost":1e3}`)
	f.Add(`[]`)
	f.Add(`{"cost":null,"reservation":null}`)
	e := newTestEnv(f, nil)
	srv := httptest.NewServer(e.api.Handler(nil)) // not validated: fuzz bodies need not match the description
	f.Cleanup(srv.Close)
	s := &httpServer{url: srv.URL, client: srv.Client()}
	f.Fuzz(func(t *testing.T, body string) {
		got := s.do(t, http.MethodPost, "/v1/settle", "application/json", []byte(body))
		switch got.status {
		case 200, 404, 409:
		case 400:
			var m map[string]any
			if json.Unmarshal(got.body, &m) != nil || !strings.Contains(m["message"].(string), ":") {
				t.Fatalf("%q: 400 %s", body, got.body)
			}
		default:
			t.Fatalf("%q: %d %s", body, got.status, got.body)
		}
	})
}

// TestGRPCReserveSettle: the same over gRPC: reserve 100 of 1,000, settle
// 30 (970 left), again (AlreadyExists), a bad id (InvalidArgument), a
// policy request with reserve (InvalidArgument), an unknown id (NotFound).
func TestGRPCReserveSettle(t *testing.T) {
	e := newTestEnv(t, nil)
	c := e.startGRPC(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	one := int64(100)
	resp, err := c.Check(ctx, &pb.CheckRequest{Checks: []*pb.Check{{Key: "llm", Cost: &one, Reserve: true, ReserveTtlMs: 60_000,
		Limit: &pb.Limit{Limit: 1000, PerMs: 1_000_000}}}})
	if err != nil {
		t.Fatal(err)
	}
	d := resp.GetDecisions()[0]
	if !d.GetAllowed() || d.GetRemaining() != 900 || !strings.HasPrefix(d.GetReservation(), "r1.") {
		t.Fatalf("reserve: %v", d)
	}
	s, err := c.Settle(ctx, &pb.SettleRequest{Reservation: d.GetReservation(), Cost: 30})
	if err != nil || !s.GetSettled() || s.GetRemaining() != 970 || s.GetCost() != 30 {
		t.Fatalf("settle 30: %v, %v", s, err)
	}
	for _, c2 := range []struct {
		req  *pb.SettleRequest
		code codes.Code
	}{
		{&pb.SettleRequest{Reservation: d.GetReservation(), Cost: 30}, codes.AlreadyExists},
		{&pb.SettleRequest{Reservation: "bad", Cost: 30}, codes.InvalidArgument},
		{&pb.SettleRequest{Reservation: d.GetReservation(), Cost: -1}, codes.InvalidArgument},
		{&pb.SettleRequest{Reservation: bucket.NewReservationID("i|x"), Cost: 1}, codes.NotFound},
	} {
		if _, err := c.Settle(ctx, c2.req); status.Code(err) != c2.code {
			t.Errorf("Settle(%v) = %v, want %v", c2.req, err, c2.code)
		}
	}
	_, err = c.Check(ctx, &pb.CheckRequest{Checks: []*pb.Check{{Request: &pb.PolicyRequest{User: "u"}, Reserve: true}}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "reserve is for inline limits") {
		t.Errorf("policy request with reserve: %v", err)
	}
	_, err = c.Check(ctx, &pb.CheckRequest{Checks: []*pb.Check{{Key: "k", Reserve: true, ReserveTtlMs: 500, Limit: &pb.Limit{Limit: 10, PerMs: 1000}}}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "reserve_ttl_ms: must be between") {
		t.Errorf("reserve_ttl_ms 500: %v", err)
	}
}

// FuzzReserveFields: whatever reserve, reserve_ttl and algorithm a check
// names, it answers 200 (with a reservation exactly when it reserved),
// 429, or a 400 naming a field that leaves the store as it was.
func FuzzReserveFields(f *testing.F) {
	f.Add(true, "5m", "token_bucket", int64(1))
	f.Add(true, "0.5s", "", int64(2))
	f.Add(false, "1m", "", int64(1))
	f.Add(true, "", "fixed_window", int64(1))
	f.Add(true, "24h0m1s", "token_bucket", int64(-1))
	e := newTestEnv(f, nil)
	srv := httptest.NewServer(e.api.Handler(nil))
	f.Cleanup(srv.Close)
	s := &httpServer{url: srv.URL, client: srv.Client()}
	f.Fuzz(func(t *testing.T, reserve bool, ttl, alg string, cost int64) {
		body, _ := json.Marshal(map[string]any{"key": "fuzz", "cost": cost, "reserve": reserve, "reserve_ttl": ttl,
			"limit": map[string]any{"algorithm": alg, "limit": 1000, "per": "1000s"}})
		before := e.store.Len()
		got := s.do(t, http.MethodPost, "/v1/check", "application/json", body)
		m := decodeMap(t, got.body)
		switch got.status {
		case 200:
			if id, _ := m["reservation"].(string); (id != "") != reserve {
				t.Fatalf("%s: reservation %q", body, id)
			}
		case 429:
		case 400:
			msg, _ := m["message"].(string)
			field, _, ok := strings.Cut(msg, ":")
			if !ok || strings.Contains(field, " ") {
				t.Fatalf("%s: 400 %q names no field", body, msg)
			}
			if e.store.Len() != before {
				t.Fatalf("%s: a 400 changed the store", body)
			}
		default:
			t.Fatalf("%s: %d %s", body, got.status, got.body)
		}
	})
}

// TestReserveSettleMetrics: ringlimit_reservations_total counts each
// check with reserve by result, and ringlimit_settles_total each settle,
// over HTTP and gRPC alike: reserves of 600 and 300 of 1,000 (ok), of 200
// (refused), of 50 for 1s and one over gRPC (ok), and a check without
// reserve (not counted); settles of the 600 (ok), of it again
// (already_settled), of an unknown id over HTTP and over gRPC and of the
// 50 after its TTL (not_found), and with a negative cost (error).
func TestReserveSettleMetrics(t *testing.T) {
	e := newTestEnv(t, nil)
	s := e.startHTTP(t)
	c := e.startGRPC(t)
	first := s.reserve(t, "m", 600, "")
	if !first.Allowed || first.Reservation == "" {
		t.Fatalf("reserve 600: %+v", first)
	}
	if r := s.reserve(t, "m", 300, ""); !r.Allowed || r.Remaining != 100 {
		t.Fatalf("reserve 300: %+v", r)
	}
	if r := s.reserve(t, "m", 200, ""); r.Allowed {
		t.Fatalf("reserve 200 of 100 left: %+v", r)
	}
	short := s.reserve(t, "m2", 50, `,"reserve_ttl":"1s"`)
	if c := s.check(t, chk("m2", "1", budget)); c.status != 200 {
		t.Fatalf("check without reserve: %d %s", c.status, c.body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	cost := int64(1)
	if _, err := c.Check(ctx, &pb.CheckRequest{Checks: []*pb.Check{{Key: "g", Cost: &cost, Reserve: true,
		Limit: &pb.Limit{Limit: 1000, PerMs: 1_000_000}}}}); err != nil {
		t.Fatal(err)
	}
	if st, _ := s.settle(t, first.Reservation, 600); st != 200 {
		t.Fatalf("settle: %d", st)
	}
	if st, _ := s.settle(t, first.Reservation, 600); st != 409 {
		t.Fatalf("settle again: %d", st)
	}
	unknown := bucket.NewReservationID("i|x")
	if st, _ := s.settle(t, unknown, 1); st != 404 {
		t.Fatalf("settle of an unknown id: %d", st)
	}
	if _, err := c.Settle(ctx, &pb.SettleRequest{Reservation: unknown, Cost: 1}); status.Code(err) != codes.NotFound {
		t.Fatalf("gRPC settle of an unknown id: %v", err)
	}
	e.clock.Advance(time.Second)
	if st, _ := s.settle(t, short.Reservation, 1); st != 404 {
		t.Fatalf("settle after the TTL: %d", st)
	}
	if st, _ := s.settle(t, short.Reservation, -1); st != 400 {
		t.Fatalf("settle with a negative cost: %d", st)
	}
	for _, m := range []struct {
		name, result string
		want         float64
	}{
		{"ringlimit_reservations_total", "ok", 4},
		{"ringlimit_reservations_total", "refused", 1},
		{"ringlimit_reservations_total", "degraded", 0},
		{"ringlimit_settles_total", "ok", 1},
		{"ringlimit_settles_total", "already_settled", 1},
		{"ringlimit_settles_total", "not_found", 3},
		{"ringlimit_settles_total", "error", 1},
	} {
		if got := testkit.Metric(t, e.reg, m.name, "result", m.result); got != m.want {
			t.Errorf("%s{result=%q} = %v, want %v", m.name, m.result, got, m.want)
		}
	}
}
