package bucket

// Table tests of calendar windows: each case names an instant and the exact
// UTC instants at which its period starts and the next one starts. The
// expected instants are worked out by hand from the zones' published rules
// (the comments give the local readings) and are written as literals.

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// calInstant parses an RFC 3339 instant into Unix nanoseconds.
func calInstant(t testing.TB, s string) int64 {
	t.Helper()
	at, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("bad instant %q: %v", s, err)
	}
	return at.UnixNano()
}

// calZone loads a zone through LoadZone and fails the test if it cannot.
func calZone(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := LoadZone(name)
	if err != nil {
		t.Fatalf("LoadZone(%q): %v", name, err)
	}
	return loc
}

type calPeriodCase struct {
	name  string
	zone  string
	unit  CalendarUnit
	week  time.Weekday // Week only
	at    string       // the instant asked about
	start string       // expected start of its period
	next  string       // expected start of the next period
}

func runCalPeriodCases(t *testing.T, cases []calPeriodCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := Calendar{Unit: tc.unit, Loc: calZone(t, tc.zone), WeekStart: tc.week}
			at, wantStart, wantNext := calInstant(t, tc.at), calInstant(t, tc.start), calInstant(t, tc.next)
			start, next := c.Period(at)
			if start != wantStart || next != wantNext {
				t.Fatalf("%s %s Period(%s) = %s .. %s, want %s .. %s", tc.zone, tc.unit, tc.at,
					time.Unix(0, start).UTC().Format(time.RFC3339Nano), time.Unix(0, next).UTC().Format(time.RFC3339Nano),
					tc.start, tc.next)
			}
		})
	}
}

func TestCalendarPeriodMonthBerlin(t *testing.T) {
	runCalPeriodCases(t, []calPeriodCase{
		// March 2025 starts at 00:00 CET (+01) and ends at 00:00 CEST (+02) on
		// 1 April: DST begins on 30 March, so the month is 31 days less 1 h.
		{"march", "Europe/Berlin", Month, 0, "2025-03-15T12:00:00Z", "2025-02-28T23:00:00Z", "2025-03-31T22:00:00Z"},
		{"february", "Europe/Berlin", Month, 0, "2025-02-10T08:00:00Z", "2025-01-31T23:00:00Z", "2025-02-28T23:00:00Z"},
		// The boundary instants: 1 April 00:00 CEST is April's first instant,
		// one nanosecond earlier is March's last.
		{"april first instant", "Europe/Berlin", Month, 0, "2025-03-31T22:00:00Z", "2025-03-31T22:00:00Z", "2025-04-30T22:00:00Z"},
		{"march last instant", "Europe/Berlin", Month, 0, "2025-03-31T21:59:59.999999999Z", "2025-02-28T23:00:00Z", "2025-03-31T22:00:00Z"},
		// 1 March 00:00 CET.
		{"march first instant", "Europe/Berlin", Month, 0, "2025-02-28T23:00:00Z", "2025-02-28T23:00:00Z", "2025-03-31T22:00:00Z"},
		// October: 1 Oct 00:00 CEST .. 1 Nov 00:00 CET, DST ends on the 26th.
		{"october", "Europe/Berlin", Month, 0, "2025-10-26T01:30:00Z", "2025-09-30T22:00:00Z", "2025-10-31T23:00:00Z"},
	})
}

func TestCalendarPeriodDayBerlinDST(t *testing.T) {
	runCalPeriodCases(t, []calPeriodCase{
		// 30 March 2025: 02:00 CET jumps to 03:00 CEST, the day lasts 23 h.
		{"spring forward 23h", "Europe/Berlin", Day, 0, "2025-03-30T12:00:00Z", "2025-03-29T23:00:00Z", "2025-03-30T22:00:00Z"},
		{"spring forward in the gap", "Europe/Berlin", Day, 0, "2025-03-30T01:00:00Z", "2025-03-29T23:00:00Z", "2025-03-30T22:00:00Z"},
		// 26 October 2025: 03:00 CEST turns back to 02:00 CET, 25 h.
		{"fall back 25h", "Europe/Berlin", Day, 0, "2025-10-26T12:00:00Z", "2025-10-25T22:00:00Z", "2025-10-26T23:00:00Z"},
		{"fall back second 02:30", "Europe/Berlin", Day, 0, "2025-10-26T01:30:00Z", "2025-10-25T22:00:00Z", "2025-10-26T23:00:00Z"},
		{"ordinary day", "Europe/Berlin", Day, 0, "2025-06-01T21:59:59Z", "2025-05-31T22:00:00Z", "2025-06-01T22:00:00Z"},
	})
}

