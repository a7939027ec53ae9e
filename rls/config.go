package rls

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.yaml.in/yaml/v3"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/internal/route"
)

// File is one configuration file: its name, used in errors and in the
// version, and its contents.
type File struct {
	Name string
	Data []byte
}

// Config is a validated set of domains, ready for Match. It is immutable
// and safe for concurrent use.
type Config struct {
	version  string
	domains  map[string]*node
	names    []string // sorted
	warnings []string
}

// node is one descriptor of the configuration (or a domain's root).
type node struct {
	// children by composite key: key, or key + "_" + value.
	children map[string]*node
	// wildcards are the children whose composite key ends in '*', in the
	// file's order: the first whose prefix fits wins.
	wildcards []wildcard
	// rule is the descriptor's rate_limit; nil when it has none.
	rule *Rule

	// Accepted, checked and recorded; ringlimit does not act on them.
	quotaMode, valueToMetric, shareThreshold bool
}

type wildcard struct {
	prefix string // the composite key without its '*'
	node   *node
}

// Version identifies the files the Config was parsed from: 12 hex digits
// of a SHA-256 of their base names and contents, in order. The same files
// give the same version on every run and every node, whatever the path
// they were read by (relative or absolute, another mount point).
func (c *Config) Version() string { return c.version }

// Domains returns the configured domains, sorted.
func (c *Config) Domains() []string { return slices.Clone(c.names) }

// Warnings lists what the files set that ringlimit accepts and ignores
// (quota_mode, value_to_metric, share_threshold, keys out of place), each
// as "file:line: ...".
func (c *Config) Warnings() []string { return slices.Clone(c.warnings) }

