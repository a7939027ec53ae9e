package devca_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/internal/devca"
)

func newCA(t *testing.T, name string) *devca.CA {
	t.Helper()
	ca, err := devca.NewCA(name, 24*time.Hour)
	if err != nil {
		t.Fatalf("NewCA(%q): %v", name, err)
	}
	return ca
}

func parseCert(t *testing.T, certPEM []byte) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		t.Fatalf("no CERTIFICATE block in %q", certPEM)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func pool(t *testing.T, ca *devca.CA) *x509.CertPool {
	t.Helper()
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(ca.CertPEM()) {
		t.Fatal("AppendCertsFromPEM: no certificate")
	}
	return p
}

func TestIssueVerifiesForServerAndClient(t *testing.T) {
	ca := newCA(t, "dev CA")
	ips := []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")}
	certPEM, keyPEM, err := ca.Issue("node-1", []string{"node-1", "localhost"}, ips, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		t.Fatalf("X509KeyPair: %v", err)
	}
	leaf := parseCert(t, certPEM)
	if leaf.Subject.CommonName != "node-1" {
		t.Errorf("CN = %q, want node-1", leaf.Subject.CommonName)
	}
	if !slices.Equal(leaf.DNSNames, []string{"node-1", "localhost"}) {
		t.Errorf("DNSNames = %v", leaf.DNSNames)
	}
	if len(leaf.IPAddresses) != 2 || !leaf.IPAddresses[0].Equal(ips[0]) || !leaf.IPAddresses[1].Equal(ips[1]) {
		t.Errorf("IPAddresses = %v, want %v", leaf.IPAddresses, ips)
	}
	if leaf.IsCA {
		t.Error("leaf is a CA")
	}
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		for _, name := range []string{"node-1", "localhost", "127.0.0.1", "::1"} {
			_, err := leaf.Verify(x509.VerifyOptions{Roots: pool(t, ca), DNSName: name, KeyUsages: []x509.ExtKeyUsage{usage}})
			if err != nil {
				t.Errorf("Verify(usage %v, name %q): %v", usage, name, err)
			}
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool(t, ca), DNSName: "node-2"}); err == nil {
		t.Error("Verify for node-2 succeeded; want a hostname error")
	}
	other := newCA(t, "other CA")
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool(t, other)}); err == nil {
		t.Error("Verify against another CA succeeded")
	}
}