func TestCalendarPeriodDaySantiago(t *testing.T) {
	runCalPeriodCases(t, []calPeriodCase{
		// 5 September 2026: an ordinary -04 day, 24 h.
		{"before the gap 24h", "America/Santiago", Day, 0, "2026-09-05T18:00:00Z", "2026-09-05T04:00:00Z", "2026-09-06T04:00:00Z"},
		// 6 September 2026: at 04:00Z the clock jumps from 00:00 -04 to
		// 01:00 -03, so midnight never happens: the day starts at the jump
		// and ends at 7 Sep 00:00 -03 = 03:00Z, 23 h.
		{"midnight skipped", "America/Santiago", Day, 0, "2026-09-06T12:00:00Z", "2026-09-06T04:00:00Z", "2026-09-07T03:00:00Z"},
		{"jump instant", "America/Santiago", Day, 0, "2026-09-06T04:00:00Z", "2026-09-06T04:00:00Z", "2026-09-07T03:00:00Z"},
		{"last instant before the jump", "America/Santiago", Day, 0, "2026-09-06T03:59:59.999999999Z", "2026-09-05T04:00:00Z", "2026-09-06T04:00:00Z"},
		// 5 April 2026 (first Sunday on or after the 2nd): at 03:00Z, which
		// would be 00:00 -03 on the 5th, the clock reads 23:00 -04 on the
		// 4th instead (23:59:59.999 -03 is followed by 23:00 -04). So 00:00
		// on the 5th is read once, at 04:00Z, and Saturday 4 April lasts
		// 25 h: 4 Apr 00:00 -03 = 03:00Z .. 5 Apr 00:00 -04 = 04:00Z.
		{"fall back saturday 25h", "America/Santiago", Day, 0, "2026-04-04T12:00:00Z", "2026-04-04T03:00:00Z", "2026-04-05T04:00:00Z"},
		{"fall back repeated 23:30", "America/Santiago", Day, 0, "2026-04-05T03:30:00Z", "2026-04-04T03:00:00Z", "2026-04-05T04:00:00Z"},
		{"fall back sunday 24h", "America/Santiago", Day, 0, "2026-04-05T04:00:00Z", "2026-04-05T04:00:00Z", "2026-04-06T04:00:00Z"},
	})
}

func TestCalendarPeriodMidnightTwice(t *testing.T) {
	runCalPeriodCases(t, []calPeriodCase{
		// St. John's, 29 October 2006: DST ended at 00:01 NDT (-02:30),
		// 02:31Z, turning the clock back to 23:01 NST (-03:30) on the 28th.
		// Midnight of the 29th happens at 02:30Z (NDT) and again at 03:30Z
		// (NST): the day starts at the earlier one and lasts 25 h, to
		// 30 Oct 00:00 NST = 03:30Z.
		{"st johns day before", "America/St_Johns", Day, 0, "2006-10-28T12:00:00Z", "2006-10-28T02:30:00Z", "2006-10-29T02:30:00Z"},
		{"st johns earlier midnight", "America/St_Johns", Day, 0, "2006-10-29T02:30:00Z", "2006-10-29T02:30:00Z", "2006-10-30T03:30:00Z"},
		// 03:00Z reads 28 Oct 23:30 NST, yet it is after the 29th's first
		// midnight: it belongs to the 29th.
		{"st johns date reads the 28th again", "America/St_Johns", Day, 0, "2006-10-29T03:00:00Z", "2006-10-29T02:30:00Z", "2006-10-30T03:30:00Z"},
		{"st johns later midnight", "America/St_Johns", Day, 0, "2006-10-29T03:30:00Z", "2006-10-29T02:30:00Z", "2006-10-30T03:30:00Z"},
		{"st johns last instant of the 28th", "America/St_Johns", Day, 0, "2006-10-29T02:29:59.999999999Z", "2006-10-28T02:30:00Z", "2006-10-29T02:30:00Z"},
		// Havana, 2 November 2025: 01:00 CDT (-04) turns back to 00:00 CST
		// (-05) at 05:00Z. Midnight is read at 04:00Z and at 05:00Z; the
		// day starts at 04:00Z and ends at 3 Nov 00:00 CST = 05:00Z, 25 h.
		{"havana fall back", "America/Havana", Day, 0, "2025-11-02T05:30:00Z", "2025-11-02T04:00:00Z", "2025-11-03T05:00:00Z"},
		{"havana day before", "America/Havana", Day, 0, "2025-11-02T03:59:59Z", "2025-11-01T04:00:00Z", "2025-11-02T04:00:00Z"},
		// Havana, 9 March 2025: at 05:00Z 00:00 CST jumps to 01:00 CDT, the
		// day starts at the jump and lasts 23 h.
		{"havana midnight skipped", "America/Havana", Day, 0, "2025-03-09T12:00:00Z", "2025-03-09T05:00:00Z", "2025-03-10T04:00:00Z"},
	})
}