// version hashes the files' base names and contents, each
// length-prefixed.
func version(files []File) string {
	h := sha256.New()
	var n [8]byte
	for _, f := range files {
		for _, b := range [][]byte{[]byte(filepath.Base(f.Name)), f.Data} {
			binary.BigEndian.PutUint64(n[:], uint64(len(b)))
			h.Write(n[:])
			h.Write(b)
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
}

// Parse reads and validates files, each one YAML document for one domain.
// Errors name the file and line; on error nothing is returned.
func Parse(files []File) (*Config, error) {
	c := &Config{version: version(files), domains: map[string]*node{}}
	from := map[string]string{} // domain → the file that defined it
	for _, f := range files {
		p := &parser{file: f.Name}
		domain, at, root, err := p.parseFile(f.Data)
		if err != nil {
			return nil, err
		}
		if first, dup := from[domain]; dup {
			return nil, p.errorf(at, "duplicate domain %q in config file (first in %s)", domain, first)
		}
		from[domain] = f.Name
		c.domains[domain] = root
		c.names = append(c.names, domain)
		c.warnings = append(c.warnings, p.warnings...)
	}
	slices.Sort(c.names)
	return c, nil
}

// parseFile reads one file: its domain, the node that names it (for its
// line) and the tree of its descriptors.
func (p *parser) parseFile(data []byte) (domain string, at *yaml.Node, root *node, err error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return "", nil, nil, fmt.Errorf("rls: %s: %w", p.file, err)
	}
	var more yaml.Node
	switch err := dec.Decode(&more); {
	case err == nil && !isNull(resolve(&more)):
		return "", nil, nil, p.errorf(resolve(&more), "a second YAML document; a file holds one domain")
	case err != nil && !errors.Is(err, io.EOF):
		return "", nil, nil, fmt.Errorf("rls: %s: %w", p.file, err)
	}
	top := resolve(&doc)
	if top.Kind == 0 || isNull(top) {
		// An empty file: no domain.
		top = &yaml.Node{Kind: yaml.MappingNode, Line: max(top.Line, 1)}
	}
	pairs, err := p.mapping(top, "the file")
	if err != nil {
		return "", nil, nil, err
	}
	at, root = top, &node{}
	var descriptors *pair
	for i, kv := range pairs {
		switch kv.k.Value {
		case "domain":
			at = kv.v
			domain, err = p.str(kv)
		case "descriptors":
			descriptors = &pairs[i]
		default:
			err = p.misplaced(kv)
		}
		if err != nil {
			return "", nil, nil, err
		}
	}
	if domain == "" {
		return "", nil, nil, p.errorf(at, "config file cannot have empty domain")
	}
	if descriptors != nil {
		if err := p.descriptors(*descriptors, root, domain+"."); err != nil {
			return "", nil, nil, err
		}
	}
	return domain, at, root, nil
}

// descriptors reads a list of descriptors into parent. prefix is the
// statistics name of parent, with its trailing dot.
func (p *parser) descriptors(kv pair, parent *node, prefix string) error {
	items, err := p.sequence(kv)
	if err != nil {
		return err
	}
	for _, item := range items {
		if err := p.descriptor(resolve(item), parent, prefix); err != nil {
			return err
		}
	}
	return nil
}

func (p *parser) descriptor(item *yaml.Node, parent *node, prefix string) error {
	if err := p.enter(item); err != nil {
		return err
	}
	defer p.leave()
	pairs, err := p.mapping(item, "a descriptor")
	if err != nil {
		return err
	}
	n := &node{}
	keyNode := item
	var key, value string
	var rateLimit, children, calendarTZ *pair
	var shadow, detailed bool
	var tz string
	for i, kv := range pairs {
		switch kv.k.Value {
		case "calendar_timezone":
			calendarTZ = &pairs[i]
			tz, err = p.str(kv)
		case "key":
			keyNode = kv.v
			key, err = p.str(kv)
		case "value":
			value, err = p.str(kv)
		case "rate_limit":
			rateLimit = &pairs[i]
		case "descriptors":
			children = &pairs[i]
		case "shadow_mode":
			shadow, err = p.boolean(kv)
		case "detailed_metric":
			detailed, err = p.boolean(kv)
		case "quota_mode":
			n.quotaMode, err = p.ignored(kv)
		case "value_to_metric":
			n.valueToMetric, err = p.ignored(kv)
		case "share_threshold":
			n.shareThreshold, err = p.ignored(kv)
		default:
			err = p.misplaced(kv)
		}
		if err != nil {
			return err
		}
	}
	if key == "" {
		return p.errorf(keyNode, "descriptor has empty key")
	}
	if isRoute(key, value) && !strings.HasSuffix(value, "*") {
		// Requests' routes are normalised before they are matched.
		if norm := route.Normalize(value); norm != value {
			p.warnf(keyNode, "value %q is a route: it matches requests for %q, its normalised form", value, norm)
			value = norm
		}
	}
	composite := key
	if value != "" {
		composite += "_" + value
	}
	full := prefix + composite
	if _, dup := parent.children[composite]; dup {
		return p.errorf(keyNode, "duplicate descriptor composite key %q", full)
	}
	if calendarTZ != nil && (rateLimit == nil || isNull(rateLimit.v)) {
		return p.errorf(calendarTZ.k, "calendar_timezone aligns the descriptor's rate_limit to a calendar, and it has none")
	}
	if rateLimit != nil && !isNull(rateLimit.v) {
		if n.rule, err = p.rateLimit(*rateLimit, full, shadow, detailed, calendarTZ, tz); err != nil {
			return err
		}
	}
	wild := strings.HasSuffix(composite, "*")
	if n.shareThreshold && !wild {
		return p.errorf(keyNode, "share_threshold can only be used with wildcard values (ending with '*'), but found key %q", composite)
	}
	if parent.children == nil {
		parent.children = map[string]*node{}
	}
	parent.children[composite] = n
	if wild {
		parent.wildcards = append(parent.wildcards, wildcard{prefix: composite[:len(composite)-1], node: n})
	}
	if children != nil {
		return p.descriptors(*children, n, full+".")
	}
	return nil
}

// ignored reads a boolean ringlimit accepts but does not act on.
func (p *parser) ignored(kv pair) (bool, error) {
	b, err := p.boolean(kv)
	if b {
		p.warnf(kv.k, "%s is accepted and ignored by ringlimit", kv.k.Value)
	}
	return b, err
}

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
