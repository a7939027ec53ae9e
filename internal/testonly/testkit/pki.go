package testkit

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/internal/devca"
)

// PKI is a certificate authority whose certificates a test writes to
// files, as a node reads them. Its files are written whole or not at all
// (a temporary file, then a rename), so a node that reloads them never
// sees half a file. Safe for use by one test's goroutines.
type PKI struct {
	// Dir is where the files are written.
	Dir string
	// CA is the authority; it issues for a day.
	CA *devca.CA

	t      testing.TB
	caFile string
}

// NewPKI makes a CA named name and writes its certificate to
// Dir/<name>-ca.pem (see CAFile). An empty dir is a new t.TempDir().
func NewPKI(t testing.TB, dir, name string) *PKI {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	ca, err := devca.NewCA(name, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	p := &PKI{Dir: dir, CA: ca, t: t}
	p.caFile = p.Write(name+"-ca.pem", ca.CertPEM())
	return p
}

// CAFile is the path of the CA's certificate, as NewPKI wrote it.
func (p *PKI) CAFile() string { return p.caFile }

// Write writes b to Dir/name, whole or not at all, and returns its path.
func (p *PKI) Write(name string, b []byte) string {
	p.t.Helper()
	path := filepath.Join(p.Dir, name)
	if err := os.WriteFile(path+".tmp", b, 0o600); err != nil {
		p.t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		p.t.Fatal(err)
	}
	return path
}

// Issue writes a new certificate whose common and DNS name is name, valid
// for an hour, to Dir/<file>.pem and its key to Dir/<file>-key.pem, and
// returns their paths.
func (p *PKI) Issue(file, name string) (cert, key string) {
	p.t.Helper()
	c, k, err := p.CA.Issue(name, []string{name}, nil, time.Hour)
	if err != nil {
		p.t.Fatal(err)
	}
	key = p.Write(file+"-key.pem", k)
	return p.Write(file+".pem", c), key
}

// KeyPair is a new certificate whose common and DNS name is name, with its
// key, loaded for a TLS client or server (no file is written).
func (p *PKI) KeyPair(name string) tls.Certificate {
	p.t.Helper()
	c, k, err := p.CA.Issue(name, []string{name}, nil, time.Hour)
	if err != nil {
		p.t.Fatal(err)
	}
	kp, err := tls.X509KeyPair(c, k)
	if err != nil {
		p.t.Fatal(err)
	}
	return kp
}

// Roots is a pool holding the CA: what a peer trusts.
func (p *PKI) Roots() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(p.CA.Certificate())
	return pool
}
