package certfile_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/clock"
	"github.com/ringlimit/ringlimit/internal/certfile"
	"github.com/ringlimit/ringlimit/internal/devca"
	"github.com/ringlimit/ringlimit/internal/reload"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
)

// files are the paths of a set's PEM files in a test's directory.
type files struct{ ca, cert, key string }

func newFiles(t *testing.T) files {
	dir := t.TempDir()
	return files{filepath.Join(dir, "ca.pem"), filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")}
}

func (f files) all() certfile.Files { return certfile.Files{CA: f.ca, Cert: f.cert, Key: f.key} }

// write replaces path with data in one rename, as a careful operator (or a
// secret mounter) does: a reload never reads half a file.
func write(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func newCA(t *testing.T, name string) *devca.CA {
	t.Helper()
	ca, err := devca.NewCA(name, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// leaf is an issued certificate with its key, and its serial.
type leaf struct {
	cert, key []byte
	serial    *big.Int
}

func issue(t *testing.T, ca *devca.CA, name string) leaf {
	t.Helper()
	c, k, err := ca.Issue(name, []string{name}, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(c)
	x, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return leaf{c, k, x.SerialNumber}
}

// writeSet writes ca's certificate and l's certificate and key to f.
func writeSet(t *testing.T, f files, ca *devca.CA, l leaf) {
	t.Helper()
	write(t, f.ca, ca.CertPEM())
	write(t, f.cert, l.cert)
	write(t, f.key, l.key)
}

func load(t *testing.T, f certfile.Files) *certfile.Set {
	t.Helper()
	s, err := certfile.Load(f)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func serial(s *certfile.Set) *big.Int { return s.Certificate().Leaf.SerialNumber }

func wantSerial(t *testing.T, s *certfile.Set, want *big.Int, what string) {
	t.Helper()
	if got := serial(s); got.Cmp(want) != 0 {
		t.Fatalf("%s: certificate serial %x, want %x", what, got, want)
	}
}

// verifies reports whether l's certificate chains to s's CA pool.
func verifies(t *testing.T, s *certfile.Set, l leaf) bool {
	t.Helper()
	c, err := tls.X509KeyPair(l.cert, l.key)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Leaf.Verify(x509.VerifyOptions{Roots: s.Roots(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	return err == nil
}

func TestLoadValidSet(t *testing.T) {
	f := newFiles(t)
	ca := newCA(t, "CA")
	l := issue(t, ca, "node-1")
	writeSet(t, f, ca, l)
	s := load(t, f.all())
	wantSerial(t, s, l.serial, "Load")
	if !verifies(t, s, l) {
		t.Fatal("the certificate does not chain to the loaded CA pool")
	}
	if got, want := s.NotAfter(), s.Certificate().Leaf.NotAfter; got.IsZero() || !got.Equal(want) {
		t.Fatalf("NotAfter = %v, want %v", got, want)
	}

	onlyCA := load(t, certfile.Files{CA: f.ca})
	if onlyCA.Certificate() != nil || !onlyCA.NotAfter().IsZero() || !verifies(t, onlyCA, l) {
		t.Fatalf("CA only: certificate %v, NotAfter %v; want none, and a pool that verifies", onlyCA.Certificate(), onlyCA.NotAfter())
	}
	onlyCert := load(t, certfile.Files{Cert: f.cert, Key: f.key})
	if onlyCert.Roots() != nil {
		t.Fatal("certificate only: a CA pool was loaded")
	}
	wantSerial(t, onlyCert, l.serial, "certificate only")
}

func TestLoadErrors(t *testing.T) {
	f := newFiles(t)
	ca := newCA(t, "CA")
	l, other := issue(t, ca, "node-1"), issue(t, ca, "node-2")
	bad := filepath.Join(filepath.Dir(f.ca), "bad.pem")
	writeSet(t, f, ca, l)
	for _, tc := range []struct {
		name    string
		content []byte // written to bad.pem
		files   certfile.Files
		want    string
	}{
		{"cert without key", nil, certfile.Files{CA: f.ca, Cert: f.cert},
			"certfile: a certificate and its key go together: give both files or neither"},
		{"key without cert", nil, certfile.Files{Key: f.key},
			"certfile: a certificate and its key go together: give both files or neither"},
		{"no files", nil, certfile.Files{}, "certfile: no files"},
		{"key of another certificate", other.key, certfile.Files{CA: f.ca, Cert: f.cert, Key: bad},
			"certfile: " + f.cert + " and " + bad + ": tls: private key does not match public key"},
		{"CA file with a leaf certificate", l.cert, certfile.Files{CA: bad},
			"certfile: " + bad + `: certificate "node-1" is not a CA`},
		{"CA file with a key", l.key, certfile.Files{CA: bad},
			"certfile: " + bad + `: a "PRIVATE KEY" block where CA certificates were expected`},
		{"CA file of garbage", []byte("not a certificate\n"), certfile.Files{CA: bad},
			"certfile: " + bad + ": data that is not PEM"},
		{"CA file with garbage after the CA", append(ca.CertPEM(), "junk"...), certfile.Files{CA: bad},
			"certfile: " + bad + ": data that is not PEM"},
		{"empty CA file", []byte{}, certfile.Files{CA: bad}, "certfile: " + bad + ": no CA certificate"},
		{"certificate file of garbage", []byte("garbage"), certfile.Files{Cert: bad, Key: f.key},
			"certfile: " + bad + " and " + f.key + ": tls: failed to find any PEM data in certificate input"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.content != nil {
				write(t, bad, tc.content)
			}
			s, err := certfile.Load(tc.files)
			if err == nil || err.Error() != tc.want {
				t.Fatalf("Load = %v, %v; want the error %q", s, err, tc.want)
			}
		})
	}
	t.Run("missing file", func(t *testing.T) {
		gone := filepath.Join(filepath.Dir(f.ca), "gone.pem")
		_, err := certfile.Load(certfile.Files{CA: gone})
		if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), gone) {
			t.Fatalf("Load of a missing file: %v, want a not-exist error naming %s", err, gone)
		}
	})
}

func TestReloadRotatesCertificate(t *testing.T) {
	f := newFiles(t)
	ca := newCA(t, "CA")
	old := issue(t, ca, "node-1")
	writeSet(t, f, ca, old)
	s := load(t, f.all())
	if changed, err := s.Reload(); changed || err != nil {
		t.Fatalf("Reload of unchanged files = %v, %v; want false, nil", changed, err)
	}
	next := issue(t, ca, "node-1")
	write(t, f.cert, next.cert)
	write(t, f.key, next.key)
	if changed, err := s.Reload(); !changed || err != nil {
		t.Fatalf("Reload after a rotation = %v, %v; want true, nil", changed, err)
	}
	wantSerial(t, s, next.serial, "after the rotation")
	if changed, err := s.Reload(); changed || err != nil {
		t.Fatalf("second Reload = %v, %v; want false, nil", changed, err)
	}
}

// A rotation written in two steps: a reload between them sees the new
// certificate with the old key, fails and keeps the old pair; the next one,
// after the key, takes the new pair.
func TestReloadMismatchedPairKeepsOld(t *testing.T) {
	f := newFiles(t)
	ca := newCA(t, "CA")
	old, next := issue(t, ca, "node-1"), issue(t, ca, "node-1")
	writeSet(t, f, ca, old)
	s := load(t, f.all())
	write(t, f.cert, next.cert)
	for i := range 2 {
		changed, err := s.Reload()
		if changed || err == nil || !strings.HasSuffix(err.Error(), "tls: private key does not match public key") {
			t.Fatalf("Reload %d with the new certificate and the old key = %v, %v; want a mismatch error", i, changed, err)
		}
		wantSerial(t, s, old.serial, "after a failed reload")
	}
	write(t, f.key, next.key)
	if changed, err := s.Reload(); !changed || err != nil {
		t.Fatalf("Reload once the key is written = %v, %v; want true, nil", changed, err)
	}
	wantSerial(t, s, next.serial, "after the key is written")
}

// During a CA rotation the bundle holds the old and the new CA: both
// verify, and dropping the old one stops it verifying.
func TestCABundle(t *testing.T) {
	f := newFiles(t)
	ca1, ca2, ca3 := newCA(t, "CA 1"), newCA(t, "CA 2"), newCA(t, "CA 3")
	l1, l2, l3 := issue(t, ca1, "node-1"), issue(t, ca2, "node-2"), issue(t, ca3, "node-3")
	write(t, f.ca, append(ca1.CertPEM(), ca2.CertPEM()...))
	s := load(t, certfile.Files{CA: f.ca})
	if !verifies(t, s, l1) || !verifies(t, s, l2) || verifies(t, s, l3) {
		t.Fatalf("bundle of CA 1 and CA 2: verifies %v, %v, %v; want true, true, false",
			verifies(t, s, l1), verifies(t, s, l2), verifies(t, s, l3))
	}
	write(t, f.ca, ca2.CertPEM())
	if changed, err := s.Reload(); !changed || err != nil {
		t.Fatalf("Reload = %v, %v", changed, err)
	}
	if verifies(t, s, l1) || !verifies(t, s, l2) {
		t.Fatal("after CA 1 left the bundle: want only CA 2's certificate to verify")
	}
}

func TestCheckRefusalKeepsState(t *testing.T) {
	f := newFiles(t)
	ca := newCA(t, "CA")
	old, next := issue(t, ca, "node-1"), issue(t, ca, "node-1")
	writeSet(t, f, ca, old)
	var refuse atomic.Bool
	var calls atomic.Int32
	files := f.all()
	files.Check = func(cert *tls.Certificate, roots *x509.CertPool) error {
		calls.Add(1)
		if cert == nil || roots == nil {
			t.Errorf("Check given certificate %v and roots %v; want both", cert, roots)
		}
		if refuse.Load() {
			return errors.New("refused")
		}
		return nil
	}
	refuse.Store(true)
	if s, err := certfile.Load(files); err == nil || err.Error() != "certfile: refused" {
		t.Fatalf("Load refused by Check = %v, %v; want the error %q", s, err, "certfile: refused")
	}
	refuse.Store(false)
	s := load(t, files)
	write(t, f.cert, next.cert)
	write(t, f.key, next.key)
	refuse.Store(true)
	if changed, err := s.Reload(); changed || err == nil || err.Error() != "certfile: refused" {
		t.Fatalf("Reload refused by Check = %v, %v", changed, err)
	}
	wantSerial(t, s, old.serial, "after a refused reload")
	refuse.Store(false)
	if changed, err := s.Reload(); !changed || err != nil {
		t.Fatalf("Reload Check accepts = %v, %v; want true, nil", changed, err)
	}
	wantSerial(t, s, next.serial, "after an accepted reload")
	if n := calls.Load(); n != 4 {
		t.Fatalf("Check called %d times, want 4 (two loads, two reloads)", n)
	}
}

// syncBuffer is a bytes.Buffer for a logger and a test to share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func (b *syncBuffer) count(s string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Count(b.b.String(), s)
}

// The set's Watcher takes a rotation within a few polls, logs a failed reload once
// however often it fails, and stops with its context.
func TestWatch(t *testing.T) {
	const every = 20 * time.Millisecond
	f := newFiles(t)
	ca := newCA(t, "CA")
	old, next := issue(t, ca, "node-1"), issue(t, ca, "node-1")
	writeSet(t, f, ca, old)
	s := load(t, f.all())
	var logs syncBuffer
	changed := make(chan struct{}, 10)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	w, err := s.Watcher(reload.Config{Clock: clock.System(), Poll: every, DisableNotify: true,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)), Changed: func() { changed <- struct{}{} }})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(done)
		w.Run(ctx)
	}()
	defer func() {
		cancel()
		<-done
	}()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		testkit.WaitFor(t, 5*time.Second, "Watch: "+what, func() error {
			if !cond() {
				return fmt.Errorf("not yet (polls every %v); log:\n%s", every, logs.String())
			}
			return nil
		})
	}

	write(t, f.cert, next.cert) // the key comes later
	const failed = "certificates not reloaded; keeping the ones loaded before"
	waitFor("failed reload logged", func() bool { return logs.count(failed) > 0 })
	time.Sleep(5 * every) // five more polls of the same mismatched pair
	if n := logs.count(failed); n != 1 {
		t.Fatalf("the same failure logged %d times, want once", n)
	}
	wantSerial(t, s, old.serial, "while the key is not yet written")

	write(t, f.key, next.key)
	select {
	case <-changed:
	case <-time.After(5 * time.Second):
		t.Fatalf("Watch: the rotation not taken within 5s; log:\n%s", logs.String())
	}
	wantSerial(t, s, next.serial, "after Watch took the rotation")
	if n := logs.count("certificates reloaded"); n != 1 {
		t.Fatalf("%d reloads logged, want 1", n)
	}
	if len(changed) != 0 {
		t.Fatal("changed called more than once for one rotation")
	}
}
