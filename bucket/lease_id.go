package bucket

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"strings"
)

// A concurrency lease's id names its key, so that any node can route a
// renew or release to the key's owner, as a reservation's does
// (reserve_id.go):
//
//	l1.<base64url(stored key)>.<base64url(12 random bytes)>
//
// The random part makes an id unguessable: a release must name a lease the
// owner holds, nonce included.

const leasePrefix = "l1."

// NewLeaseID returns a fresh id naming key.
func NewLeaseID(key string) string {
	var n [nonceBytes]byte
	rand.Read(n[:]) // never fails (crypto/rand)
	enc := base64.RawURLEncoding
	var b strings.Builder
	b.Grow(len(leasePrefix) + enc.EncodedLen(len(key)) + 1 + nonceChars)
	b.WriteString(leasePrefix)
	b.WriteString(enc.EncodeToString([]byte(key)))
	b.WriteByte('.')
	b.WriteString(enc.EncodeToString(n[:]))
	return b.String()
}

// MaxLeaseIDLen is the longest well-formed lease id.
const MaxLeaseIDLen = len(leasePrefix) + (8*(MaxKeyLen+MaxNamespaceLen)+5)/6 + 1 + nonceChars

// ParseLeaseID returns the stored key an id names. Its error wraps
// ErrLeaseID for an id that is not well formed.
func ParseLeaseID(id string) (string, error) {
	if len(id) > MaxLeaseIDLen {
		return "", fmt.Errorf("%w: longer than %d bytes", ErrLeaseID, MaxLeaseIDLen)
	}
	rest, ok := strings.CutPrefix(id, leasePrefix)
	if !ok {
		return "", fmt.Errorf("%w: must start with %q", ErrLeaseID, leasePrefix)
	}
	k, nonce, ok := strings.Cut(rest, ".")
	if !ok || len(nonce) != nonceChars {
		return "", fmt.Errorf("%w: must end with a %d-character nonce", ErrLeaseID, nonceChars)
	}
	if _, err := base64.RawURLEncoding.DecodeString(nonce); err != nil {
		return "", fmt.Errorf("%w: bad nonce", ErrLeaseID)
	}
	key, err := base64.RawURLEncoding.DecodeString(k)
	if err != nil {
		return "", fmt.Errorf("%w: bad key", ErrLeaseID)
	}
	if err := CheckKey(string(key)); err != nil {
		return "", fmt.Errorf("%w: %w", ErrLeaseID, err)
	}
	return string(key), nil
}
