package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func runOK(t *testing.T, args ...string) {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := run(args, &out, &errOut); code != 0 {
		t.Fatalf("run(%q) = %d, stderr: %s", args, code, errOut.String())
	}
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	if block == nil {
		t.Fatalf("%s: no PEM block", path)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestGenerateKeepsCAAndRenews(t *testing.T) {
	dir := t.TempDir()
	runOK(t, "-dir", dir, "-nodes", "node-1,node-2", "-ip", "127.0.0.1,::1", "-days", "2")

	caPEM := readFile(t, filepath.Join(dir, "ca.pem"))
	caKey := readFile(t, filepath.Join(dir, "ca-key.pem"))
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatal("ca.pem holds no certificate")
	}
	for _, n := range []string{"node-1", "node-2"} {
		c := readCert(t, filepath.Join(dir, n+".pem"))
		if c.Subject.CommonName != n || !slices.Equal(c.DNSNames, []string{n}) {
			t.Errorf("%s: CN %q DNS %v", n, c.Subject.CommonName, c.DNSNames)
		}
		if len(c.IPAddresses) != 2 || !c.IPAddresses[0].Equal(net.IPv4(127, 0, 0, 1)) || !c.IPAddresses[1].Equal(net.IPv6loopback) {
			t.Errorf("%s: IPs %v", n, c.IPAddresses)
		}
		for _, u := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
			if _, err := c.Verify(x509.VerifyOptions{Roots: roots, DNSName: n, KeyUsages: []x509.ExtKeyUsage{u}}); err != nil {
				t.Errorf("%s: verify %v: %v", n, u, err)
			}
		}
		if _, err := tls.LoadX509KeyPair(filepath.Join(dir, n+".pem"), filepath.Join(dir, n+"-key.pem")); err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}
	for _, name := range []string{"ca-key.pem", "node-1-key.pem", "node-2-key.pem"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %v, want 0600", name, fi.Mode().Perm())
		}
	}

	node1 := readFile(t, filepath.Join(dir, "node-1.pem"))
	serial1 := readCert(t, filepath.Join(dir, "node-1.pem")).SerialNumber

	// Second run adds a node: same CA, node-1 kept.
	runOK(t, "-dir", dir, "-nodes", "node-1,node-2,node-3")
	if !bytes.Equal(readFile(t, filepath.Join(dir, "ca.pem")), caPEM) || !bytes.Equal(readFile(t, filepath.Join(dir, "ca-key.pem")), caKey) {
		t.Error("second run changed the CA")
	}
	if !bytes.Equal(readFile(t, filepath.Join(dir, "node-1.pem")), node1) {
		t.Error("second run without -renew changed node-1.pem")
	}
	if _, err := readCert(t, filepath.Join(dir, "node-3.pem")).Verify(x509.VerifyOptions{Roots: roots, DNSName: "node-3"}); err != nil {
		t.Errorf("node-3 added later does not verify against the original CA: %v", err)
	}

	// -renew re-issues node-1 under the same CA.
	runOK(t, "-dir", dir, "-nodes", "node-1", "-renew")
	if !bytes.Equal(readFile(t, filepath.Join(dir, "ca.pem")), caPEM) {
		t.Error("-renew changed the CA")
	}
	renewed := readCert(t, filepath.Join(dir, "node-1.pem"))
	if renewed.SerialNumber.Cmp(serial1) == 0 {
		t.Errorf("-renew kept serial %v", serial1)
	}
	if _, err := renewed.Verify(x509.VerifyOptions{Roots: roots, DNSName: "node-1"}); err != nil {
		t.Errorf("renewed node-1 does not verify: %v", err)
	}
	if _, err := tls.LoadX509KeyPair(filepath.Join(dir, "node-1.pem"), filepath.Join(dir, "node-1-key.pem")); err != nil {
		t.Errorf("renewed node-1 key pair: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "node-1-key.pem")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("renewed key mode: %v %v", fi.Mode().Perm(), err)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp") {
			t.Errorf("temporary file left behind: %s", e.Name())
		}
	}
}

func TestBadFlags(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-nodes", "node-1"}, "-dir is required"},
		{[]string{"-dir", dir}, "-nodes is required"},
		{[]string{"-dir", dir, "-nodes", "node-1,,node-2"}, "empty node name"},
		{[]string{"-dir", dir, "-nodes", "node-1,node-1"}, "listed twice"},
		{[]string{"-dir", dir, "-nodes", "../etc"}, "only lowercase"},
		{[]string{"-dir", dir, "-nodes", "Node_1"}, "only lowercase"},
		{[]string{"-dir", dir, "-nodes", "-node"}, "must not start"},
		{[]string{"-dir", dir, "-nodes", "ca"}, "reserved"},
		{[]string{"-dir", dir, "-nodes", "node-1", "-ip", "localhost"}, "not an IP address"},
		{[]string{"-dir", dir, "-nodes", "node-1", "-days", "0"}, "-days must be"},
		{[]string{"-dir", dir, "-nodes", "node-1", "-ca-days", "-1"}, "-ca-days must be"},
		{[]string{"-dir", dir, "-nodes", "node-1", "extra"}, "unexpected arguments"},
		{[]string{"-dir", dir, "-bogus"}, "flag provided but not defined"},
	} {
		var out, errOut bytes.Buffer
		if code := run(tc.args, &out, &errOut); code != 2 {
			t.Errorf("run(%q) = %d, want 2", tc.args, code)
		}
		if !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("run(%q) stderr %q, want it to contain %q", tc.args, errOut.String(), tc.want)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("bad flags wrote files: %v", entries)
	}
}

func TestHalfCARefused(t *testing.T) {
	dir := t.TempDir()
	runOK(t, "-dir", dir, "-nodes", "node-1")
	if err := os.Remove(filepath.Join(dir, "ca-key.pem")); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"-dir", dir, "-nodes", "node-2"}, &out, &errOut); code != 1 {
		t.Fatalf("run with ca.pem but no ca-key.pem = %d, want 1", code)
	}
	if !strings.Contains(errOut.String(), "only one of") {
		t.Errorf("stderr %q", errOut.String())
	}
}