func TestCalendarPeriodWeeks(t *testing.T) {
	runCalPeriodCases(t, []calPeriodCase{
		// Sunday 30 March 2025 12:00Z in Berlin, the day DST starts.
		// Monday weeks: Mon 24 Mar 00:00 CET .. Mon 31 Mar 00:00 CEST, 167 h.
		{"berlin monday", "Europe/Berlin", Week, time.Monday, "2025-03-30T12:00:00Z", "2025-03-23T23:00:00Z", "2025-03-30T22:00:00Z"},
		// Sunday weeks: Sun 30 Mar 00:00 CET .. Sun 6 Apr 00:00 CEST.
		{"berlin sunday", "Europe/Berlin", Week, time.Sunday, "2025-03-30T12:00:00Z", "2025-03-29T23:00:00Z", "2025-04-05T22:00:00Z"},
		// Saturday weeks: Sat 29 Mar 00:00 CET .. Sat 5 Apr 00:00 CEST.
		{"berlin saturday", "Europe/Berlin", Week, time.Saturday, "2025-03-30T12:00:00Z", "2025-03-28T23:00:00Z", "2025-04-04T22:00:00Z"},
		// Friday 28 Mar 23:59:59 CET is the last second of the Saturday
		// week before.
		{"berlin saturday week before", "Europe/Berlin", Week, time.Saturday, "2025-03-28T22:59:59Z", "2025-03-21T23:00:00Z", "2025-03-28T23:00:00Z"},
		// Mon 31 Mar 00:00 CEST starts a Monday week.
		{"berlin monday boundary", "Europe/Berlin", Week, time.Monday, "2025-03-30T22:00:00Z", "2025-03-30T22:00:00Z", "2025-04-06T22:00:00Z"},
		{"utc monday", "UTC", Week, time.Monday, "2025-03-30T12:00:00Z", "2025-03-24T00:00:00Z", "2025-03-31T00:00:00Z"},
		{"utc sunday", "UTC", Week, time.Sunday, "2025-03-30T12:00:00Z", "2025-03-30T00:00:00Z", "2025-04-06T00:00:00Z"},
		{"utc saturday", "UTC", Week, time.Saturday, "2025-03-30T12:00:00Z", "2025-03-29T00:00:00Z", "2025-04-05T00:00:00Z"},
		{"utc monday boundary", "UTC", Week, time.Monday, "2025-03-31T00:00:00Z", "2025-03-31T00:00:00Z", "2025-04-07T00:00:00Z"},
		// A week across the new year: Mon 30 Dec 2024 .. Mon 6 Jan 2025.
		{"utc monday across new year", "UTC", Week, time.Monday, "2025-01-01T00:00:00Z", "2024-12-30T00:00:00Z", "2025-01-06T00:00:00Z"},
	})
}

