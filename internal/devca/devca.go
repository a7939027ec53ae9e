package devca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"time"
)

// skew is how far in the past NotBefore is set.
const skew = time.Minute

// CA is a certificate authority held in memory: its certificate and its
// private key. A CA is immutable after NewCA or Load and safe for
// simultaneous use by several goroutines.
type CA struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
	keyPEM  []byte
}

// NewCA makes a self-signed CA whose subject common name is name, valid from
// now (less a minute of skew) for validFor.
func NewCA(name string, validFor time.Duration) (*CA, error) {
	if name == "" {
		return nil, errors.New("devca: CA name must not be empty")
	}
	if validFor <= 0 {
		return nil, fmt.Errorf("devca: CA validity must be > 0, got %v", validFor)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("devca: generate CA key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             now.Add(-skew),
		NotAfter:              now.Add(validFor),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("devca: create CA certificate: %w", err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	return Load(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM)
}

// Load rebuilds a CA from the PEM its CertPEM and KeyPEM returned (or any
// PEM CA certificate with its ECDSA key, as PKCS #8 or SEC 1). It checks
// that the certificate is a CA and that the key belongs to it.
func Load(certPEM, keyPEM []byte) (*CA, error) {
	block, _ := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("devca: CA certificate: no CERTIFICATE PEM block")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("devca: CA certificate: %w", err)
	}
	if !cert.IsCA || !cert.BasicConstraintsValid {
		return nil, fmt.Errorf("devca: certificate %q is not a CA", cert.Subject.CommonName)
	}
	key, err := decodeKey(keyPEM)
	if err != nil {
		return nil, err
	}
	pub, ok := cert.PublicKey.(*ecdsa.PublicKey)
	if !ok || !pub.Equal(&key.PublicKey) {
		return nil, fmt.Errorf("devca: key does not match CA certificate %q", cert.Subject.CommonName)
	}
	// Re-encode the key so KeyPEM is always PKCS #8.
	normalized, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	return &CA{
		cert:    cert,
		key:     key,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}),
		keyPEM:  normalized,
	}, nil
}

// Certificate returns the parsed CA certificate. The caller must not modify it.
func (ca *CA) Certificate() *x509.Certificate { return ca.cert }

// CertPEM returns the CA certificate, PEM-encoded: what peers put in their
// pool of trusted roots.
func (ca *CA) CertPEM() []byte { return clone(ca.certPEM) }

// KeyPEM returns the CA private key, PEM-encoded as PKCS #8. Write it with
// file mode 0600.
func (ca *CA) KeyPEM() []byte { return clone(ca.keyPEM) }

// Issue makes a new key and a leaf certificate signed by the CA, with
// commonName as subject, dnsNames and ips as subject alternative names, and
// extended key usages for both TLS server and TLS client authentication.
// The certificate is valid from now (less a minute of skew) for validFor,
// capped at the CA's own expiry. Each call uses a new key and a new random
// serial, so calling it again for the same name rotates the certificate.
func (ca *CA) Issue(commonName string, dnsNames []string, ips []net.IP, validFor time.Duration) (certPEM, keyPEM []byte, err error) {
	if commonName == "" {
		return nil, nil, errors.New("devca: common name must not be empty")
	}
	if validFor <= 0 {
		return nil, nil, fmt.Errorf("devca: certificate validity must be > 0, got %v", validFor)
	}
	for _, ip := range ips {
		if ip.To16() == nil {
			return nil, nil, fmt.Errorf("devca: invalid IP address %v", ip)
		}
	}
	now := time.Now()
	if !now.Before(ca.cert.NotAfter) {
		return nil, nil, fmt.Errorf("devca: CA %q expired at %v", ca.cert.Subject.CommonName, ca.cert.NotAfter)
	}
	notAfter := now.Add(validFor)
	if notAfter.After(ca.cert.NotAfter) {
		notAfter = ca.cert.NotAfter
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("devca: generate key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-skew),
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		DNSNames:              append([]string(nil), dnsNames...),
		IPAddresses:           append([]net.IP(nil), ips...),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, nil, fmt.Errorf("devca: create certificate for %q: %w", commonName, err)
	}
	keyPEM, err = encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

// newSerial returns a random positive serial of at most 128 bits.
func newSerial() (*big.Int, error) {
	limit := new(big.Int).Lsh(big.NewInt(1), 128)
	for {
		n, err := rand.Int(rand.Reader, limit)
		if err != nil {
			return nil, fmt.Errorf("devca: serial number: %w", err)
		}
		if n.Sign() > 0 {
			return n, nil
		}
	}
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("devca: encode key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func decodeKey(keyPEM []byte) (*ecdsa.PrivateKey, error) {
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		return nil, errors.New("devca: CA key: no PEM block")
	}
	switch block.Type {
	case "PRIVATE KEY":
		k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("devca: CA key: %w", err)
		}
		ek, ok := k.(*ecdsa.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("devca: CA key: want ECDSA, got %T", k)
		}
		return ek, nil
	case "EC PRIVATE KEY":
		k, err := x509.ParseECPrivateKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("devca: CA key: %w", err)
		}
		return k, nil
	default:
		return nil, fmt.Errorf("devca: CA key: unexpected PEM block %q", block.Type)
	}
}

func clone(b []byte) []byte { return append([]byte(nil), b...) }
