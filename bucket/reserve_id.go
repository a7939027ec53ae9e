package bucket

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"strings"
)

// A reservation is a check whose true cost is known only afterwards (LLM
// tokens): the check spends its cost as any check does, and the key's
// owner records a reservation that a later settle turns into the true
// cost (Store.Settle). The id names the key, so that any node can route a
// settle to the key's owner:
//
//	r1.<base64url(stored key)>.<base64url(12 random bytes)>
//
// The random part makes an id unguessable: a settle must name a record the
// owner holds, nonce included.

const (
	reservePrefix = "r1."
	nonceBytes    = 12
	nonceChars    = 16 // base64url of nonceBytes, unpadded
)

// NewReservationID returns a fresh id naming key.
func NewReservationID(key string) string {
	var n [nonceBytes]byte
	rand.Read(n[:]) // never fails (crypto/rand)
	enc := base64.RawURLEncoding
	var b strings.Builder
	b.Grow(len(reservePrefix) + enc.EncodedLen(len(key)) + 1 + nonceChars)
	b.WriteString(reservePrefix)
	b.WriteString(enc.EncodeToString([]byte(key)))
	b.WriteByte('.')
	b.WriteString(enc.EncodeToString(n[:]))
	return b.String()
}

// MaxReservationIDLen is the longest well-formed id: the prefix, the
// longest stored key in unpadded base64url, a dot and the nonce.
const MaxReservationIDLen = len(reservePrefix) + (8*(MaxKeyLen+MaxNamespaceLen)+5)/6 + 1 + nonceChars

// ParseReservationID returns the stored key an id names. Its error wraps
// ErrReservationID for an id that is not well formed.
func ParseReservationID(id string) (string, error) {
	if len(id) > MaxReservationIDLen {
		return "", fmt.Errorf("%w: longer than %d bytes", ErrReservationID, MaxReservationIDLen)
	}
	rest, ok := strings.CutPrefix(id, reservePrefix)
	if !ok {
		return "", fmt.Errorf("%w: must start with %q", ErrReservationID, reservePrefix)
	}
	k, nonce, ok := strings.Cut(rest, ".")
	if !ok || len(nonce) != nonceChars {
		return "", fmt.Errorf("%w: must end with a %d-character nonce", ErrReservationID, nonceChars)
	}
	if _, err := base64.RawURLEncoding.DecodeString(nonce); err != nil {
		return "", fmt.Errorf("%w: bad nonce", ErrReservationID)
	}
	key, err := base64.RawURLEncoding.DecodeString(k)
	if err != nil {
		return "", fmt.Errorf("%w: bad key", ErrReservationID)
	}
	if err := CheckKey(string(key)); err != nil {
		return "", fmt.Errorf("%w: %w", ErrReservationID, err)
	}
	return string(key), nil
}
