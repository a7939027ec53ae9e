// Package certfile loads a TLS certificate with its key, and a pool of CA
// certificates, from PEM files, and loads them again when the files change
// (Set.Watcher, a reload.Watcher), so that certificates and CAs rotate
// without a restart.
//
// A reload reads every file; when any of them does not parse, or the key
// does not match the certificate, the reload fails and the set keeps what
// it had. Replacing a certificate and its key takes two writes: a reload
// that reads between them sees a mismatched pair, fails, and the next one
// takes both.
package certfile

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringlimit/ringlimit/internal/reload"
)

// Files names the PEM files of a Set. Cert and Key go together: both or
// neither. CA is a bundle of one or more CA certificates (during a CA
// rotation, the old and the new one).
type Files struct {
	CA   string
	Cert string
	Key  string
	// Check, when set, is given the certificate and the CA pool of every
	// load (either nil when its files are not given); an error refuses
	// the load.
	Check func(cert *tls.Certificate, roots *x509.CertPool) error
}

// Set is a certificate, its key and a pool of CA certificates, as last
// loaded from Files. It is safe for concurrent use; readers take no lock.
type Set struct {
	files Files
	cur   atomic.Pointer[material] // replaced whole, so readers never mix two loads

	mu  sync.Mutex // serialises Reload
	sum [sha256.Size]byte
}

// Load reads the files. At least one of CA and Cert must be given.
func Load(f Files) (*Set, error) {
	if (f.Cert == "") != (f.Key == "") {
		return nil, errors.New("certfile: a certificate and its key go together: give both files or neither")
	}
	if f.Cert == "" && f.CA == "" {
		return nil, errors.New("certfile: no files")
	}
	s := &Set{files: f}
	if _, err := s.Reload(); err != nil {
		return nil, err
	}
	return s, nil
}

// Certificate returns the certificate and key last loaded (nil without
// Files.Cert). The caller must not modify it.
func (s *Set) Certificate() *tls.Certificate { return s.load().cert }

// Roots returns the CA pool last loaded (nil without Files.CA).
func (s *Set) Roots() *x509.CertPool { return s.load().roots }

// Generation counts the loads that changed the set: it changes whenever
// Certificate or Roots does (1 after Load).
func (s *Set) Generation() uint64 { return s.load().gen }

// material is what one load read.
type material struct {
	cert  *tls.Certificate
	roots *x509.CertPool
	gen   uint64 // the previous load's, plus one
}

func (s *Set) load() *material {
	if m := s.cur.Load(); m != nil {
		return m
	}
	return &material{}
}

// NotAfter returns when the certificate last loaded expires (zero without
// one).
func (s *Set) NotAfter() time.Time {
	if c := s.load().cert; c != nil && c.Leaf != nil {
		return c.Leaf.NotAfter
	}
	return time.Time{}
}

// Reload reads the files again and reports whether their content changed.
// On an error nothing changes.
func (s *Set) Reload() (changed bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var all [3][]byte
	for i, path := range []string{s.files.CA, s.files.Cert, s.files.Key} {
		if path == "" {
			continue
		}
		if all[i], err = os.ReadFile(path); err != nil {
			return false, fmt.Errorf("certfile: %w", err)
		}
	}
	sum := sha256.Sum256(bytes.Join(all[:], []byte{0}))
	if sum == s.sum && s.cur.Load() != nil {
		return false, nil
	}
	var roots *x509.CertPool
	if s.files.CA != "" {
		if roots, err = parsePool(all[0]); err != nil {
			return false, fmt.Errorf("certfile: %s: %w", s.files.CA, err)
		}
	}
	var cert *tls.Certificate
	if s.files.Cert != "" {
		c, err := tls.X509KeyPair(all[1], all[2])
		if err != nil {
			return false, fmt.Errorf("certfile: %s and %s: %w", s.files.Cert, s.files.Key, err)
		}
		cert = &c
	}
	if s.files.Check != nil {
		if err := s.files.Check(cert, roots); err != nil {
			return false, fmt.Errorf("certfile: %w", err)
		}
	}
	s.sum = sum
	s.cur.Store(&material{cert: cert, roots: roots, gen: s.load().gen + 1})
	return true, nil
}

// parsePool reads every CERTIFICATE block of b into a pool; it fails on
// anything else, or on no certificate at all.
func parsePool(b []byte) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	n := 0
	for rest := b; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			if len(bytes.TrimSpace(rest)) > 0 {
				return nil, errors.New("data that is not PEM")
			}
			break
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("a %q block where CA certificates were expected", block.Type)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, err
		}
		if !c.IsCA {
			return nil, fmt.Errorf("certificate %q is not a CA", c.Subject.CommonName)
		}
		pool.AddCert(c)
		n++
	}
	if n == 0 {
		return nil, errors.New("no CA certificate")
	}
	return pool, nil
}

// Watcher returns a reload.Watcher of the set's files: it reloads the set
// when they change (and on the watcher's Reload, for SIGHUP), logging each
// change, and each failure once until the error changes or a reload
// succeeds. cfg gives
// the Clock and may give a Logger, Results, Poll, Debounce and Changed
// (called after each change); What defaults to "certificates", and Paths,
// Load and Refused are the set's.
func (s *Set) Watcher(cfg reload.Config) (*reload.Watcher, error) {
	if cfg.What == "" {
		cfg.What = "certificates"
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg.Paths = []string{s.files.CA, s.files.Cert, s.files.Key}
	cfg.Refused = cfg.What + " not reloaded; keeping the ones loaded before"
	cfg.Load = func(string) (bool, error) {
		changed, err := s.Reload()
		if changed {
			log.Info(cfg.What+" reloaded", "ca", s.files.CA, "cert", s.files.Cert, "not_after", s.NotAfter())
		}
		return changed, err
	}
	return reload.New(cfg)
}

// ServerConfig returns a TLS configuration for a server that presents the
// set's current certificate (TLS 1.2 at least) and offers nextProtos by
// ALPN. With clientAuth, it requires a client certificate that chains to
// the set's current CA pool, for TLS client authentication; a set loaded
// without a CA file then fails every handshake. Each handshake
// takes what the set holds at that moment, so a reload applies to the next
// connection.
func (s *Set) ServerConfig(clientAuth bool, nextProtos ...string) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: nextProtos,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			c := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: nextProtos}
			m := s.load()
			if cert := m.cert; cert != nil {
				c.Certificates = []tls.Certificate{*cert}
			}
			if clientAuth {
				// A nil ClientCAs would verify client certificates
				// against the system's roots.
				roots := m.roots
				if roots == nil {
					return nil, errors.New("certfile: client certificates are required but no CA is loaded to verify them")
				}
				c.ClientAuth = tls.RequireAndVerifyClientCert
				c.ClientCAs = roots
			}
			return c, nil
		},
	}
}
