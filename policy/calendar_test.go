package policy

import (
	"strings"
	"testing"

	"github.com/ringlimit/ringlimit/bucket"
)

// TestCalendarLayers: a tier of 10,000 a month in Berlin and a global
// 500 a week from Sunday in New York parse as calendar windows; a layer
// with both per and calendar is refused naming the line and the field.
func TestCalendarLayers(t *testing.T) {
	set := parseOK(t, "calendar", []byte(`
version: cal
policies:
  saas:
    default_tier: pro
    tiers:
      pro: { limit: 10000, calendar: month, timezone: Europe/Berlin }
    global: { limit: 500, calendar: week, timezone: America/New_York, week_start: sunday }
`))
	p := set.Policies["saas"]
	for _, c := range []struct {
		l    *Layer
		spec string
	}{{p.Tiers["pro"], "fw:10000:m@Europe/Berlin"}, {p.Global, "fw:500:w0@America/New_York"}} {
		if c.l.Limit.Spec() != c.spec || c.l.Limit.Calendar().Unit == bucket.NoCalendar {
			t.Errorf("layer %s: %v (Spec %s), want %s", c.l.Scope, c.l.Limit, c.l.Limit.Spec(), c.spec)
		}
	}
	_, err := Parse([]byte(`
version: cal
policies:
  saas:
    default_tier: pro
    tiers:
      pro: { limit: 10000, per: 720h, calendar: month }
`), "bad.yaml")
	if err == nil || !strings.Contains(err.Error(), "per: give either per or calendar, not both") {
		t.Fatalf("per and calendar: %v", err)
	}
}
