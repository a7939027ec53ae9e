package api

import (
	"bytes"
	"encoding/json"
	"testing"
)

// The hand-written encoder writes exactly what encoding/json writes.
func TestCheckResponseEncoding(t *testing.T) {
	for i, r := range []CheckResponse{
		{},
		{Allowed: true, Limit: 10, Remaining: 9, ResetAfterMs: 100, Scope: "inline", Owner: "node-1"},
		{Limit: -1, Remaining: 1 << 62, RetryAfterMs: 7, ResetAfterMs: 8, DelayMs: 9, Scope: "route:/a&b<c>", Owner: "nöde \"2\"\\\n",
			Degraded: true, Code: CodeRateLimited, WouldReject: []string{"route:/export/*", "x\ty"}, PolicyVersion: "v1-abc"},
		{Allowed: true, WouldReject: []string{}},
		{Allowed: true, Limit: 5, Remaining: 2, Scope: "inline", Owner: "node-2", Lease: "c1.a\"b", InFlight: 3, ExpiresInMs: 30000},
		{Limit: 5, RetryAfterMs: 1500, Code: CodeRateLimited, InFlight: 5},
	} {
		var want bytes.Buffer
		if err := json.NewEncoder(&want).Encode(&r); err != nil {
			t.Fatal(err)
		}
		if got := appendCheckResponse(nil, &r); string(got) != want.String() {
			t.Errorf("case %d:\n got %s\nwant %s", i, got, want.String())
		}
	}
}
