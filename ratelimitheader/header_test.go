package ratelimitheader_test

import (
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/ratelimitheader"
)

// want is every rate-limit header of one answer; "" means absent.
type want struct {
	limit, remaining, policy, rateLimit, retryAfter string
}

func headers(h http.Header) want {
	return want{
		limit:      h.Get("X-RateLimit-Limit"),
		remaining:  h.Get("X-RateLimit-Remaining"),
		policy:     h.Get("RateLimit-Policy"),
		rateLimit:  h.Get("RateLimit"),
		retryAfter: h.Get("Retry-After"),
	}
}

func TestWrite(t *testing.T) {
	steps := []struct {
		d        ratelimitheader.Decision
		policies []ratelimitheader.Policy
		want     want
	}{
		// The README's inline examples: 2 per minute.
		{ratelimitheader.Decision{Allowed: true, Scope: "inline", Limit: 2, Window: time.Minute, Remaining: 1, Reset: 30 * time.Second},
			nil, want{"2", "1", `"inline";q=2;w=60`, `"inline";r=1;t=30`, ""}},
		{ratelimitheader.Decision{Scope: "inline", Limit: 2, Window: time.Minute, Remaining: 0, Reset: time.Minute, RetryAfter: 30 * time.Second},
			nil, want{"2", "0", `"inline";q=2;w=60`, `"inline";r=0;t=60`, "30"}},
		// Seconds round up, never down: 1.5s is 2, 1ns is 1, 0 is 0.
		{ratelimitheader.Decision{Scope: "inline", Limit: 2, Window: 500 * time.Millisecond, Remaining: 0, Reset: 1500 * time.Millisecond, RetryAfter: 1500 * time.Millisecond},
			nil, want{"2", "0", `"inline";q=2;w=1`, `"inline";r=0;t=2`, "2"}},
		{ratelimitheader.Decision{Scope: "inline", Limit: 10, Window: time.Second + 1, Remaining: 0, Reset: 1, RetryAfter: 1},
			nil, want{"10", "0", `"inline";q=10;w=2`, `"inline";r=0;t=1`, "1"}},
		{ratelimitheader.Decision{Scope: "inline", Limit: 10, Window: time.Second, Remaining: 0},
			nil, want{"10", "0", `"inline";q=10;w=1`, `"inline";r=0;t=0`, "0"}},
		{ratelimitheader.Decision{Allowed: true, Scope: "inline", Limit: 10, Window: time.Second, Remaining: 10},
			nil, want{"10", "10", `"inline";q=10;w=1`, `"inline";r=10;t=0`, ""}},
		// Every enforced layer in RateLimit-Policy, in order; the deciding
		// one in RateLimit.
		{ratelimitheader.Decision{Allowed: true, Scope: "tier:free", Limit: 10, Window: time.Second, Remaining: 9, Reset: 100 * time.Millisecond},
			[]ratelimitheader.Policy{{"route:/reports", 5, time.Minute}, {"tier:free", 10, time.Second}, {"global", 1000, time.Hour}},
			want{"10", "9", `"route:/reports";q=5;w=60, "tier:free";q=10;w=1, "global";q=1000;w=3600`, `"tier:free";r=9;t=1`, ""}},
		{ratelimitheader.Decision{Scope: "override:tier:enterprise", Limit: 1000, Window: time.Second, Remaining: 0, Reset: 5 * time.Second, RetryAfter: 2001 * time.Millisecond},
			[]ratelimitheader.Policy{{"override:tier:enterprise", 1000, time.Second}},
			want{"1000", "0", `"override:tier:enterprise";q=1000;w=1`, `"override:tier:enterprise";r=0;t=5`, "3"}},
		// A window nobody knows (the Go client's middleware: the gRPC
		// decision carries none) leaves w= out.
		{ratelimitheader.Decision{Allowed: true, Scope: "tier:free", Limit: 3, Remaining: 2, Reset: 20 * time.Minute},
			nil, want{"3", "2", `"tier:free";q=3`, `"tier:free";r=2;t=1200`, ""}},
		// Scopes are quoted as sf-strings.
		{ratelimitheader.Decision{Allowed: true, Scope: `route:/a"b`, Limit: 1, Window: time.Second, Remaining: 0},
			nil, want{"1", "0", `"route:/a\"b";q=1;w=1`, `"route:/a\"b";r=0;t=0`, ""}},
	}
	for i, s := range steps {
		h := http.Header{}
		ratelimitheader.Write(h, &s.d, s.policies...)
		if got := headers(h); got != s.want {
			t.Errorf("step %d: Write(%+v, %v) =\n  %+v\nwant\n  %+v", i, s.d, s.policies, got, s.want)
		}
		if n := len(h); n != 4 && s.d.Allowed || n != 5 && !s.d.Allowed {
			t.Errorf("step %d: %d headers %v, want 4 (5 with Retry-After)", i, n, h)
		}
	}
}

