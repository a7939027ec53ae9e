// Package devca is a small certificate authority for development and tests:
// it makes a self-signed ECDSA P-256 CA and issues leaf certificates that a
// node can use both as a TLS server and as a TLS client (mutual TLS between
// peers), so a local cluster needs no openssl.
//
// Invariants:
//   - Keys are ECDSA P-256, PEM-encoded as PKCS #8 ("PRIVATE KEY").
//   - Serial numbers are random 128-bit positive integers.
//   - A leaf never outlives its CA: its NotAfter is capped at the CA's.
//   - NotBefore is set one minute in the past to absorb small clock skew.
//
// It imports only the standard library. It is not meant for production
// PKI: there is no revocation, no name constraints and no key protection
// beyond the file mode the caller chooses (cmd/devcerts writes keys 0600).
package devca