func TestCalendarPeriodYears(t *testing.T) {
	runCalPeriodCases(t, []calPeriodCase{
		// 2024 is a leap year: 366 days.
		{"utc 2024 leap", "UTC", Year, 0, "2024-02-29T12:00:00Z", "2024-01-01T00:00:00Z", "2025-01-01T00:00:00Z"},
		{"utc 2025", "UTC", Year, 0, "2025-12-31T23:59:59.999999999Z", "2025-01-01T00:00:00Z", "2026-01-01T00:00:00Z"},
		// 1 Jan 00:00 CET (+01).
		{"berlin 2025", "Europe/Berlin", Year, 0, "2025-07-01T00:00:00Z", "2024-12-31T23:00:00Z", "2025-12-31T23:00:00Z"},
		// 31 Dec 2025 23:30Z is already 2026 in Berlin.
		{"berlin 2026 early", "Europe/Berlin", Year, 0, "2025-12-31T23:30:00Z", "2025-12-31T23:00:00Z", "2026-12-31T23:00:00Z"},
		// 1 Jan 00:00 EST (-05).
		{"new york 2025", "America/New_York", Year, 0, "2025-07-04T16:00:00Z", "2025-01-01T05:00:00Z", "2026-01-01T05:00:00Z"},
		// 1 Jan 00:00 +14.
		{"kiritimati 2025", "Pacific/Kiritimati", Year, 0, "2025-06-01T00:00:00Z", "2024-12-31T10:00:00Z", "2025-12-31T10:00:00Z"},
		// 1 Jan 00:00 +13:45 (Chatham summer time).
		{"chatham 2025", "Pacific/Chatham", Year, 0, "2025-06-01T00:00:00Z", "2024-12-31T10:15:00Z", "2025-12-31T10:15:00Z"},
	})
}

func TestCalendarPeriodMonthLengthsUTC(t *testing.T) {
	runCalPeriodCases(t, []calPeriodCase{
		{"february 2024 29 days", "UTC", Month, 0, "2024-02-29T23:59:59Z", "2024-02-01T00:00:00Z", "2024-03-01T00:00:00Z"},
		{"february 2025 28 days", "UTC", Month, 0, "2025-02-14T00:00:00Z", "2025-02-01T00:00:00Z", "2025-03-01T00:00:00Z"},
		{"april 30 days", "UTC", Month, 0, "2025-04-30T12:00:00Z", "2025-04-01T00:00:00Z", "2025-05-01T00:00:00Z"},
		{"december to january", "UTC", Month, 0, "2025-12-31T23:59:59.999999999Z", "2025-12-01T00:00:00Z", "2026-01-01T00:00:00Z"},
		{"january", "UTC", Month, 0, "2026-01-01T00:00:00Z", "2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z"},
	})
}

// Samoa skipped Friday 30 December 2011: at 10:00Z, Thursday 29 Dec
// 23:59:59 -10 was followed by Saturday 31 Dec 00:00 +14. No period is
// empty: the 29th ends where the 31st begins, and the skipped day has no
// period of its own.
func TestCalendarPeriodSamoaSkippedDay(t *testing.T) {
	runCalPeriodCases(t, []calPeriodCase{
		{"thursday 29th", "Pacific/Apia", Day, 0, "2011-12-30T09:59:59Z", "2011-12-29T10:00:00Z", "2011-12-30T10:00:00Z"},
		{"saturday 31st", "Pacific/Apia", Day, 0, "2011-12-30T10:00:00Z", "2011-12-30T10:00:00Z", "2011-12-31T10:00:00Z"},
		{"sunday 1st", "Pacific/Apia", Day, 0, "2011-12-31T10:00:00Z", "2011-12-31T10:00:00Z", "2012-01-01T10:00:00Z"},
		// Monday weeks: Mon 26 Dec 00:00 -10 .. Mon 2 Jan 00:00 +14: 6 days.
		{"monday week of 6 days", "Pacific/Apia", Week, time.Monday, "2011-12-30T12:00:00Z", "2011-12-26T10:00:00Z", "2012-01-01T10:00:00Z"},
		// Friday weeks: the week of Fri 30 Dec starts at the jump.
		{"friday week starts at the jump", "Pacific/Apia", Week, time.Friday, "2011-12-30T10:00:00Z", "2011-12-30T10:00:00Z", "2012-01-05T10:00:00Z"},
		{"friday week before", "Pacific/Apia", Week, time.Friday, "2011-12-30T09:59:59Z", "2011-12-23T10:00:00Z", "2011-12-30T10:00:00Z"},
		// December 2011 had 30 days; the year 2011 364.
		{"december 30 days", "Pacific/Apia", Month, 0, "2011-12-30T10:00:00Z", "2011-12-01T10:00:00Z", "2011-12-31T10:00:00Z"},
		{"year 364 days", "Pacific/Apia", Year, 0, "2011-06-01T00:00:00Z", "2011-01-01T10:00:00Z", "2011-12-31T10:00:00Z"},
	})
}

