package policy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/ringlimit/ringlimit/adaptive"
	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/internal/route"
	"github.com/ringlimit/ringlimit/internal/suggest"
)

// MaxFileBytes bounds a policy file.
const MaxFileBytes = 1 << 20

// KeyBy says what a layer's key is derived from.
type KeyBy string

const (
	// ByIdentity keys by API key, else user, else client IP (the default).
	ByIdentity KeyBy = "identity"
	// ByIP keys by client IP: loose on purpose, many people share an address.
	ByIP KeyBy = "ip"
	// ByIPRoute keys by client IP and route: what protects a login endpoint.
	ByIPRoute KeyBy = "ip+route"
	// ByIdentityRoute keys by identity and route.
	ByIdentityRoute KeyBy = "identity+route"
	// ByAll keys every caller into one bucket: a ceiling for the whole
	// policy (the default of the global layer), or for a route.
	ByAll KeyBy = "all"
)

// Layer is one limit that may apply to a request.
type Layer struct {
	// Scope names the layer to a rejected caller: tier:free, route:/reports,
	// global.
	Scope string
	Limit bucket.Limit
	// FailureMode is what to answer when the key's owner cannot be
	// reached, parsed from the file's failure_mode (absent: Local).
	FailureMode bucket.FailureMode
	KeyBy       KeyBy
	DryRun      bool
	// Prelimit, when > 0, enables a local pre-limiter on the entry node at
	// Prelimit × the limit.
	Prelimit float64
	// Lease lets entry nodes admit from short leases of the key's tokens
	// (token bucket only): for hot keys.
	Lease bool
	// Sync is replication: sync: every admitted spend of the layer's keys
	// is acknowledged by the key's successor before the answer, so that a
	// crash of the owner over-admits none of it (forward.Check.Sync).
	Sync bool
	// LeaseTTL and MaxLeaseTTL, for a concurrency layer: how long a lease
	// lives when the request names no TTL (lease_ttl, default 30s), and
	// the most a request may name (max_lease_ttl, default 5m). Zero for
	// the other algorithms.
	LeaseTTL, MaxLeaseTTL time.Duration
	// Adaptive, when not nil, moves the layer's limit from the outcomes
	// and latencies reported to the key's owner (the adaptive block):
	// Limit's count is then only where a key with no controller yet
	// starts, and what a stand-in with no copy of the controller uses.
	// Scope names it in metrics and on the status page.
	Adaptive *adaptive.Spec

	route string // a route layer's pattern, used in +route keys
}

// Route is a per-route override: a cost and/or a limit layer.
type Route struct {
	Match  string // "/reports" (exact) or "/export/*" (prefix)
	prefix bool
	Cost   int64 // 0: the request's cost
	Layer  *Layer
}

// matches reports whether the normalised route matches r. A prefix
// /export/* matches /export too: the normalised spelling of /export/.
func (r *Route) matches(route string) bool {
	if r.prefix {
		base := r.Match[:len(r.Match)-1]
		return strings.HasPrefix(route, base) || len(route)+1 == len(base) && base[len(route)] == '/' && strings.HasPrefix(base, route)
	}
	return route == r.Match
}

// Policy is one named policy of a file.
type Policy struct {
	Name          string
	Tiers         map[string]*Layer
	DefaultTier   string
	AnonymousTier string
	Routes        []Route // most specific first
	Global        *Layer
}

// Set is a whole validated policy file.
type Set struct {
	// Version identifies the content: the file's version label, if any,
	// followed by the first 12 hex digits of its SHA-256. Nodes that load
	// the same file report the same version.
	Version string
	// Source is where the file was read from.
	Source   string
	Policies map[string]*Policy
	// Default is the policy a request that names none uses: "default" if the
	// file has one, else the only policy.
	Default string
}

// The YAML shapes. Unknown fields are errors.
type fileYAML struct {
	Version  string                `yaml:"version"`
	Policies map[string]policyYAML `yaml:"policies"`
}

type policyYAML struct {
	DefaultTier   string               `yaml:"default_tier"`
	AnonymousTier string               `yaml:"anonymous_tier"`
	Tiers         map[string]limitYAML `yaml:"tiers"`
	Routes        []routeYAML          `yaml:"routes"`
	Global        *limitYAML           `yaml:"global"`
	Prelimit      float64              `yaml:"prelimit"`
	DryRun        bool                 `yaml:"dry_run"`
}

// count is an integer field that refuses decimals (2.5 would otherwise
// become 2).
type count int64

func (c *count) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
		return fmt.Errorf("line %d: want a whole number, got %q", n.Line, n.Value)
	}
	var v int64
	if err := n.Decode(&v); err != nil {
		return err
	}
	*c = count(v)
	return nil
}

