package bucket

// Property tests of calendar periods over random instants from 1970 to
// 2100, random units and week starts, in zones with DST gaps and overlaps
// at odd times and of odd sizes.

import (
	"testing"
	"time"

	"pgregory.net/rapid"
)

// calPropZones have gaps and overlaps at midnight (Santiago, Havana,
// St_Johns before 2011, Sao_Paulo), 30-minute DST (Lord_Howe), quarter-hour
// offsets (Chatham), Ramadan DST (Casablanca), abolished DST (Tehran) and a
// skipped day (Apia, 30 December 2011).
var calPropZones = []string{
	"Europe/Berlin", "America/Santiago", "America/Havana", "Australia/Lord_Howe",
	"Asia/Kolkata", "Pacific/Chatham", "America/St_Johns", "Africa/Casablanca",
	"Asia/Tehran", "America/Sao_Paulo", "Pacific/Apia", "Europe/London",
	"America/New_York", "Australia/Sydney", "UTC", "America/Asuncion",
}

const (
	calPropFrom = 0                  // 1970-01-01T00:00:00Z
	calPropTo   = 4102444800*1e9 - 1 // 2099-12-31T23:59:59.999999999Z
)

type calPropDraw struct {
	zone string
	cal  Calendar
	t    int64
}

func drawCalendar(t *rapid.T) calPropDraw {
	zone := rapid.SampledFrom(calPropZones).Draw(t, "zone")
	loc, err := LoadZone(zone)
	if err != nil {
		t.Fatalf("LoadZone(%q): %v", zone, err)
	}
	unit := CalendarUnit(rapid.IntRange(int(Day), int(Year)).Draw(t, "unit"))
	week := time.Weekday(rapid.IntRange(0, 6).Draw(t, "weekStart"))
	// rapid favours small numbers; multiplying by an odd constant (mod the
	// span) spreads them over the whole 130 years.
	raw := rapid.Uint64().Draw(t, "raw")
	at := calPropFrom + int64((raw*0x9E3779B97F4A7C15)%uint64(calPropTo-calPropFrom+1))
	return calPropDraw{zone, Calendar{Unit: unit, Loc: loc, WeekStart: week}, at}
}

func calFmt(ns int64, loc *time.Location) string {
	return time.Unix(0, ns).In(loc).Format("2006-01-02T15:04:05.999999999 -07:00 Mon")
}

// Exactly one period holds each instant, and periods tile time.
func TestCalendarPeriodProperties(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		d := drawCalendar(rt)
		c, at, loc := d.cal, d.t, d.cal.Loc
		start, next := c.Period(at)
		if !(start <= at && at < next) {
			rt.Fatalf("%s %s: Period(%s) = %s .. %s does not hold it", d.zone, c.Unit, calFmt(at, loc), calFmt(start, loc), calFmt(next, loc))
		}
		for _, inside := range []int64{start, next - 1} {
			if s, n := c.Period(inside); s != start || n != next {
				rt.Fatalf("%s %s: Period(%s) = %s .. %s, but Period(%s) = %s .. %s", d.zone, c.Unit,
					calFmt(at, loc), calFmt(start, loc), calFmt(next, loc), calFmt(inside, loc), calFmt(s, loc), calFmt(n, loc))
			}
		}
		if s, n := c.Period(next); s != next || n <= next {
			rt.Fatalf("%s %s: period %s .. %s is followed by %s .. %s", d.zone, c.Unit,
				calFmt(start, loc), calFmt(next, loc), calFmt(s, loc), calFmt(n, loc))
		}
		if s, n := c.Period(start - 1); n != start || s >= start {
			rt.Fatalf("%s %s: period %s .. %s is preceded by %s .. %s", d.zone, c.Unit,
				calFmt(start, loc), calFmt(next, loc), calFmt(s, loc), calFmt(n, loc))
		}
		for _, edge := range []int64{start, next} {
			if !calStartsPeriod(c, edge) {
				rt.Fatalf("%s %s week start %s: %s does not begin a period's first day (period %s .. %s)", d.zone, c.Unit, c.WeekStart,
					calFmt(edge, loc), calFmt(start, loc), calFmt(next, loc))
			}
		}
	})
}

