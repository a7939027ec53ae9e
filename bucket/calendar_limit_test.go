package bucket

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/clock"
)

func at(t *testing.T, s string) clock.Instant {
	t.Helper()
	tt, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return clock.Instant(tt.UnixNano())
}

func berlinMonth(t *testing.T, n int64) Limit {
	t.Helper()
	set, err := (&LimitSpec{Limit: n, Calendar: "month", Timezone: "Europe/Berlin"}).Parse("limit")
	if err != nil {
		t.Fatal(err)
	}
	return set.Limit
}

// TestCalendarMonthBoundary: 3 a month in Berlin. Three checks on
// 2025-03-31T21:59:59Z (23:59:59 local, the last second of March) are
// admitted, the 4th refused with retry_after 1s (to 2025-03-31T22:00Z,
// April's midnight); at that instant a check is admitted with 2 left and
// reset_after the whole of April: 720 h (30 days; no DST change).
func TestCalendarMonthBoundary(t *testing.T) {
	l := berlinMonth(t, 3)
	s := newTestStore(t)
	before := at(t, "2025-03-31T21:59:59Z")
	for i := range 3 {
		if d, err := s.Take("k", &l, before, 1); err != nil || !d.Allowed || d.Remaining != int64(2-i) {
			t.Fatalf("check %d: %+v %v", i+1, d, err)
		}
	}
	d, _ := s.Take("k", &l, before, 1)
	if d.Allowed || d.RetryAfter != time.Second || d.ResetAfter != time.Second {
		t.Fatalf("4th check: %+v, want refused with retry_after and reset_after 1s", d)
	}
	d, _ = s.Take("k", &l, at(t, "2025-03-31T22:00:00Z"), 1)
	if !d.Allowed || d.Remaining != 2 || d.ResetAfter != 720*time.Hour {
		t.Fatalf("check at April's midnight: %+v, want admitted, 2 left, reset_after 720h", d)
	}
}

// TestCalendarNeverBack: a key whose window is April (a replica from a
// node whose clock is ahead) is not moved back to March by a check at
// March's last second: it is counted in April, with April's reset.
func TestCalendarNeverBack(t *testing.T) {
	l := berlinMonth(t, 3)
	s := newTestStore(t)
	if _, err := s.Take("k", &l, at(t, "2025-03-31T22:00:01Z"), 2); err != nil {
		t.Fatal(err)
	}
	d, _ := s.Take("k", &l, at(t, "2025-03-31T21:59:59Z"), 1)
	if !d.Allowed || d.Remaining != 0 || d.ResetAfter != 720*time.Hour+time.Second {
		t.Fatalf("check a second before April: %+v, want admitted in April's window (0 left, reset 720h1s)", d)
	}
	if d, _ := s.Take("k", &l, at(t, "2025-03-31T21:59:59Z"), 1); d.Allowed {
		t.Fatalf("4th check in April's window: %+v, want refused", d)
	}
}

// TestCalendarSpec: a calendar window's Spec names its unit, first
// weekday and zone; limits differing only there have distinct Specs and
// fingerprints; equal ones are equal (==) and share a bucket.
func TestCalendarSpec(t *testing.T) {
	parse := func(sp LimitSpec) Limit {
		t.Helper()
		set, err := sp.Parse("limit")
		if err != nil {
			t.Fatal(err)
		}
		return set.Limit
	}
	cases := []struct {
		spec LimitSpec
		want string
		str  string
	}{
		{LimitSpec{Limit: 10000, Calendar: "month", Timezone: "Europe/Berlin"}, "fw:10000:m@Europe/Berlin", "fixed_window 10000/month Europe/Berlin"},
		{LimitSpec{Limit: 500, Calendar: "day"}, "fw:500:d@UTC", "fixed_window 500/day UTC"},
		{LimitSpec{Limit: 500, Calendar: "day", Timezone: "UTC"}, "fw:500:d@UTC", "fixed_window 500/day UTC"},
		{LimitSpec{Limit: 7, Calendar: "week", Timezone: "America/New_York"}, "fw:7:w1@America/New_York", "fixed_window 7/week from Monday America/New_York"},
		{LimitSpec{Limit: 7, Calendar: "week", Timezone: "America/New_York", WeekStart: "sunday"}, "fw:7:w0@America/New_York", "fixed_window 7/week from Sunday America/New_York"},
		{LimitSpec{Limit: 1, Algorithm: "fixed_window", Calendar: "year", Timezone: "Asia/Tokyo"}, "fw:1:y@Asia/Tokyo", "fixed_window 1/year Asia/Tokyo"},
	}
	fps := map[uint64]string{}
	for _, c := range cases {
		l := parse(c.spec)
		if l.Spec() != c.want || l.String() != c.str || l.Algorithm() != FixedWindow {
			t.Errorf("%+v: Spec %q, String %q; want %q, %q", c.spec, l.Spec(), l.String(), c.want, c.str)
		}
		if prev, ok := fps[l.fp]; ok && prev != c.want {
			t.Errorf("%s and %s share a fingerprint", prev, c.want)
		}
		fps[l.fp] = c.want
	}
	if len(fps) != 5 {
		t.Errorf("%d distinct fingerprints, want 5 (UTC named or not is one)", len(fps))
	}
	if a, b := parse(cases[0].spec), parse(cases[0].spec); a != b {
		t.Errorf("one spec parsed twice: %v != %v", a, b)
	}
	month := parse(cases[0].spec)
	if plain := MustLimit(FixedWindow, 10000, 744*time.Hour, 0); plain.Spec() == month.Spec() || plain.fp == month.fp {
		t.Errorf("a 744h window and a Berlin month share %q", plain.Spec())
	}
	long := parse(LimitSpec{Limit: MaxWindowCount, Calendar: "week", Timezone: "America/Argentina/ComodRivadavia"})
	if n := len(InlineKey("k", &long)); n > len(NamespaceInline)+58+2 {
		t.Errorf("the longest calendar Spec makes a %d-byte key prefix: %q", n, long.Spec())
	}
}

