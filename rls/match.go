package rls

import (
	"strings"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/internal/route"
)

// Match finds the rule of one descriptor of a request in domain, with
// envoyproxy/ratelimit's rules:
//
//   - An unknown domain, or a descriptor without entries, matches nothing.
//   - A descriptor carrying its own limit (an override) matches in any
//     known domain: a fixed window of exactly its requests_per_unit per
//     unit (a uint32 always fits), never shadow, named by its entries,
//     counted in a bucket of its own (bucket.NamespaceRLSOverride and the
//     limit's spec before the descriptor's key), so an override never
//     lowers what the configured rule, or another override, has counted.
//     An override with the unit UNKNOWN matches nothing.
//   - An entry whose key is "path" or ":path", or whose value begins with
//     '/', carries a route: its value is normalised (route.Normalize)
//     before it is matched and keyed, as the configuration's own values
//     are, so that /login/, //login and /%6Cogin are /login.
//   - Otherwise each entry, in order, descends one level of the domain's
//     descriptors: first the entry's key and value, then the first
//     wildcard value (ending in '*') in file order whose prefix fits, then
//     the key alone. An entry that finds nothing, or a level without
//     nested descriptors before the last entry, ends the walk without a
//     match. The limit is the one of the descriptor the last entry
//     reached; limits on the way are not taken.
//
// The Rule's Replaces is shared with the Config: do not modify it.
func (c *Config) Match(domain string, d *rlcommon.RateLimitDescriptor) (Rule, bool) {
	level := c.domains[domain]
	if level == nil {
		return Rule{}, false
	}
	entries := d.GetEntries()
	if o := d.GetLimit(); o != nil {
		return override(domain, entries, o)
	}
	if len(entries) == 0 {
		return Rule{}, false
	}
	var buf [128]byte
	composite := buf[:0]
	for i, e := range entries {
		// The composite key, key + "_" + value, built without allocating
		// (unless it outgrows buf): map lookups of string(bytes) do not
		// copy.
		composite = append(composite[:0], e.GetKey()...)
		composite = append(composite, '_')
		composite = append(composite, entryValue(e)...)
		next := level.children[string(composite)]
		if next == nil {
			// A route's normalised value has no trailing slash: /api is
			// /api/, which a wildcard /api/* covers.
			slash := isRoute(e.GetKey(), e.GetValue())
			for _, w := range level.wildcards {
				if len(composite) >= len(w.prefix) && string(composite[:len(w.prefix)]) == w.prefix ||
					slash && len(composite)+1 == len(w.prefix) && w.prefix[len(composite)] == '/' && w.prefix[:len(composite)] == string(composite) {
					next = w.node
					break
				}
			}
		}
		if next == nil {
			next = level.children[e.GetKey()]
		}
		switch {
		case next == nil:
			return Rule{}, false
		case i == len(entries)-1:
			level = next
		case len(next.children) == 0:
			// The request goes deeper than the configuration.
			return Rule{}, false
		default:
			level = next
		}
	}
	if level.rule == nil {
		return Rule{}, false
	}
	r := *level.rule
	r.Key = bucketKey(domain, entries)
	if r.DetailedMetric {
		r.FullKey = detailedKey(domain, entries)
	}
	return r, true
}

// override makes the Rule of a descriptor that carries its own limit.
func override(domain string, entries []*rlcommon.RateLimitDescriptor_Entry, o *rlcommon.RateLimitDescriptor_RateLimitOverride) (Rule, bool) {
	// envoy.type.v3.RateLimitUnit numbers its units as the response does.
	unit := rlsv3.RateLimitResponse_RateLimit_Unit(o.GetUnit())
	per := UnitDuration(unit)
	if per == 0 {
		return Rule{}, false
	}
	r := Rule{
		FullKey:         descriptorKey(domain, entries),
		RequestsPerUnit: o.GetRequestsPerUnit(),
		Unit:            unit,
		Override:        true,
	}
	if n := int64(r.RequestsPerUnit); n > 0 {
		// A fixed window holds every uint32: what is answered is what is
		// enforced.
		r.Limit = bucket.MustLimit(bucket.FixedWindow, n, per, 0)
		key := bucketKey(domain, entries)
		r.Key = bucket.NamespaceRLSOverride + r.Limit.Spec() + "|" + key[len(bucket.NamespaceRLS):]
	}
	return r, true
}

// isRoute reports whether an entry carries a request path: its key is
// "path" or ":path" (as Envoy's request_headers action is usually set up),
// or its value begins with '/'; an empty value is none.
func isRoute(key, value string) bool {
	return value != "" && (key == "path" || key == ":path" || value[0] == '/')
}

// entryValue is e's value as it is matched and keyed: normalised when it
// is a route (allocating only when it was not normalised already).
func entryValue(e *rlcommon.RateLimitDescriptor_Entry) string {
	if v := e.GetValue(); isRoute(e.GetKey(), v) {
		return route.Normalize(v)
	}
	return e.GetValue()
}

// bucketKey is BucketKey of the request's entries, built in one
// allocation when nothing needs escaping.
func bucketKey(domain string, entries []*rlcommon.RateLimitDescriptor_Entry) string {
	var b strings.Builder
	n := len(bucket.NamespaceRLS) + len(domain)
	for _, e := range entries {
		n += 2 + len(e.GetKey()) + len(e.GetValue())
	}
	b.Grow(n)
	b.WriteString(bucket.NamespaceRLS)
	escape(&b, domain)
	for _, e := range entries {
		b.WriteByte('|')
		escape(&b, e.GetKey())
		b.WriteByte('=')
		escape(&b, entryValue(e))
	}
	return b.String()
}

// detailedKey is the statistics name of a detailed_metric rule: the
// domain, then "." + key + "_" + value for every entry of the request.
func detailedKey(domain string, entries []*rlcommon.RateLimitDescriptor_Entry) string {
	var b strings.Builder
	n := len(domain)
	for _, e := range entries {
		n += 2 + len(e.GetKey()) + len(e.GetValue())
	}
	b.Grow(n)
	b.WriteString(domain)
	for _, e := range entries {
		b.WriteByte('.')
		b.WriteString(e.GetKey())
		b.WriteByte('_')
		b.WriteString(entryValue(e))
	}
	return b.String()
}

// descriptorKey is the statistics name of an override: the domain, then
// the entries joined by ".", each key + "_" + value, or the key alone when
// the value is empty.
func descriptorKey(domain string, entries []*rlcommon.RateLimitDescriptor_Entry) string {
	var b strings.Builder
	n := len(domain) + 1
	for _, e := range entries {
		n += 2 + len(e.GetKey()) + len(e.GetValue())
	}
	b.Grow(n)
	b.WriteString(domain)
	b.WriteByte('.')
	for i, e := range entries {
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(e.GetKey())
		if v := entryValue(e); v != "" {
			b.WriteByte('_')
			b.WriteString(v)
		}
	}
	return b.String()
}
