package rls

import (
	"strings"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/internal/route"
)

// Rule is what one descriptor of a request matched.
type Rule struct {
	// FullKey names the configuration entry that matched, as
	// envoyproxy/ratelimit names it in its statistics: the domain and the
	// matched entries, "domain.key_value.key2" (a key without a value
	// where the configuration gave none).
	FullKey string
	// Key is the bucket key on the ring: the domain and every entry of the
	// request's descriptor, values included (BucketKey), so that each value
	// of a key-only entry has its own bucket.
	Key string
	// Limit is the bucket's limit: by default a fixed window of
	// RequestsPerUnit per Unit, as envoyproxy/ratelimit counts; the
	// ringlimit extension "algorithm" picks another algorithm. Zero when
	// Unlimited or RequestsPerUnit is 0.
	Limit bucket.Limit
	// RequestsPerUnit and Unit are the limit as the configuration (or the
	// request's override) gave it, for the answer's current_limit.
	RequestsPerUnit uint32
	Unit            rlsv3.RateLimitResponse_RateLimit_Unit
	// Unlimited: the descriptor is never limited (and not counted).
	Unlimited bool
	// Shadow: counted and reported, but the answer is always OK.
	Shadow bool
	// Name and Replaces: a matched rule whose Name is in another matched
	// rule's Replaces is left out of the request.
	Name     string
	Replaces []string
	// DetailedMetric asks for the descriptor's values in metric names.
	DetailedMetric bool
	// Override is true when the request's own limit override made the
	// rule (the configuration only matched the domain).
	Override bool
}

// BucketKey is the bucket key of a descriptor's entries in domain, in the
// RLS namespace: bucket.NamespaceRLS + domain, then each entry as "|" +
// key + "=" + value (a route's value normalised, see Match), where '|',
// '=' and '\' inside domain, keys and values are escaped with '\', so
// that two different descriptors never share a key.
func BucketKey(domain string, entries [][2]string) string {
	var b strings.Builder
	b.WriteString(bucket.NamespaceRLS)
	escape(&b, domain)
	for _, e := range entries {
		v := e[1]
		if isRoute(e[0], v) {
			v = route.Normalize(v)
		}
		b.WriteByte('|')
		escape(&b, e[0])
		b.WriteByte('=')
		escape(&b, v)
	}
	return b.String()
}

func escape(b *strings.Builder, s string) {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '|', '=', '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		default:
			b.WriteByte(c)
		}
	}
}