// TestCalendarSpecErrors: each bad calendar field is refused naming it.
func TestCalendarSpecErrors(t *testing.T) {
	cases := []struct {
		spec     LimitSpec
		want     string
		sentinel error
	}{
		{LimitSpec{Limit: 5, Timezone: "Europe/Berlin"}, "limit.calendar: required with timezone or week_start: day, week, month or year", ErrCalendar},
		{LimitSpec{Limit: 5, Calendar: "fortnight"}, `limit.calendar: want day, week, month or year, got "fortnight"`, ErrCalendar},
		{LimitSpec{Limit: 5, Calendar: "day", Algorithm: "token_bucket"}, "limit.calendar: a calendar window is a fixed_window, not token_bucket", ErrCalendar},
		{LimitSpec{Limit: 5, Calendar: "day", Algorithm: "concurrency"}, "limit.calendar: a calendar window is a fixed_window, not concurrency", ErrCalendar},
		{LimitSpec{Limit: 5, Calendar: "day", Per: "1h"}, "limit.per: give either per or calendar, not both", ErrLimit},
		{LimitSpec{Limit: 5, Calendar: "day", Timezone: "Local"}, `limit.timezone: "Local" depends on the host; name an IANA zone such as Europe/Berlin`, ErrCalendar},
		{LimitSpec{Limit: 5, Calendar: "day", Timezone: "Mars/Olympus"}, `limit.timezone: "Mars/Olympus" is not an IANA zone (such as Europe/Berlin or America/New_York)`, ErrCalendar},
		{LimitSpec{Limit: 5, Calendar: "month", WeekStart: "sunday"}, "limit.week_start: only a week has a first day, not a month", ErrCalendar},
		{LimitSpec{Limit: 5, Calendar: "week", WeekStart: "sun"}, `limit.week_start: want a day of the week (monday … sunday), got "sun"`, ErrCalendar},
		{LimitSpec{Limit: 0, Calendar: "day"}, "limit.limit: must be at least 1, got 0", ErrLimit},
		{LimitSpec{Limit: 5, Calendar: "day", Lease: true}, "limit.lease: only the token bucket can lease, not fixed_window", ErrLimit},
	}
	for _, c := range cases {
		_, err := c.spec.Parse("limit")
		var fe *FieldError
		if err == nil || err.Error() != c.want || !errors.Is(err, c.sentinel) || !errors.As(err, &fe) || !strings.HasPrefix(c.want, fe.Path+":") {
			t.Errorf("%+v: %v, want %q", c.spec, err, c.want)
		}
	}
}

func newTestStore(t *testing.T) *Store {
	t.Helper()
	s, err := NewStore(StoreConfig{MaxKeys: 1024, Shards: 4})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestMergeWindow: a state counted in the window after the receiver's
// current one (its sender's clock is past a boundary) is kept there, by
// MergeWindow, SetWindow and MergeEachWindow alike: at the receiver's
// March 31 23:59:59 in Berlin, 2 spent in April leave 1 in April (reset
// after 720 h 1 s) and it stays spent after the boundary. A window two
// months ahead is not taken (no sender holds a key in a window of its
// choosing): its spend counts in March. Snapshot.Window names the window.
func TestMergeWindow(t *testing.T) {
	l := berlinMonth(t, 3)
	march := at(t, "2025-03-31T21:59:59Z")
	april := int64(at(t, "2025-03-31T22:00:00Z"))
	may := int64(at(t, "2025-04-30T22:00:00Z"))
	type merge func(s *Store, key string, used, window int64)
	for name, m := range map[string]merge{
		"MergeWindow": func(s *Store, key string, used, window int64) { s.MergeWindow(key, &l, march, used, window) },
		"SetWindow":   func(s *Store, key string, used, window int64) { s.SetWindow(key, &l, march, used, window) },
		"MergeEachWindow": func(s *Store, key string, used, window int64) {
			s.MergeEachWindow(march, 1, func(int) (string, *Limit, int64, int64) { return key, &l, used, window })
		},
	} {
		s := newTestStore(t)
		m(s, "next", 2, april)
		if snap, ok := s.Lookup("next", march); !ok || snap.Used != 2 || snap.Window != april {
			t.Fatalf("%s: %+v %v; want 2 used in April's window", name, snap, ok)
		}
		d, _ := s.Take("next", &l, march, 1)
		if !d.Allowed || d.Remaining != 0 || d.ResetAfter != 720*time.Hour+time.Second {
			t.Fatalf("%s: check in March: %+v; want the last of April's 3", name, d)
		}
		if d, _ := s.Take("next", &l, clock.Instant(april+int64(time.Hour)), 1); d.Allowed {
			t.Fatalf("%s: check in April: %+v; want refused", name, d)
		}
		m(s, "far", 2, may)
		if snap, _ := s.Lookup("far", march); snap.Used != 2 || snap.Window != int64(at(t, "2025-02-28T23:00:00Z")) {
			t.Fatalf("%s: a window two ahead: %+v; want 2 used in March's window", name, snap)
		}
		if d, _ := s.Take("far", &l, clock.Instant(april), 1); !d.Allowed || d.Remaining != 2 {
			t.Fatalf("%s: a window two ahead, checked in April: %+v; want 2 left", name, d)
		}
	}
}
