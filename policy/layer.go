package policy

import (
	"fmt"
	"strings"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/internal/route"
)

// parseLayer builds the layer named scope from its YAML y, within the
// policy py.
func parseLayer(scope string, y limitYAML, py policyYAML) (*Layer, error) {
	spec := bucket.LimitSpec{Algorithm: y.Algorithm, Limit: int64(y.Limit), Per: y.Per, Burst: int64(y.Burst),
		FailureMode: y.FailureMode, Lease: y.Lease, Replication: y.Replication,
		Calendar: y.Calendar, Timezone: y.Timezone, WeekStart: y.WeekStart}
	set, err := spec.Parse("")
	if err != nil {
		return nil, err
	}
	by := KeyBy(y.Key)
	switch by {
	case "":
		by = ByIdentity
		if scope == "global" {
			// A ceiling for the whole policy: one bucket, however many
			// identities a client rotates through.
			by = ByAll
		}
	case ByIdentity, ByIP, ByAll:
	case ByIPRoute, ByIdentityRoute:
		if !strings.HasPrefix(scope, "route:") {
			return nil, fmt.Errorf("key: %s is for route limits, where it means one bucket per caller for the route's pattern", by)
		}
	default:
		return nil, fmt.Errorf("key: want identity, ip, ip+route, identity+route or all, got %q", y.Key)
	}
	l := &Layer{Scope: scope, Limit: set.Limit, FailureMode: set.FailureMode, KeyBy: by, DryRun: py.DryRun, Prelimit: py.Prelimit, Lease: set.Lease, Sync: set.Sync}
	if y.DryRun != nil {
		l.DryRun = *y.DryRun
	}
	if y.Prelimit != nil {
		if err := bucket.CheckPrelimit(*y.Prelimit); err != nil {
			return nil, err
		}
		l.Prelimit = *y.Prelimit
	}
	if err := parseConcurrency(y, l); err != nil {
		return nil, err
	}
	if y.Adaptive != nil {
		if l.Adaptive, err = parseAdaptive(*y.Adaptive, l); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// checkLabel accepts an empty version label or a short one of name
// characters, so that it is safe in metric labels and logs.
func checkLabel(s string) error {
	if s == "" {
		return nil
	}
	return checkName(s)
}

func checkName(s string) error {
	if s == "" || len(s) > 64 {
		return fmt.Errorf("names are 1 to 64 characters, got %q", s)
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("%q: names use letters, digits, '-', '_' and '.'", s)
		}
	}
	return nil
}

// routeNormalised reports whether a route pattern's path (before its '*',
// when prefix) is what requests normalise to: the path itself, or for a
// prefix ending in '/' that path without its slash.
func routeNormalised(base string, prefix bool) bool {
	if strings.ContainsAny(base, "?#") {
		return false
	}
	if prefix && base != "/" {
		return route.Normalize(base) == strings.TrimSuffix(base, "/")
	}
	return route.Normalize(base) == base
}

// normalizeRoute is route.Normalize, named so that a variable called
// route does not hide it.
func normalizeRoute(p string) string { return route.Normalize(p) }
