package api

import (
	"context"
	"testing"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/forward"
)

// scripted answers each batch with its next results.
type scripted struct{ batches [][]forward.Result }

func (s *scripted) Check(_ context.Context, checks []forward.Check, out []forward.Result) error {
	copy(out, s.batches[0])
	s.batches = s.batches[1:]
	return nil
}

func TestActivityCounts(t *testing.T) {
	ok := bucket.Decision{Allowed: true}
	no := bucket.Decision{}
	c := &scripted{batches: [][]forward.Result{
		{{Decision: ok, Owner: "node-1"}},
		{{Decision: no, Owner: "node-2"}, {Decision: ok, Owner: "node-3"}},
		{{Decision: no, Owner: "node-1", Degraded: true}, {Owner: "node-1", Skipped: true}},
		{{Decision: ok, Owner: "node-2", Degraded: true}},
	}}
	a, err := New(Config{Checker: c, Self: "node-1"})
	if err != nil {
		t.Fatal(err)
	}
	l := bucket.MustLimit(bucket.TokenBucket, 10, 1e9, 0)
	for step, n := range []int{1, 2, 2, 1} {
		checks := make([]forward.Check, n)
		for i := range checks {
			checks[i] = forward.Check{Key: "k", Limit: l, Cost: 1}
		}
		if err := a.check(context.Background(), "http", checks, make([]forward.Result, n)); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
	}
	// 5 checks decided (not the skipped one); refused: node-2's and the
	// degraded one; forwarded: node-2, node-3, node-2; degraded: 2.
	want := Activity{Checks: 5, Refused: 2, Forwarded: 3, Degraded: 2}
	if got := a.Activity(); got != want {
		t.Fatalf("Activity() = %+v, want %+v", got, want)
	}
}
