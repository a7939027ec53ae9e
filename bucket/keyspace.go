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
}

// Spec returns the limit's canonical name, "tb:10:1s:50" (algorithm,
// count, period, burst): two limits have the same Spec exactly when they
// have the same algorithm and parameters. It contains no '|' and is at
// most 48 bytes long.
func (l Limit) Spec() string {
	b := make([]byte, 0, 48)
	b = append(b, algorithmCodes[l.alg%numAlgorithms]...)
	b = append(b, ':')
	b = strconv.AppendInt(b, l.limit, 10)
	b = append(b, ':')
	b = append(b, l.per.String()...)
	b = append(b, ':')
	b = strconv.AppendInt(b, l.burst, 10)
	return string(b)
}

// InlineKey is the stored key of an inline check of key under l:
// NamespaceInline + l.Spec() + "|" + key. A check that names another
// limit for the same key gets a bucket of its own, so no request-named
// limit can lower what a key has spent under another. The ring places an
// inline key by key alone (see package ring), so every limit a caller
// names for one key is decided by the same node.
func InlineKey(key string, l *Limit) string {
	spec := l.Spec()
	var b strings.Builder
	b.Grow(len(NamespaceInline) + len(spec) + 1 + len(key))
	b.WriteString(NamespaceInline)
	b.WriteString(spec)
	b.WriteByte('|')
	b.WriteString(key)
	return b.String()
}

// CheckRequestKey returns an error unless key, as a request names it
// before its namespace is added, is 1 to MaxKeyLen bytes.
func CheckRequestKey(key string) error {
	if key == "" {
		return errEmptyKey()
	}
	if len(key) > MaxKeyLen {
		return errLongKey(len(key), MaxKeyLen)
	}
	return nil
}
