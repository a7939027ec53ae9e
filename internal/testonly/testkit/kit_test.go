package testkit_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"os/exec"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

func TestPoll(t *testing.T) {
	n := 0
	if !testkit.Poll(5*time.Second, func() bool { n++; return n == 3 }) || n != 3 {
		t.Fatalf("Poll: cond held at call %d, want Poll to return true at call 3", n)
	}
	start := time.Now()
	if testkit.Poll(20*time.Millisecond, func() bool { return false }) {
		t.Fatal("Poll of a cond that never holds returned true")
	}
	if el := time.Since(start); el < 20*time.Millisecond {
		t.Fatalf("Poll gave up after %v, before its 20ms", el)
	}
	n = 0
	testkit.WaitFor(t, 5*time.Second, "the third call", func() error {
		if n++; n < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if n != 3 {
		t.Fatalf("WaitFor returned after %d calls, want 3", n)
	}
}

// Build builds a package once per run: a second call returns the same
// binary without building again.
func TestBuild(t *testing.T) {
	bin := testkit.Build(t, "./testdata/hello")
	fi, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	if again := testkit.Build(t, "./testdata/hello"); again != bin {
		t.Fatalf("second Build = %s, want %s", again, bin)
	}
	if fi2, err := os.Stat(bin); err != nil || !fi2.ModTime().Equal(fi.ModTime()) {
		t.Fatalf("the binary was built again: %v, %v", fi2, err)
	}
	out, err := exec.Command(bin).Output()
	if err != nil || string(out) != "hello\n" {
		t.Fatalf("%s: %q, %v", bin, out, err)
	}
	if _, err := testkit.BuildBinary("./testdata/missing"); err == nil {
		t.Fatal("BuildBinary of a missing package succeeded")
	}
}

// A certificate Issue writes verifies against the CA file NewPKI wrote and
// against Roots, for its name only.
func TestPKI(t *testing.T) {
	p := testkit.NewPKI(t, "", "test")
	certFile, keyFile := p.Issue("node-1", "node-1")
	kp, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(kp.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(p.CAFile())
	if err != nil {
		t.Fatal(err)
	}
	fromFile := x509.NewCertPool()
	if !fromFile.AppendCertsFromPEM(caPEM) {
		t.Fatal("no certificate in the CA file")
	}
	for name, roots := range map[string]*x509.CertPool{"CAFile": fromFile, "Roots": p.Roots()} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "node-1"}); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "node-2"}); err == nil {
			t.Errorf("%s: the certificate of node-1 verifies for node-2", name)
		}
	}
	other := testkit.NewPKI(t, "", "other")
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: other.Roots(), DNSName: "node-1"}); err == nil {
		t.Error("the certificate verifies against another CA")
	}
	if kp := p.KeyPair("client"); len(kp.Certificate) == 0 {
		t.Error("KeyPair: no certificate")
	}
}

// SlowServer holds a call until the caller gives up, and counts it.
func TestSlowServer(t *testing.T) {
	slow := testkit.NewSlowServer(nil)
	srv := grpc.NewServer(slow.ServerOptions()...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Stop()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-slow.Held // the server has the call
		cancel()
	}()
	_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if !errors.Is(ctx.Err(), context.Canceled) || err == nil {
		t.Fatalf("Check = %v with ctx %v, want a call held until cancelled", err, ctx.Err())
	}
}
