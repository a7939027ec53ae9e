package policy

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/internal/route"
)

// parseLayer builds the layer named scope from its YAML y, within the
// policy py.
func parseLayer(scope string, y limitYAML, py policyYAML) (*Layer, error) {
	alg, err := bucket.ParseAlgorithm(y.Algorithm)
	if err != nil {
		return nil, fmt.Errorf("algorithm: %w", err)
	}
	if y.Limit <= 0 {
		return nil, fmt.Errorf("limit: must be at least 1, got %d", y.Limit)
	}
	if y.Burst < 0 {
		return nil, fmt.Errorf("burst: must not be negative, got %d", y.Burst)
	}
	per, err := time.ParseDuration(y.Per)
	if err != nil || per <= 0 {
		return nil, fmt.Errorf("per: must be a positive Go duration such as 1s or 1m, got %q", y.Per)
	}
	lim, err := bucket.NewLimit(alg, int64(y.Limit), per, int64(y.Burst))
	if err != nil {
		return nil, fmt.Errorf("limit: %w", err)
	}
	mode, err := bucket.ParseFailureMode(y.FailureMode)
	if err != nil {
		return nil, fmt.Errorf("failure_mode: want local, fail_open or fail_closed, got %q", y.FailureMode)
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
	if y.Lease && alg != bucket.TokenBucket {
		return nil, fmt.Errorf("lease: only a token_bucket can be leased, not %v", alg)
	}
	var sync bool
	switch y.Replication {
	case "", "async":
	case "sync":
		if y.Lease {
			return nil, errors.New("replication: sync cannot be leased (an entry node admits from a lease before the owner's replica has it)")
		}
		sync = true
	default:
		return nil, fmt.Errorf("replication: want async or sync, got %q", y.Replication)
	}
	l := &Layer{Scope: scope, Limit: lim, FailureMode: mode, KeyBy: by, DryRun: py.DryRun, Prelimit: py.Prelimit, Lease: y.Lease, Sync: sync}
	if y.DryRun != nil {
		l.DryRun = *y.DryRun
	}
	if y.Prelimit != nil {
		if err := bucket.CheckPrelimit(*y.Prelimit); err != nil {
			return nil, err
		}
		l.Prelimit = *y.Prelimit
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
