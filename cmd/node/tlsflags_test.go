package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
	pb "github.com/ringlimit/ringlimit/proto/ringlimitv1"
)

// TestSecureByDefault: a peer or gossip address other machines can reach
// needs mutual TLS and a gossip key, or --insecure; TLS flags come in
// complete sets.
func TestSecureByDefault(t *testing.T) {
	dir := t.TempDir()
	keys := filepath.Join(dir, "gossip.keys")
	writeKeys(t, keys, newTestKey(t))
	tlsFlags := []string{"--tls-ca", "ca.pem", "--tls-cert", "n.pem", "--tls-key", "n-key.pem"}
	for _, tc := range []struct {
		name    string
		args    []string
		wantErr []string // substrings of the error; none: accepted
		exposed bool
	}{
		{"loopback in clear", nil, nil, false},
		{"localhost in clear", []string{"--peer", "localhost:9190", "--gossip", "localhost:7946"}, nil, false},
		{"peer exposed in clear", []string{"--peer", "10.0.0.1:9190"}, []string{"--peer 10.0.0.1:9190", "--tls-ca", "--gossip-key-file", "--insecure"}, false},
		{"gossip exposed, TLS but no key", append([]string{"--gossip", "10.0.0.1:7946"}, tlsFlags...), []string{"--gossip 10.0.0.1:7946", "--gossip-key-file"}, false},
		{"peer exposed, key but no TLS", []string{"--peer", "10.0.0.1:9190", "--gossip-key-file", keys}, []string{"--tls-ca, --tls-cert and --tls-key"}, false},
		{"exposed with both", append([]string{"--peer", "10.0.0.1:9190", "--gossip", "10.0.0.1:7946", "--gossip-key-file", keys}, tlsFlags...), nil, false},
		{"exposed with --insecure", []string{"--peer", "10.0.0.1:9190", "--insecure"}, nil, true},
		{"a host name is not loopback", []string{"--gossip", "node-1.internal:7946"}, []string{"--gossip node-1.internal:7946"}, false},
		{"two of three TLS files", []string{"--tls-ca", "ca.pem", "--tls-cert", "n.pem"}, []string{"all three or none"}, false},
		{"API cert without key", []string{"--api-tls-cert", "a.pem"}, []string{"both or neither"}, false},
		{"client CA without API cert", []string{"--api-tls-client-ca", "ca.pem"}, []string{"needs --api-tls-cert"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := parseConfig(append([]string{"--name", "n"}, tc.args...), func(string) string { return "" }, io.Discard)
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if cfg.Exposed() != tc.exposed {
					t.Fatalf("exposed() = %v, want %v", cfg.Exposed(), tc.exposed)
				}
				return
			}
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// TestNodeCertificateMustNameNode: a node refuses to start with a
// certificate for another name, or one its CA file does not sign.
func TestNodeCertificateMustNameNode(t *testing.T) {
	dir := t.TempDir()
	p := testkit.NewPKI(t, dir, "prod")
	other := testkit.NewPKI(t, dir, "other")
	ca := filepath.Join(dir, "prod-ca.pem")
	cert, key := p.Issue("node-2", "node-2")
	ocert, okey := other.Issue("other-n1", "n1")
	// Common name n1, DNS name node-3: the DNS names name the node.
	cnPEM, cnKeyPEM, err := p.CA.Issue("n1", []string{"node-3"}, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cnCert, cnKey := p.Write("cn-n1.pem", cnPEM), p.Write("cn-n1-key.pem", cnKeyPEM)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tc := range []struct{ cert, key, want string }{
		{cert, key, `not this node's --name "n1"`},
		{ocert, okey, "does not verify against --tls-ca"},
		{cnCert, cnKey, `the certificate names ["node-3"] (DNS names; its common name counts only without them), not this node's --name "n1"`},
	} {
		cfg, err := parseConfig([]string{"--name", "n1", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--peer", "127.0.0.1:0", "--gossip", "127.0.0.1:0",
			"--tls-ca", ca, "--tls-cert", tc.cert, "--tls-key", tc.key}, func(string) string { return "" }, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		n, err := startNode(t.Context(), cfg, log)
		if err == nil {
			n.Close(context.Background())
			t.Fatalf("started with %s", tc.cert)
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %q does not say %q", err, tc.want)
		}
	}
}

// TestAPITLS: with --api-tls-cert, --api-tls-key and --api-tls-client-ca,
// the public HTTP and gRPC APIs answer over TLS to a client with a
// certificate of that CA, and refuse one without.
func TestAPITLS(t *testing.T) {
	h := newHarness(t)
	dir := t.TempDir()
	p := testkit.NewPKI(t, dir, "api")
	cert, key := p.Issue("server", "ringlimit.test")
	n, _ := h.startArgs("n1", "--api-tls-cert", cert, "--api-tls-key", key, "--api-tls-client-ca", filepath.Join(dir, "api-ca.pem"))
	roots := x509.NewCertPool()
	roots.AddCert(p.CA.Certificate())
	client := p.KeyPair("client")
	withCert := &tls.Config{RootCAs: roots, ServerName: "ringlimit.test", Certificates: []tls.Certificate{client}}
	noCert := &tls.Config{RootCAs: roots, ServerName: "ringlimit.test"}

	body := checkBody("tls:1", inlineLimit{count: 3, per: "1h"})
	post := func(cfg *tls.Config, scheme string) (int, error) {
		tr := &http.Transport{TLSClientConfig: cfg}
		defer tr.CloseIdleConnections()
		c := &http.Client{Transport: tr, Timeout: 5 * time.Second}
		resp, err := c.Post(scheme+"://"+httpAddr(n)+"/v1/check", "application/json", strings.NewReader(body))
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, nil
	}
	if st, err := post(withCert, "https"); err != nil || st != http.StatusOK {
		t.Fatalf("HTTPS with a client certificate: %d %v, want 200", st, err)
	}
	if _, err := post(noCert, "https"); err == nil {
		t.Error("HTTPS without a client certificate succeeded")
	}
	if st, err := post(nil, "http"); err == nil && st == http.StatusOK {
		t.Error("plain HTTP succeeded")
	}

	call := func(cfg *tls.Config) (*pb.CheckResponse, error) {
		conn, err := grpc.NewClient(n.GRPCAddr(), grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		if err != nil {
			return nil, err
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return pb.NewRateLimiterClient(conn).Check(ctx, &pb.CheckRequest{Checks: []*pb.Check{{Key: "tls:1",
			Limit: &pb.Limit{Limit: 3, PerMs: int64(time.Hour / time.Millisecond)}}}})
	}
	resp, err := call(withCert)
	if err != nil || len(resp.GetDecisions()) != 1 || !resp.GetDecisions()[0].GetAllowed() || resp.GetDecisions()[0].GetRemaining() != 1 {
		t.Fatalf("gRPC over TLS with a client certificate: %v %v, want allowed with 1 remaining", resp, err)
	}
	if _, err := call(noCert); err == nil {
		t.Error("gRPC without a client certificate succeeded")
	}
}