func TestIssueSerialsDifferAndValidityCapped(t *testing.T) {
	ca, err := devca.NewCA("short CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	a, _, err := ca.Issue("n", nil, nil, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := ca.Issue("n", nil, nil, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ca1, ca2 := parseCert(t, a), parseCert(t, b)
	if ca1.SerialNumber.Cmp(ca2.SerialNumber) == 0 {
		t.Errorf("two issues share serial %v", ca1.SerialNumber)
	}
	if ca1.SerialNumber.Sign() <= 0 {
		t.Errorf("serial %v not positive", ca1.SerialNumber)
	}
	if !ca1.NotAfter.Equal(ca.Certificate().NotAfter) {
		t.Errorf("leaf NotAfter %v, want capped at CA's %v", ca1.NotAfter, ca.Certificate().NotAfter)
	}
}

func TestLoadRoundTrip(t *testing.T) {
	ca := newCA(t, "dev CA")
	again, err := devca.Load(ca.CertPEM(), ca.KeyPEM())
	if err != nil {
		t.Fatal(err)
	}
	if string(again.CertPEM()) != string(ca.CertPEM()) || string(again.KeyPEM()) != string(ca.KeyPEM()) {
		t.Error("Load changed the PEM")
	}
	certPEM, _, err := again.Issue("node-1", []string{"node-1"}, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := parseCert(t, certPEM).Verify(x509.VerifyOptions{Roots: pool(t, ca), DNSName: "node-1"}); err != nil {
		t.Errorf("cert from the loaded CA does not verify against the original: %v", err)
	}

	other := newCA(t, "other CA")
	leafPEM, leafKey, err := ca.Issue("leaf", nil, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	bad := []struct {
		name          string
		certPEM, keyP []byte
	}{
		{"mismatched key", ca.CertPEM(), other.KeyPEM()},
		{"leaf is not a CA", leafPEM, leafKey},
		{"empty cert", nil, ca.KeyPEM()},
		{"empty key", ca.CertPEM(), nil},
		{"key in cert slot", ca.KeyPEM(), ca.KeyPEM()},
	}
	for _, tc := range bad {
		if _, err := devca.Load(tc.certPEM, tc.keyP); err == nil {
			t.Errorf("%s: Load succeeded", tc.name)
		}
	}
}

func TestBadArguments(t *testing.T) {
	if _, err := devca.NewCA("", time.Hour); err == nil {
		t.Error("NewCA with empty name succeeded")
	}
	if _, err := devca.NewCA("x", 0); err == nil {
		t.Error("NewCA with zero validity succeeded")
	}
	ca := newCA(t, "dev CA")
	if _, _, err := ca.Issue("", nil, nil, time.Hour); err == nil {
		t.Error("Issue with empty CN succeeded")
	}
	if _, _, err := ca.Issue("x", nil, nil, -time.Second); err == nil {
		t.Error("Issue with negative validity succeeded")
	}
}

// mtlsConfigs returns a server config requiring client certs from ca, and a
// client config trusting ca and presenting clientCert.
func mtlsConfigs(t *testing.T, ca *devca.CA, serverCert, clientCert tls.Certificate) (server, client *tls.Config) {
	t.Helper()
	server = &tls.Config{
		Certificates: []tls.Certificate{serverCert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool(t, ca),
		MinVersion:   tls.VersionTLS13,
	}
	client = &tls.Config{
		Certificates: []tls.Certificate{clientCert},
		RootCAs:      pool(t, ca),
		ServerName:   "node-1",
		MinVersion:   tls.VersionTLS13,
	}
	return server, client
}

func keyPair(t *testing.T, ca *devca.CA, cn string) tls.Certificate {
	t.Helper()
	certPEM, keyPEM, err := ca.Issue(cn, []string{cn}, []net.IP{net.IPv4(127, 0, 0, 1)}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	kp, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

// exchange runs one server connection on a loopback listener: the server
// reads one byte and echoes it back. It returns the client's error and the
// server's.
func exchange(t *testing.T, server, client *tls.Config) (clientErr, serverErr error) {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", server)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 1)
		if _, err := io.ReadFull(c, buf); err != nil {
			done <- err
			return
		}
		_, err = c.Write(buf)
		done <- err
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	d := tls.Dialer{Config: client}
	conn, err := d.DialContext(ctx, "tcp", ln.Addr().String())
	if err == nil {
		err = func() error {
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := conn.Write([]byte{'x'}); err != nil {
				return err
			}
			buf := make([]byte, 1)
			if _, err := io.ReadFull(conn, buf); err != nil {
				return err
			}
			if buf[0] != 'x' {
				return errors.New("echo mismatch")
			}
			return nil
		}()
	}
	return err, <-done
}

func TestMutualTLSHandshake(t *testing.T) {
	ca := newCA(t, "dev CA")
	server, client := mtlsConfigs(t, ca, keyPair(t, ca, "node-1"), keyPair(t, ca, "node-2"))
	cerr, serr := exchange(t, server, client)
	if cerr != nil || serr != nil {
		t.Fatalf("exchange: client error %v, server error %v", cerr, serr)
	}
}

func TestMutualTLSRefusesForeignClient(t *testing.T) {
	ca := newCA(t, "dev CA")
	other := newCA(t, "other CA")
	intruder := keyPair(t, other, "intruder")
	server, client := mtlsConfigs(t, ca, keyPair(t, ca, "node-1"), intruder)
	// The Go client sends nothing when its certificate's issuer is not among
	// the server's acceptable CAs; force it to send, so the server's
	// verification is what refuses it.
	client.Certificates = nil
	client.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &intruder, nil }
	cerr, serr := exchange(t, server, client)
	if serr == nil {
		t.Fatal("server accepted a client certificate from another CA")
	}
	var unknown x509.UnknownAuthorityError
	if !errors.As(serr, &unknown) {
		t.Errorf("server error = %v, want an unknown authority error", serr)
	}
	if cerr == nil {
		t.Error("client exchange succeeded; want an error after the server refused it")
	}
}
