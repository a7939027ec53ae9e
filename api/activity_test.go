package api

import (
	"context"
	"testing"
	"time"

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
		{{Decision: no, Owner: "node-2"}, {Decision: ok, Owner: "node-1"}},                        // two peeks
		{{Decision: ok, Owner: "node-2", Reservation: "r1.x.y"}, {Decision: no, Owner: "node-1"}}, // two reserves
	}}
	a, err := New(Config{Checker: c, Self: "node-1"})
	if err != nil {
		t.Fatal(err)
	}
	l := bucket.MustLimit(bucket.TokenBucket, 10, 1e9, 0)
	for step, n := range []int{1, 2, 2, 1, 2, 2} {
		checks := make([]forward.Check, n)
		for i := range checks {
			checks[i] = forward.Check{Key: "k", Limit: l, Cost: 1, Peek: step == 4}
			if step == 5 {
				checks[i].Reserve = time.Minute
			}
		}
		if err := a.check(context.Background(), "http", checks, make([]forward.Result, n)); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
	}
	// 7 checks decided (not the skipped one, nor the two peeks); refused:
	// node-2's, the degraded one and the refused reserve; forwarded:
	// node-2, node-3, node-2 and the reserve node-2 admitted; degraded: 2;
	// one reserve admitted with a reservation.
	want := Activity{Checks: 7, Refused: 3, Forwarded: 4, Degraded: 2, Peeks: 2, Reservations: 1}
	if got := a.Activity(); got != want {
		t.Fatalf("Activity() = %+v, want %+v", got, want)
	}
}
