package rls

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
)

// TestCalendarTimezone: a descriptor's calendar_timezone makes its
// rate_limit's unit (day, week, month, year; any case) that zone's
// calendar period, a fixed window; without it a month stays 30 days of
// 720 h, as in envoyproxy/ratelimit.
func TestCalendarTimezone(t *testing.T) {
	c, err := parseOne(`
domain: saas
descriptors:
  - key: plan
    value: pro
    calendar_timezone: Europe/Berlin
    rate_limit: {unit: month, requests_per_unit: 10000}
  - key: plan
    value: daily
    calendar_timezone: America/Santiago
    rate_limit: {unit: DAY, requests_per_unit: 500}
  - key: plan
    value: weekly
    calendar_timezone: UTC
    rate_limit: {unit: week, requests_per_unit: 70}
  - key: plan
    value: envoy
    rate_limit: {unit: month, requests_per_unit: 10000}
`)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		value string
		cal   bucket.CalendarUnit
		zone  string
		spec  string
	}{
		{"pro", bucket.Month, "Europe/Berlin", "fw:10000:m@Europe/Berlin"},
		{"daily", bucket.Day, "America/Santiago", "fw:500:d@America/Santiago"},
		{"weekly", bucket.Week, "UTC", "fw:70:w1@UTC"},
		{"envoy", bucket.NoCalendar, "UTC", "fw:10000:720h0m0s:10000"},
	} {
		r, ok := c.Match("saas", desc("plan", tt.value))
		if !ok {
			t.Fatalf("plan %s: no rule", tt.value)
		}
		cal := r.Limit.Calendar()
		if cal.Unit != tt.cal || cal.Zone() != tt.zone || r.Limit.Spec() != tt.spec || r.Limit.Algorithm() != bucket.FixedWindow {
			t.Errorf("plan %s: %v (calendar %v in %s, Spec %s); want %v in %s, %s", tt.value, r.Limit, cal.Unit, cal.Zone(), r.Limit.Spec(), tt.cal, tt.zone, tt.spec)
		}
	}
	r, _ := c.Match("saas", desc("plan", "pro"))
	if got := r.Limit.Per(); got < 31*24*time.Hour {
		t.Errorf("a calendar month's Per (the longest month) is %v", got)
	}
}

func TestCalendarTimezoneErrors(t *testing.T) {
	for _, tt := range []struct{ name, src, want string }{
		{"a unit shorter than a day", `
domain: d
descriptors:
  - key: a
    calendar_timezone: Europe/Berlin
    rate_limit: {unit: hour, requests_per_unit: 5}
`, `rls: f.yaml:4: calendar_timezone needs a rate_limit unit of day, week, month or year, not "hour"`},
		{"an unknown zone", `
domain: d
descriptors:
  - key: a
    calendar_timezone: Mars/Olympus
    rate_limit: {unit: day, requests_per_unit: 5}
`, `rls: f.yaml:4: calendar_timezone: "Mars/Olympus" is not an IANA zone (such as Europe/Berlin or America/New_York)`},
		{"the host's zone", `
domain: d
descriptors:
  - key: a
    calendar_timezone: Local
    rate_limit: {unit: day, requests_per_unit: 5}
`, `rls: f.yaml:4: calendar_timezone: "Local" depends on the host; name an IANA zone such as Europe/Berlin`},
		{"another algorithm", `
domain: d
descriptors:
  - key: a
    calendar_timezone: UTC
    rate_limit: {unit: day, requests_per_unit: 5, algorithm: token_bucket}
`, `rls: f.yaml:5: algorithm: a calendar window is a fixed_window, not token_bucket`},
		{"no rate_limit", `
domain: d
descriptors:
  - key: a
    calendar_timezone: UTC
`, `rls: f.yaml:4: calendar_timezone aligns the descriptor's rate_limit to a calendar, and it has none`},
	} {
		if _, err := parseOne(tt.src); err == nil || err.Error() != tt.want {
			t.Errorf("%s: %v\nwant %s", tt.name, err, tt.want)
		}
	}
}