type limitYAML struct {
	Algorithm   string   `yaml:"algorithm"`
	Limit       count    `yaml:"limit"`
	Per         string   `yaml:"per"`
	Burst       count    `yaml:"burst"`
	FailureMode string   `yaml:"failure_mode"`
	Key         string   `yaml:"key"`
	DryRun      *bool    `yaml:"dry_run"`
	Prelimit    *float64 `yaml:"prelimit"`
	Lease       bool     `yaml:"lease"`
	Replication string   `yaml:"replication"`
	// LeaseTTL and MaxLeaseTTL: concurrency layers only (concurrency.go).
	LeaseTTL    string `yaml:"lease_ttl"`
	MaxLeaseTTL string `yaml:"max_lease_ttl"`
	// Adaptive is the layer's adaptive block (adaptive.go).
	Adaptive *adaptive.YAML `yaml:"adaptive"`
	// Calendar, Timezone and WeekStart make the layer a calendar window
	// (bucket.LimitSpec).
	Calendar  string `yaml:"calendar"`
	Timezone  string `yaml:"timezone"`
	WeekStart string `yaml:"week_start"`
}

type routeYAML struct {
	Match  string     `yaml:"match"`
	Cost   count      `yaml:"cost"`
	Limit  *limitYAML `yaml:"limit"`
	DryRun bool       `yaml:"dry_run"`
}

// blocks are the YAML shapes by the name yaml.v3 gives their Go type, with
// the name a person knows them by and the fields they take.
var blocks = map[string]struct {
	name   string
	fields []string
}{
	"policy.fileYAML":   {"the file", yamlFields(fileYAML{})},
	"policy.policyYAML": {"policy", yamlFields(policyYAML{})},
	"policy.limitYAML":  {"limit", yamlFields(limitYAML{})},
	"policy.routeYAML":  {"route", yamlFields(routeYAML{})},
	"adaptive.YAML":     {"adaptive", yamlFields(adaptive.YAML{})},
}

// yamlFields lists the fields of v, a struct, by their yaml tags.
func yamlFields(v any) []string {
	t := reflect.TypeOf(v)
	names := make([]string, 0, t.NumField())
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		names = append(names, name)
	}
	return names
}

// notFound is yaml.v3's error for a field no struct has.
var notFound = regexp.MustCompile(`^line (\d+): field (.*) not found in type (\S+)$`)

// unknownFields rewrites err's unknown field errors in the words of the
// file: line 12: unknown field "algoritm" in limit (did you mean
// "algorithm"?), or the fields the block takes when none is close.
func unknownFields(err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return err
	}
	for i, e := range te.Errors {
		m := notFound.FindStringSubmatch(e)
		if m == nil {
			continue
		}
		b, ok := blocks[m[3]]
		if !ok {
			continue
		}
		hint := "fields: " + strings.Join(b.fields, ", ")
		if s, ok := suggest.Closest(m[2], b.fields); ok {
			hint = fmt.Sprintf("did you mean %q?", s)
		}
		te.Errors[i] = fmt.Sprintf("line %s: unknown field %q in %s (%s)", m[1], m[2], b.name, hint)
	}
	return err
}

// Parse validates a policy file. Every error names the place at fault
// (policies.api.tiers.free.per: ...).
func Parse(data []byte, source string) (*Set, error) {
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("policy: %s: larger than %d bytes", source, MaxFileBytes)
	}
	var f fileYAML
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("policy: %s: empty file", source)
		}
		return nil, fmt.Errorf("policy: %s: %w", source, unknownFields(err))
	}
	var extra any
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("policy: %s: one YAML document expected, found more", source)
	}
	if err := checkLabel(f.Version); err != nil {
		return nil, fmt.Errorf("policy: %s: version: %w", source, err)
	}
	if len(f.Policies) == 0 {
		return nil, fmt.Errorf("policy: %s: policies: at least one policy is required", source)
	}
	sum := sha256.Sum256(data)
	version := hex.EncodeToString(sum[:6])
	if f.Version != "" {
		version = f.Version + "-" + version
	}
	set := &Set{Version: version, Source: source, Policies: map[string]*Policy{}}
	names := make([]string, 0, len(f.Policies))
	for name := range f.Policies {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		p, err := parsePolicy(name, f.Policies[name])
		if err != nil {
			return nil, fmt.Errorf("policy: %s: policies.%s.%w", source, name, err)
		}
		set.Policies[name] = p
	}
	switch {
	case set.Policies["default"] != nil:
		set.Default = "default"
	case len(names) == 1:
		set.Default = names[0]
	}
	return set, nil
}