// calStartsPeriod reports whether the instant b is where a period of c
// begins: local midnight of a first day (any day, the week start, the 1st,
// 1 January), or, where the zone skipped that midnight, the transition that
// skipped it: the wall clock just before b reads earlier than that midnight
// and the wall clock at b reads it or later.
func calStartsPeriod(c Calendar, b int64) bool {
	// Wall clocks read as UTC, so they compare as local readings.
	wall := func(ns int64) time.Time {
		lt := time.Unix(0, ns).In(c.Loc)
		y, m, d := lt.Date()
		return time.Date(y, m, d, lt.Hour(), lt.Minute(), lt.Second(), lt.Nanosecond(), time.UTC)
	}
	w0, w1 := wall(b-1), wall(b)
	y, m, d := w0.Date()
	for day := time.Date(y, m, d, 0, 0, 0, 0, time.UTC); !day.After(w1); day = day.AddDate(0, 0, 1) {
		if !day.After(w0) {
			continue
		}
		switch c.Unit {
		case Day:
			return true
		case Week:
			if day.Weekday() == c.WeekStart {
				return true
			}
		case Month:
			if day.Day() == 1 {
				return true
			}
		case Year:
			if day.YearDay() == 1 {
				return true
			}
		}
	}
	return false
}

// A period's length stays within its unit's bounds, DST shifts of up to
// 2 h included. Apia is left out: it skipped 30 December 2011, so that
// week, month and year were a day short (see
// TestCalendarPeriodSamoaSkippedDay).
func TestCalendarPeriodLength(t *testing.T) {
	const h, day = int64(time.Hour), 24 * int64(time.Hour)
	bounds := map[CalendarUnit][2]int64{
		Day:   {22 * h, 26 * h},
		Week:  {7*day - 2*h, 7*day + 2*h},
		Month: {28*day - 2*h, 31*day + 2*h},
		Year:  {365*day - 2*h, 366*day + 2*h},
	}
	rapid.Check(t, func(rt *rapid.T) {
		d := drawCalendar(rt)
		if d.zone == "Pacific/Apia" {
			rt.Skip("Apia skipped a day in 2011")
		}
		start, next := d.cal.Period(d.t)
		b := bounds[d.cal.Unit]
		if l := next - start; l < b[0] || l > b[1] {
			rt.Fatalf("%s %s: period %s .. %s lasts %v, want %v .. %v", d.zone, d.cal.Unit,
				calFmt(start, d.cal.Loc), calFmt(next, d.cal.Loc), time.Duration(l), time.Duration(b[0]), time.Duration(b[1]))
		}
	})
}

// Periods near DST transitions: instants drawn within two days of each
// of a zone's transitions, where random instants over 130 years rarely
// land.
func TestCalendarPeriodNearTransitions(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		d := drawCalendar(rt)
		// The first transition after the drawn instant, then an instant
		// within 48 h either side of it.
		_, end := time.Unix(0, d.t).In(d.cal.Loc).ZoneBounds()
		if end.IsZero() {
			rt.Skip("no transition after the instant")
		}
		at := end.UnixNano() + rapid.Int64Range(-2*24*int64(time.Hour), 2*24*int64(time.Hour)).Draw(rt, "offset")
		c, loc := d.cal, d.cal.Loc
		start, next := c.Period(at)
		if !(start <= at && at < next) {
			rt.Fatalf("%s %s: Period(%s) = %s .. %s does not hold it", d.zone, c.Unit, calFmt(at, loc), calFmt(start, loc), calFmt(next, loc))
		}
		for _, inside := range []int64{start, next - 1} {
			if s, n := c.Period(inside); s != start || n != next {
				rt.Fatalf("%s %s: Period(%s) = %s .. %s, but Period(%s) = %s .. %s", d.zone, c.Unit,
					calFmt(at, loc), calFmt(start, loc), calFmt(next, loc), calFmt(inside, loc), calFmt(s, loc), calFmt(n, loc))
			}
		}
		if s, _ := c.Period(next); s != next {
			rt.Fatalf("%s %s: period %s .. %s is followed by one starting %s", d.zone, c.Unit, calFmt(start, loc), calFmt(next, loc), calFmt(s, loc))
		}
		for _, edge := range []int64{start, next} {
			if !calStartsPeriod(c, edge) {
				rt.Fatalf("%s %s week start %s: %s does not begin a period's first day", d.zone, c.Unit, c.WeekStart, calFmt(edge, loc))
			}
		}
	})
}

func BenchmarkCalendarPeriod(b *testing.B) {
	c := Calendar{Unit: Month, Loc: calZone(b, "Europe/Berlin")}
	at := calInstant(b, "2025-03-15T12:00:00Z")
	var sink int64
	for i := 0; b.Loop(); i++ {
		s, n := c.Period(at + int64(i%1000)*int64(time.Hour))
		sink += s ^ n
	}
	_ = sink
}