// Write replaces what the headers held: one value each.
func TestWriteReplaces(t *testing.T) {
	h := http.Header{}
	h.Set("RateLimit", "stale")
	h.Add("X-RateLimit-Limit", "stale")
	h.Add("X-RateLimit-Limit", "stale too")
	ratelimitheader.Write(h, &ratelimitheader.Decision{Allowed: true, Scope: "inline", Limit: 5, Window: time.Second, Remaining: 4})
	want := http.Header{
		"X-Ratelimit-Limit":     {"5"},
		"X-Ratelimit-Remaining": {"4"},
		"Ratelimit-Policy":      {`"inline";q=5;w=1`},
		"Ratelimit":             {`"inline";r=4;t=0`},
	}
	if !reflect.DeepEqual(h, want) {
		t.Fatalf("got %v, want %v", h, want)
	}
}

// Values longer than Write's buffer on the stack come out whole.
func TestWriteLong(t *testing.T) {
	long := strings.Repeat("x", 300)
	h := http.Header{}
	ratelimitheader.Write(h, &ratelimitheader.Decision{Scope: long, Limit: 1, Remaining: 0, Reset: time.Second, RetryAfter: time.Second},
		ratelimitheader.Policy{Name: long, Quota: 1}, ratelimitheader.Policy{Name: "global", Quota: 2, Window: time.Minute})
	w := want{"1", "0", `"` + long + `";q=1, "global";q=2;w=60`, `"` + long + `";r=0;t=1`, "1"}
	if got := headers(h); got != w {
		t.Fatalf("got %+v, want %+v", got, w)
	}
}

// Write allocates the values' string and their backing array, whatever the
// number of headers and policies.
func TestWriteAllocations(t *testing.T) {
	h := http.Header{}
	d := &ratelimitheader.Decision{Scope: "tier:free", Limit: 10, Window: time.Second, Reset: time.Second, RetryAfter: time.Second}
	pols := []ratelimitheader.Policy{{"tier:free", 10, time.Second}, {"global", 1000, time.Second}}
	if n := testing.AllocsPerRun(100, func() { ratelimitheader.Write(h, d, pols...) }); n != 2 {
		t.Fatalf("Write: %v allocations, want 2", n)
	}
}

func BenchmarkWrite(b *testing.B) {
	d := &ratelimitheader.Decision{Scope: "tier:free", Limit: 10, Window: time.Second, Remaining: 0, Reset: time.Second, RetryAfter: time.Second}
	pols := []ratelimitheader.Policy{{"tier:free", 10, time.Second}, {"global", 1000, time.Second}}
	for _, n := range []int{0, 2} {
		b.Run(fmt.Sprintf("policies=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			h := http.Header{}
			for b.Loop() {
				ratelimitheader.Write(h, d, pols[:n]...)
			}
		})
	}
}

func ExampleWrite() {
	h := http.Header{}
	ratelimitheader.Write(h, &ratelimitheader.Decision{
		Allowed: false, Scope: "tier:free", Limit: 10, Window: time.Minute,
		Remaining: 0, Reset: 6 * time.Second, RetryAfter: 1500 * time.Millisecond,
	})
	for _, k := range []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "RateLimit-Policy", "RateLimit", "Retry-After"} {
		fmt.Printf("%s: %s\n", k, h.Get(k))
	}
	// Output:
	// X-RateLimit-Limit: 10
	// X-RateLimit-Remaining: 0
	// RateLimit-Policy: "tier:free";q=10;w=60
	// RateLimit: "tier:free";r=0;t=6
	// Retry-After: 2
}
