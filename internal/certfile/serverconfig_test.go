package certfile_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"math/big"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/internal/certfile"
)

// tlsServer serves TLS with cfg on a loopback port: it completes each
// handshake, writes "ok" and closes. It is stopped when the test ends.
func tlsServer(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				tc := tls.Server(c, cfg)
				if tc.Handshake() == nil {
					tc.Write([]byte("ok"))
				}
			})
		}
	})
	t.Cleanup(func() {
		lis.Close()
		wg.Wait()
	})
	return lis.Addr().String()
}

// dial connects to the server named "server" at addr, trusting roots and
// presenting cert (if any, even when the server asks for another CA's),
// and returns the serial of the server's
// certificate once the server said "ok".
func dial(addr string, roots *x509.CertPool, cert *tls.Certificate) (*big.Int, error) {
	cfg := &tls.Config{ServerName: "server", RootCAs: roots, MinVersion: tls.VersionTLS12}
	if cert != nil {
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
	}
	d := tls.Dialer{Config: cfg, NetDialer: &net.Dialer{Timeout: 10 * time.Second}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	got, err := io.ReadAll(c) // TLS 1.3: a refused client certificate shows here
	if err != nil {
		return nil, err
	}
	if string(got) != "ok" {
		return nil, errors.New("server said " + string(got))
	}
	return c.(*tls.Conn).ConnectionState().PeerCertificates[0].SerialNumber, nil
}

func keyPair(t *testing.T, l leaf) *tls.Certificate {
	t.Helper()
	c, err := tls.X509KeyPair(l.cert, l.key)
	if err != nil {
		t.Fatal(err)
	}
	return &c
}

// ServerConfig(true) requires a client certificate from the set's CAs, and
// each handshake takes the certificate and the CAs the set holds then.
func TestServerConfigMutualTLS(t *testing.T) {
	f := newFiles(t)
	ca, otherCA := newCA(t, "CA"), newCA(t, "other CA")
	srv := issue(t, ca, "server")
	writeSet(t, f, ca, srv)
	s := load(t, f.all())
	addr := tlsServer(t, s.ServerConfig(true))
	client, stranger := keyPair(t, issue(t, ca, "client")), keyPair(t, issue(t, otherCA, "client"))

	if got, err := dial(addr, s.Roots(), client); err != nil || got.Cmp(srv.serial) != 0 {
		t.Fatalf("client with a certificate from the CA: server serial %x, %v; want %x", got, err, srv.serial)
	}
	if _, err := dial(addr, s.Roots(), nil); err == nil || !strings.Contains(err.Error(), "tls: certificate required") {
		t.Fatalf("client without a certificate: %v, want refused (certificate required)", err)
	}
	if _, err := dial(addr, s.Roots(), stranger); err == nil || !strings.Contains(err.Error(), "tls: unknown certificate authority") {
		t.Fatalf("client with a certificate from another CA: %v, want refused (unknown certificate authority)", err)
	}

	next := issue(t, ca, "server")
	write(t, f.cert, next.cert)
	write(t, f.key, next.key)
	if changed, err := s.Reload(); !changed || err != nil {
		t.Fatalf("Reload = %v, %v", changed, err)
	}
	if got, err := dial(addr, s.Roots(), client); err != nil || got.Cmp(next.serial) != 0 {
		t.Fatalf("after the rotation: server serial %x, %v; want the new %x", got, err, next.serial)
	}

	// The other CA joins the bundle: its clients are accepted from the next
	// handshake on.
	write(t, f.ca, append(ca.CertPEM(), otherCA.CertPEM()...))
	if changed, err := s.Reload(); !changed || err != nil {
		t.Fatalf("Reload = %v, %v", changed, err)
	}
	if _, err := dial(addr, s.Roots(), stranger); err != nil {
		t.Fatalf("client of a CA added to the bundle: %v", err)
	}
}

// A set loaded without a CA file has no pool to verify client certificates
// against: ServerConfig(true) must refuse every client rather than leave
// tls.Config.ClientCAs nil, which verifies them against the system's roots.
func TestServerConfigClientAuthWithoutCA(t *testing.T) {
	f := newFiles(t)
	ca := newCA(t, "CA")
	writeSet(t, f, ca, issue(t, ca, "server"))
	s := load(t, certfile.Files{Cert: f.cert, Key: f.key})
	const want = "certfile: client certificates are required but no CA is loaded to verify them"
	if cfg, err := s.ServerConfig(true).GetConfigForClient(&tls.ClientHelloInfo{}); err == nil || err.Error() != want {
		t.Fatalf("GetConfigForClient without a CA: %v (ClientCAs %v), want the error %q", err, cfg.ClientCAs, want)
	}
	roots := load(t, certfile.Files{CA: f.ca}).Roots()
	if _, err := dial(tlsServer(t, s.ServerConfig(true)), roots, keyPair(t, issue(t, ca, "client"))); err == nil {
		t.Fatal("a client was accepted by a server with no CA to verify it")
	}
	if _, err := dial(tlsServer(t, s.ServerConfig(false)), roots, nil); err != nil {
		t.Fatalf("without client authentication: %v", err)
	}
}
