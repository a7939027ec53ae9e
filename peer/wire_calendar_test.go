package peer

import (
	"testing"

	"github.com/ringlimit/ringlimit/bucket"
)

// A calendar window crosses the wire whole: unit, first weekday and zone
// come back as the same Limit (==); a calendar on another algorithm, an
// unknown unit or weekday, or an unknown zone is refused.
func TestWireCalendarLimit(t *testing.T) {
	for _, sp := range []bucket.LimitSpec{
		{Limit: 10000, Calendar: "month", Timezone: "Europe/Berlin"},
		{Limit: 7, Calendar: "week", Timezone: "America/Santiago", WeekStart: "sunday"},
		{Limit: 500, Calendar: "day"},
	} {
		set, err := sp.Parse("limit")
		if err != nil {
			t.Fatal(err)
		}
		w := toWireLimit(&set.Limit)
		var back wireLimit
		if err := back.parse(w.appendTo(nil)); err != nil {
			t.Fatal(err)
		}
		got, err := back.toLimit()
		if err != nil || got != set.Limit {
			t.Fatalf("%v came back as %v, %v", set.Limit, got, err)
		}
		if p, err := limitFromProto(limitToProto(&set.Limit)); err != nil || p != set.Limit {
			t.Fatalf("%v through the generated message: %v, %v", set.Limit, p, err)
		}
	}
	for _, w := range []wireLimit{
		{alg: uint32(bucket.TokenBucket), limit: 5, perNs: 1e9, cal: uint32(bucket.Day)},
		{alg: uint32(bucket.FixedWindow), limit: 5, cal: 9},
		{alg: uint32(bucket.FixedWindow), limit: 5, cal: uint32(bucket.Week), week: 7},
		{alg: uint32(bucket.FixedWindow), limit: 5, cal: uint32(bucket.Day), zone: "Mars/Olympus"},
		{alg: uint32(bucket.FixedWindow), limit: 5, cal: uint32(bucket.Day), zone: "Local"},
	} {
		if l, err := w.toLimit(); err == nil {
			t.Errorf("%+v read as %v, want refused", w, l)
		}
	}
}
