package bucket

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	_ "time/tzdata" // zones come with the binary, never from the host or time.Local
)

// Calendar windows: a fixed window whose periods are a zone's local days,
// weeks, months or years instead of lengths cut from the Unix epoch. A
// period starts at local midnight of its first day. Where that midnight
// does not exist (a DST gap), the period starts at the transition, the
// first instant whose local time is past it; where it exists twice (a
// clock turned back), at the earlier instant.

// CalendarUnit is the period of a calendar window.
type CalendarUnit uint8

const (
	// NoCalendar: a window cut from the epoch (Limit's per).
	NoCalendar CalendarUnit = iota
	Day
	Week
	Month
	Year
)

var unitNames = [...]string{NoCalendar: "", Day: "day", Week: "week", Month: "month", Year: "year"}

// String returns "day", "week", "month" or "year" ("" for NoCalendar).
func (u CalendarUnit) String() string {
	if int(u) < len(unitNames) {
		return unitNames[u]
	}
	return fmt.Sprintf("CalendarUnit(%d)", uint8(u))
}

// ErrCalendar is wrapped by the errors of a bad calendar, zone or week
// start.
var ErrCalendar = errors.New("bad calendar")

// ParseCalendarUnit parses "day", "week", "month" or "year".
func ParseCalendarUnit(s string) (CalendarUnit, error) {
	for u, name := range unitNames {
		if u != int(NoCalendar) && s == name {
			return CalendarUnit(u), nil
		}
	}
	return NoCalendar, fmt.Errorf("%w: want day, week, month or year, got %q", ErrCalendar, s)
}

// ParseWeekday parses a week's first day, "monday" … "sunday" (any case).
func ParseWeekday(s string) (time.Weekday, error) {
	for d := time.Sunday; d <= time.Saturday; d++ {
		if strings.EqualFold(s, d.String()) {
			return d, nil
		}
	}
	return 0, fmt.Errorf("%w: week_start: want a day of the week (monday … sunday), got %q", ErrCalendar, s)
}

// zones caches the locations loaded, so that a zone is one *time.Location
// (Limits holding it compare equal) and is read from tzdata once.
var zones sync.Map // name → *time.Location

// LoadZone returns the IANA zone name ("" is UTC) from the tzdata built
// into the binary. "Local" is refused: a limit must mean the same instant
// on every node, whatever the host's zone.
func LoadZone(name string) (*time.Location, error) {
	if name == "" || name == "UTC" {
		return time.UTC, nil
	}
	if loc, ok := zones.Load(name); ok {
		return loc.(*time.Location), nil
	}
	if name == "Local" {
		return nil, fmt.Errorf("%w: timezone: \"Local\" depends on the host; name an IANA zone such as Europe/Berlin", ErrCalendar)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("%w: timezone: %q is not an IANA zone (such as Europe/Berlin or America/New_York)", ErrCalendar, name)
	}
	got, _ := zones.LoadOrStore(strings.Clone(name), loc) // name may alias a reused buffer
	return got.(*time.Location), nil
}

// Calendar is a window's calendar: its unit, zone and (weeks) first day.
// The zero value is NoCalendar. Calendars are comparable: equal ones have
// the same Loc.
type Calendar struct {
	Unit      CalendarUnit
	Loc       *time.Location // nil is UTC
	WeekStart time.Weekday   // Week only
}

// Zone is the calendar's IANA zone name ("UTC" for UTC).
func (c Calendar) Zone() string {
	if c.Loc == nil {
		return "UTC"
	}
	return c.Loc.String()
}

func (c Calendar) loc() *time.Location {
	if c.Loc == nil {
		return time.UTC
	}
	return c.Loc
}

// Period returns the start of the period that holds the instant t (Unix
// nanoseconds) and the start of the next one: start ≤ t < next. A period
// is counted from its boundary, not from the local date: where a clock
// turned back across midnight reads yesterday's date again, the instants
// after the (earlier) midnight belong to today's period.
func (c Calendar) Period(t int64) (start, next int64) {
	loc := c.loc()
	lt := time.Unix(0, t).In(loc)
	y, m, d := lt.Date()
	switch c.Unit {
	case Week:
		d -= (int(lt.Weekday()) - int(c.WeekStart) + 7) % 7
	case Month:
		d = 1
	case Year:
		m, d = time.January, 1
	}
	start = midnight(y, m, d, loc)
	y, m, d = c.step(y, m, d, 1)
	next = midnight(y, m, d, loc)
	for next <= t {
		y, m, d = c.step(y, m, d, 1)
		start, next = next, midnight(y, m, d, loc)
	}
	for start > t {
		y, m, d = c.step(y, m, d, -2)
		start, next = midnight(y, m, d, loc), start
		y, m, d = c.step(y, m, d, 1)
	}
	return start, next
}

// step moves the first day y-m-d of a period n periods on (or back).
func (c Calendar) step(y int, m time.Month, d, n int) (int, time.Month, int) {
	switch c.Unit {
	case Day:
		d += n
	case Week:
		d += 7 * n
	case Month:
		m += time.Month(n)
	default:
		y += n
	}
	// Normalized as time.Date would, so that the loops above compare
	// like with like.
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Date()
}

// midnight returns the instant (Unix nanoseconds) at which local date
// y-m-d (normalized as time.Date does) begins in loc: its midnight; the
// earlier one where midnight happens twice; the transition that skips it
// where it does not happen.
func midnight(y int, m time.Month, d int, loc *time.Location) int64 {
	wall := time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Unix() // the wall clock read as UTC
	// The offsets in force a day either side: a zone changes its offset
	// at most once within two days.
	_, before := time.Unix(wall-86400, 0).In(loc).Zone()
	_, after := time.Unix(wall+86400, 0).In(loc).Zone()
	var found int64
	ok := false
	for _, off := range []int{before, after} {
		at := wall - int64(off)
		if _, o := time.Unix(at, 0).In(loc).Zone(); o == off && (!ok || at < found) {
			found, ok = at, true
		}
	}
	if ok {
		return found * int64(time.Second)
	}
	// Midnight falls in a gap: the period begins when the clock jumps,
	// which is when the zone in force at wall-before begins.
	start, _ := time.Unix(wall-int64(before), 0).In(loc).ZoneBounds()
	return start.UnixNano()
}
