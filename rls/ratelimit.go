package rls

import (
	"errors"
	"fmt"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.yaml.in/yaml/v3"

	"github.com/ringlimit/ringlimit/bucket"
)

// rateLimit reads a descriptor's rate_limit into the Rule it matches.
// With the descriptor's calendar_timezone (tzPair, not nil), a unit of
// day, week, month or year is that zone's calendar period (a fixed
// window from local midnight; weeks from Monday) rather than a length.
func (p *parser) rateLimit(kv pair, fullKey string, shadow, detailed bool, tzPair *pair, tz string) (*Rule, error) {
	pairs, err := p.mapping(kv.v, "rate_limit")
	if err != nil {
		return nil, err
	}
	r := &Rule{FullKey: fullKey, Shadow: shadow, DetailedMetric: detailed}
	unitNode, countNode, algNode := kv.v, kv.v, kv.v
	var unit, alg string
	var replaces []*yaml.Node
	for _, kv := range pairs {
		switch kv.k.Value {
		case "unit":
			unitNode = kv.v
			unit, err = p.str(kv)
		case "requests_per_unit":
			countNode = kv.v
			r.RequestsPerUnit, err = p.uint32Field(kv)
		case "unlimited":
			r.Unlimited, err = p.boolean(kv)
		case "name":
			r.Name, err = p.str(kv)
		case "replaces":
			replaces, err = p.sequence(kv)
		case "algorithm":
			algNode = kv.v
			alg, err = p.str(kv)
		default:
			err = p.misplaced(kv)
		}
		if err != nil {
			return nil, err
		}
	}
	u, known := rlsv3.RateLimitResponse_RateLimit_Unit_value[strings.ToUpper(unit)]
	r.Unit = rlsv3.RateLimitResponse_RateLimit_Unit(u)
	valid := known && r.Unit != rlsv3.RateLimitResponse_RateLimit_UNKNOWN
	switch {
	case r.Unlimited && valid:
		return nil, p.errorf(unitNode, "should not specify rate limit unit when unlimited")
	case !r.Unlimited && !valid:
		return nil, p.errorf(unitNode, "invalid rate limit unit %q", unit)
	}
	for _, item := range replaces {
		fields, err := p.mapping(item, "a replaces entry")
		if err != nil {
			return nil, err
		}
		var name string
		for _, f := range fields {
			if f.k.Value != "name" {
				err = p.misplaced(f)
			} else {
				name, err = p.str(f)
			}
			if err != nil {
				return nil, err
			}
		}
		switch {
		case name == "":
			return nil, p.errorf(item, "should not have an empty replaces entry")
		case name == r.Name:
			return nil, p.errorf(item, "replaces should not contain name of same descriptor")
		}
		r.Replaces = append(r.Replaces, name)
	}
	if alg == "" {
		alg = bucket.FixedWindow.String() // envoyproxy/ratelimit's own algorithm
	}
	var tzNode *yaml.Node
	if tzPair != nil {
		tzNode = tzPair.v
		switch r.Unit {
		case rlsv3.RateLimitResponse_RateLimit_DAY, rlsv3.RateLimitResponse_RateLimit_WEEK,
			rlsv3.RateLimitResponse_RateLimit_MONTH, rlsv3.RateLimitResponse_RateLimit_YEAR:
		default:
			return nil, p.errorf(tzPair.k, "calendar_timezone needs a rate_limit unit of day, week, month or year, not %q", unit)
		}
	}
	if !r.Unlimited && r.RequestsPerUnit > 0 {
		spec := bucket.LimitSpec{Algorithm: alg, Limit: int64(r.RequestsPerUnit), PerDuration: UnitDuration(r.Unit)}
		if tzPair != nil {
			spec.PerDuration, spec.Calendar, spec.Timezone = 0, strings.ToLower(r.Unit.String()), tz
		}
		set, err := spec.Parse("")
		if err != nil {
			return nil, p.specError(err, map[string]*yaml.Node{"algorithm": algNode, "per": unitNode, "limit": countNode, "burst": countNode,
				"calendar": algNode, "timezone": tzNode})
		}
		r.Limit = set.Limit
	} else if _, err := bucket.ParseAlgorithm(alg); err != nil {
		// Nothing to limit, but the algorithm is still checked.
		return nil, p.specError(err, map[string]*yaml.Node{"algorithm": algNode})
	}
	return r, nil
}

// specError is err, an error of bucket.LimitSpec for a rate_limit entry, at the
// line of the node that holds its field and under the field's name in the
// file.
func (p *parser) specError(err error, nodes map[string]*yaml.Node) error {
	var fe *bucket.FieldError
	if !errors.As(err, &fe) || nodes[fe.Field] == nil {
		return fmt.Errorf("rls: %s: %w", p.file, err)
	}
	e := *fe
	e.Path = rateLimitField(fe.Field)
	return fmt.Errorf("rls: %s:%d: %w", p.file, nodes[fe.Field].Line, &e)
}

// rateLimitField is the name a rate_limit entry gives the field of a
// bucket.LimitSpec named field.
func rateLimitField(field string) string {
	switch field {
	case "per":
		return "unit"
	case "limit", "burst":
		return "requests_per_unit" // the burst is the count
	case "timezone":
		return "calendar_timezone"
	case "calendar":
		return "algorithm" // a calendar window is a fixed window
	}
	return field
}

// UnitDuration is a unit's length, as envoyproxy/ratelimit counts it (a
// month is 30 days, a year 365); 0 for UNKNOWN and unknown values.
func UnitDuration(u rlsv3.RateLimitResponse_RateLimit_Unit) time.Duration {
	const day = 24 * time.Hour
	switch u {
	case rlsv3.RateLimitResponse_RateLimit_SECOND:
		return time.Second
	case rlsv3.RateLimitResponse_RateLimit_MINUTE:
		return time.Minute
	case rlsv3.RateLimitResponse_RateLimit_HOUR:
		return time.Hour
	case rlsv3.RateLimitResponse_RateLimit_DAY:
		return day
	case rlsv3.RateLimitResponse_RateLimit_WEEK:
		return 7 * day
	case rlsv3.RateLimitResponse_RateLimit_MONTH:
		return 30 * day
	case rlsv3.RateLimitResponse_RateLimit_YEAR:
		return 365 * day
	}
	return 0
}