func TestParseCalendarUnit(t *testing.T) {
	for s, want := range map[string]CalendarUnit{"day": Day, "week": Week, "month": Month, "year": Year} {
		got, err := ParseCalendarUnit(s)
		if err != nil || got != want {
			t.Errorf("ParseCalendarUnit(%q) = %v, %v; want %v, nil", s, got, err, want)
		}
		if got.String() != s {
			t.Errorf("%v.String() = %q, want %q", got, got.String(), s)
		}
	}
	// Unit names are case-sensitive: only the lower-case spellings are
	// accepted.
	for _, s := range []string{"", "days", "fortnight", "Day", "WEEK", " month", "hour"} {
		got, err := ParseCalendarUnit(s)
		if !errors.Is(err, ErrCalendar) || got != NoCalendar {
			t.Errorf("ParseCalendarUnit(%q) = %v, %v; want NoCalendar and an error wrapping ErrCalendar", s, got, err)
		}
	}
}

func TestParseWeekday(t *testing.T) {
	for s, want := range map[string]time.Weekday{
		"monday": time.Monday, "Sunday": time.Sunday, "SATURDAY": time.Saturday,
		"tuesday": time.Tuesday, "Wednesday": time.Wednesday, "thursDay": time.Thursday, "friday": time.Friday,
	} {
		got, err := ParseWeekday(s)
		if err != nil || got != want {
			t.Errorf("ParseWeekday(%q) = %v, %v; want %v, nil", s, got, err, want)
		}
	}
	for _, s := range []string{"mon", "", "sun", "monday ", "montag", "1"} {
		if _, err := ParseWeekday(s); !errors.Is(err, ErrCalendar) {
			t.Errorf("ParseWeekday(%q) error = %v, want one wrapping ErrCalendar", s, err)
		}
	}
}

func TestLoadZone(t *testing.T) {
	for _, name := range []string{"", "UTC"} {
		loc, err := LoadZone(name)
		if err != nil || loc != time.UTC {
			t.Errorf("LoadZone(%q) = %v, %v; want time.UTC", name, loc, err)
		}
	}
	a, b := calZone(t, "Europe/Berlin"), calZone(t, "Europe/Berlin")
	if a != b {
		t.Errorf("LoadZone(Europe/Berlin) twice gave two locations %p and %p, want one", a, b)
	}
	if a.String() != "Europe/Berlin" {
		t.Errorf("LoadZone(Europe/Berlin).String() = %q", a.String())
	}
	if z := (Calendar{Unit: Day, Loc: a}).Zone(); z != "Europe/Berlin" {
		t.Errorf("Calendar.Zone() = %q, want Europe/Berlin", z)
	}
	if z := (Calendar{Unit: Day}).Zone(); z != "UTC" {
		t.Errorf("Calendar{}.Zone() = %q, want UTC", z)
	}
	for _, name := range []string{"Local", "Mars/Olympus", "../etc/passwd"} {
		loc, err := LoadZone(name)
		if loc != nil || !errors.Is(err, ErrCalendar) {
			t.Errorf("LoadZone(%q) = %v, %v; want nil and an error wrapping ErrCalendar", name, loc, err)
			continue
		}
		if !strings.Contains(err.Error(), name) {
			t.Errorf("LoadZone(%q) error %q does not name the zone", name, err)
		}
	}
}
