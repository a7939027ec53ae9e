package bucket

import (
	"strconv"
	"strings"
)

// Key namespaces. Every key the store holds begins with the tag of the
// namespace it belongs to, chosen by the server and never by a request:
// an inline check's key, a policy layer's key and an Envoy descriptor's key
// can therefore never name the same bucket, whatever bytes a caller sends.
const (
	// NamespaceInline tags the keys of inline checks: the tag, the
	// limit's Spec, '|', then the caller's key (see InlineKey).
	NamespaceInline = "i|"
	// NamespacePolicy tags the keys of policy layers.
	NamespacePolicy = "p|"
	// NamespaceRLS tags the keys of descriptors a configured RLS rule
	// matched.
	NamespaceRLS = "r|"
	// NamespaceRLSOverride tags the keys of RLS descriptors that carry
	// their own limit: the tag, the limit's Spec, '|', then the
	// descriptor's key within NamespaceRLS without its tag.
	NamespaceRLSOverride = "o|"
	// NamespaceConcurrency tags the keys of in-flight (concurrency)
	// limits.
	NamespaceConcurrency = "c|"
)

// MaxNamespaceLen bounds what a namespace adds to a request's key: the tag
// and, for inline keys and RLS overrides, the limit's Spec and a
// separator. A stored key is at most MaxKeyLen + MaxNamespaceLen bytes.
const MaxNamespaceLen = 64

// algorithmCodes are the short names of the algorithms in a Spec.
var algorithmCodes = [numAlgorithms]string{
	TokenBucket:          "tb",
	LeakyBucket:          "lb",
	FixedWindow:          "fw",
	SlidingWindowLog:     "swl",
	SlidingWindowCounter: "swc",
	Concurrency:          "cc",
}

// Spec returns the limit's canonical name, "tb:10:1s:50" (algorithm,
// count, period, burst; a calendar window's "fw:10000:m@Europe/Berlin",
// its unit d, m, y or w and the first weekday's number, then its zone):
// two limits have the same Spec exactly when they have the same algorithm
// and parameters. It contains no '|' and is at most 58 bytes long.
func (l Limit) Spec() string {
	var buf [64]byte
	return string(l.appendSpec(buf[:0]))
}

func (l *Limit) appendSpec(b []byte) []byte {
	b = append(b, algorithmCodes[l.alg%numAlgorithms]...)
	b = append(b, ':')
	b = strconv.AppendInt(b, l.limit, 10)
	b = append(b, ':')
	if c := l.cal; c.Unit != NoCalendar {
		b = append(b, "?dwmy"[c.Unit])
		if c.Unit == Week {
			b = append(b, byte('0'+c.WeekStart))
		}
		b = append(b, '@')
		return append(b, c.Zone()...)
	}
	b = append(b, l.per.String()...)
	b = append(b, ':')
	return strconv.AppendInt(b, l.burst, 10)
}

// InlineKey is the stored key of an inline check of key under l:
// NamespaceInline + l.Spec() + "|" + key. A check that names another
// limit for the same key gets a bucket of its own, so no request-named
// limit can lower what a key has spent under another. The ring places an
// inline key by key alone (see package ring), so every limit a caller
// names for one key is decided by the same node. It allocates only the
// string it returns.
func InlineKey(key string, l *Limit) string {
	var buf [64]byte
	spec := l.appendSpec(append(buf[:0], NamespaceInline...))
	var b strings.Builder
	b.Grow(len(spec) + 1 + len(key))
	b.Write(spec)
	b.WriteByte('|')
	b.WriteString(key)
	return b.String()
}

// InlineOwnerKey is a key the ring places exactly where it places every
// InlineKey of key (whatever the limit): the inline namespace with an
// empty spec. No bucket is ever stored under it; GET /v1/owner asks the
// ring for it.
func InlineOwnerKey(key string) string { return NamespaceInline + "|" + key }

// CheckRequestKey returns an error unless key, as a request names it
// before its namespace is added, is 1 to MaxKeyLen bytes.
func CheckRequestKey(key string) error {
	if key == "" {
		return errEmptyKey()
	}
	if len(key) > MaxKeyLen {
		return tooLong{len(key), MaxKeyLen}
	}
	return nil
}

// requestLen is the length of the part of a stored key that a request
// named: an inline key's or an RLS override's key after its Spec, another
// namespace's key after its tag, and an untagged key whole.
func requestLen(key string) int {
	if len(key) < 2 || key[1] != '|' {
		return len(key)
	}
	switch key[:2] {
	case NamespaceInline, NamespaceRLSOverride:
		if i := strings.IndexByte(key[2:], '|'); i >= 0 {
			return len(key) - 3 - i
		}
	case NamespacePolicy, NamespaceRLS, NamespaceConcurrency:
		return len(key) - 2
	}
	return len(key)
}
