package api

import (
	"testing"
)

// TestCalendarCheck: 2 a day in Tokyo (UTC+9). At 2026-01-05T10:04Z
// (19:04 there) two checks are admitted and the third refused: 429 with
// retry_after_ms, reset_after_ms and Retry-After counting to Tokyo's
// midnight, 2026-01-05T15:00Z: 4 h 56 min, 17,760 s. The same limit as a
// week from Sunday in UTC resets at 2026-01-11T00:00Z (5 d 13 h 56 min).
func TestCalendarCheck(t *testing.T) {
	e := newTestEnv(t, nil)
	s := e.startHTTP(t)
	const day = `{"key":"k","limit":{"limit":2,"calendar":"day","timezone":"Asia/Tokyo"}}`
	for i := range 2 {
		var out struct {
			Allowed   bool  `json:"allowed"`
			Remaining int64 `json:"remaining"`
			ResetMs   int64 `json:"reset_after_ms"`
		}
		if r := s.post(t, "/v1/check", day, &out); r.status != 200 || !out.Allowed || out.Remaining != int64(1-i) || out.ResetMs != 17_760_000 {
			t.Fatalf("check %d: %d %s", i+1, r.status, r.body)
		}
	}
	var out struct {
		Allowed bool  `json:"allowed"`
		RetryMs int64 `json:"retry_after_ms"`
		ResetMs int64 `json:"reset_after_ms"`
	}
	r := s.post(t, "/v1/check", day, &out)
	// A calendar day has no one length: RateLimit-Policy leaves w= out.
	if r.status != 429 || out.Allowed || out.RetryMs != 17_760_000 || out.ResetMs != 17_760_000 || r.header.Get("Retry-After") != "17760" ||
		r.header.Get("RateLimit") != `"inline";r=0;t=17760` || r.header.Get("RateLimit-Policy") != `"inline";q=2` {
		t.Fatalf("third check: %d %s %v", r.status, r.body, r.header)
	}
	const week = `{"key":"k","limit":{"limit":2,"calendar":"week","week_start":"sunday"}}`
	var w struct {
		ResetMs int64 `json:"reset_after_ms"`
	}
	if r := s.post(t, "/v1/check", week, &w); r.status != 200 || w.ResetMs != ((5*24+13)*3600+56*60)*1000 {
		t.Fatalf("weekly check: %d %s", r.status, r.body)
	}
	const bad = `{"key":"k","limit":{"limit":2,"per":"1h","calendar":"day"}}`
	var e400 struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	if r := s.post(t, "/v1/check", bad, &e400); r.status != 400 || e400.Message != "limit.per: give either per or calendar, not both" {
		t.Fatalf("per and calendar: %d %s", r.status, r.body)
	}
}