func parsePolicy(name string, y policyYAML) (*Policy, error) {
	if err := checkName(name); err != nil {
		return nil, fmt.Errorf("name: %w", err)
	}
	p := &Policy{Name: name, Tiers: map[string]*Layer{}, DefaultTier: y.DefaultTier, AnonymousTier: y.AnonymousTier}
	if err := bucket.CheckPrelimit(y.Prelimit); err != nil {
		return nil, err
	}
	for tier, ly := range y.Tiers {
		if err := checkName(tier); err != nil {
			return nil, fmt.Errorf("tiers.%s: %w", tier, err)
		}
		l, err := parseLayer("tier:"+tier, ly, y)
		if err != nil {
			return nil, fmt.Errorf("tiers.%s.%w", tier, err)
		}
		p.Tiers[tier] = l
	}
	for _, t := range []struct{ field, name string }{{"default_tier", y.DefaultTier}, {"anonymous_tier", y.AnonymousTier}} {
		if t.name != "" && p.Tiers[t.name] == nil {
			return nil, fmt.Errorf("%s: no tier named %q", t.field, t.name)
		}
	}
	seen := map[string]bool{}
	for i, ry := range y.Routes {
		field := fmt.Sprintf("routes[%d]", i)
		if !strings.HasPrefix(ry.Match, "/") || strings.Contains(strings.TrimSuffix(ry.Match, "*"), "*") {
			return nil, fmt.Errorf("%s.match: want an exact path like /reports or a prefix like /export/*, got %q", field, ry.Match)
		}
		// Requests are matched by their normalised route: a pattern that
		// is not normalised would never match, or match less than it says.
		if base := strings.TrimSuffix(ry.Match, "*"); !routeNormalised(base, base != ry.Match) {
			return nil, fmt.Errorf("%s.match: %q is not a normalised path (no '.' or '..' segments, repeated or trailing slashes, ';' parameters, escaped letters or digits; see README, Routes); write %q",
				field, ry.Match, route.Normalize(base)+strings.Repeat("/*", len(ry.Match)-len(base)))
		}
		if seen[ry.Match] {
			return nil, fmt.Errorf("%s.match: %q appears twice", field, ry.Match)
		}
		seen[ry.Match] = true
		if ry.Cost < 0 {
			return nil, fmt.Errorf("%s.cost: must be at least 1 (or absent), got %d", field, ry.Cost)
		}
		if ry.Cost == 0 && ry.Limit == nil {
			return nil, fmt.Errorf("%s: needs a cost, a limit or both", field)
		}
		r := Route{Match: ry.Match, prefix: strings.HasSuffix(ry.Match, "*"), Cost: int64(ry.Cost)}
		if ry.Limit != nil {
			ly := *ry.Limit
			if ry.DryRun && ly.DryRun == nil {
				ly.DryRun = &ry.DryRun
			}
			l, err := parseLayer("route:"+ry.Match, ly, y)
			if err != nil {
				return nil, fmt.Errorf("%s.limit.%w", field, err)
			}
			l.route = ry.Match
			r.Layer = l
		}
		p.Routes = append(p.Routes, r)
	}
	// Most specific first: exact before prefix, longer before shorter.
	slices.SortStableFunc(p.Routes, func(a, b Route) int {
		if a.prefix != b.prefix {
			if a.prefix {
				return 1
			}
			return -1
		}
		return len(b.Match) - len(a.Match)
	})
	if y.Global != nil {
		l, err := parseLayer("global", *y.Global, y)
		if err != nil {
			return nil, fmt.Errorf("global.%w", err)
		}
		p.Global = l
	}
	if len(p.Tiers) == 0 && len(p.Routes) == 0 && p.Global == nil {
		return nil, errors.New("tiers: a policy needs at least one tier, route limit or global ceiling")
	}
	// Costs must fit every layer they are charged to.
	for _, r := range p.Routes {
		if r.Cost == 0 {
			continue
		}
		for _, l := range p.layers(&r) {
			if r.Cost > l.Limit.Capacity() {
				return nil, fmt.Errorf("routes[%s].cost: %d exceeds the capacity %d of %s", r.Match, r.Cost, l.Limit.Capacity(), l.Scope)
			}
		}
	}
	return p, nil
}

// layers lists the layers a request on route r (nil: no route matched)
// could be charged to, for validation.
func (p *Policy) layers(r *Route) []*Layer {
	var out []*Layer
	if r != nil && r.Layer != nil {
		out = append(out, r.Layer)
	}
	for _, t := range p.Tiers {
		out = append(out, t)
	}
	if p.Global != nil {
		out = append(out, p.Global)
	}
	return out
}
