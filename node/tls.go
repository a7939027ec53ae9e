package node

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/ringlimit/ringlimit/internal/certfile"
	"github.com/ringlimit/ringlimit/internal/reload"
	"github.com/ringlimit/ringlimit/peer"
)

// certPoll is how often certificate files are re-read.
const certPoll = 2 * time.Second

// certs are a node's TLS material: for mutual TLS on the peer listener and
// its connections, and for the public APIs. Either may be nil (in clear).
type certs struct {
	peer *certfile.Set
	api  *certfile.Set
}

// loadCerts reads the files the flags name.
func loadCerts(cfg Config) (c certs, err error) {
	if cfg.peerTLS() {
		check := func(cert *tls.Certificate, roots *x509.CertPool) error {
			return checkNodeCert(cert, roots, cfg.Name)
		}
		if c.peer, err = certfile.Load(certfile.Files{CA: cfg.TLSCA, Cert: cfg.TLSCert, Key: cfg.TLSKey, Check: check}); err != nil {
			return c, fmt.Errorf("--tls-*: %w", err)
		}
	}
	if cfg.APITLSCert != "" {
		if c.api, err = certfile.Load(certfile.Files{CA: cfg.APITLSClientCA, Cert: cfg.APITLSCert, Key: cfg.APITLSKey}); err != nil {
			return c, fmt.Errorf("--api-tls-*: %w", err)
		}
	}
	return c, nil
}

// checkNodeCert accepts a node certificate that names the node and chains
// to one of its CAs for both TLS uses: loading one that does not (a
// certificate for another node, or a CA removed before the certificates it
// signed were replaced) would cut the node off from the others.
func checkNodeCert(cert *tls.Certificate, roots *x509.CertPool, name string) error {
	leaf := cert.Leaf
	inter := x509.NewCertPool()
	for _, der := range cert.Certificate[1:] {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return fmt.Errorf("the certificate's chain: %w", err)
		}
		inter.AddCert(c)
	}
	// The DNS names name the node; the common name only when there is none.
	if len(leaf.DNSNames) > 0 && !slices.Contains(leaf.DNSNames, name) {
		return fmt.Errorf("the certificate names %q (DNS names; its common name counts only without them), not this node's --name %q", leaf.DNSNames, name)
	}
	if len(leaf.DNSNames) == 0 && leaf.Subject.CommonName != name {
		return fmt.Errorf("the certificate names %q, not this node's --name %q", leaf.Subject.CommonName, name)
	}
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
			return fmt.Errorf("the certificate does not verify against --tls-ca: %w", err)
		}
	}
	return nil
}

// peerCerts is what the peer pool presents and trusts (nil: in clear).
func (c certs) peerCerts() peer.Certs {
	if c.peer == nil {
		return nil
	}
	return c.peer
}

// peerCreds returns the peer server's transport credentials: mutual TLS,
// with the connections known to s (peer.Server.Sweep), or none.
func (c certs) peerCreds(s *peer.Server) []grpc.ServerOption {
	if c.peer == nil {
		return nil
	}
	return []grpc.ServerOption{grpc.Creds(s.Credentials(credentials.NewTLS(c.peer.ServerConfig(true))))}
}

// peerRecheckDelay is how long after a change of the peer certificates or
// CAs the peer service verifies again the connections made before: the
// other nodes' pools have replaced theirs by then (a pool closes a retired
// connection 3 s after its last call could have started on it), so that no
// check in flight is cut.
const peerRecheckDelay = 3 * time.Second

// peerCertsChanged is what a change of the peer certificates or CAs does:
// every connection to the other nodes is made again with them at once (the
// old ones closed once their calls are done, peer.Pool.Renew), and
// peerRecheckDelay later on the node's clock the calls on the connections served that were
// made before are verified against the CAs (peer.Server.Recheck), and those
// whose client certificate no longer verifies are closed
// (peer.Server.Sweep). bg runs the delayed part, which ends with ctx.
func (n *Node) peerCertsChanged(ctx context.Context, log *slog.Logger, bg *sync.WaitGroup) func() {
	return func() {
		n.peers.Renew()
		bg.Go(func() {
			t := n.clock.NewTimer(peerRecheckDelay)
			defer t.Stop()
			select {
			case <-ctx.Done():
				return
			case <-t.C():
			}
			n.peerServer.Recheck()
			if closed := n.peerServer.Sweep(); closed > 0 {
				log.Warn("peer connections closed: their certificate no longer verifies against --tls-ca", "connections", closed)
			}
		})
	}
}

// apiCreds returns the public gRPC server's transport credentials.
func (c certs) apiCreds(clientAuth bool) []grpc.ServerOption {
	if c.api == nil {
		return nil
	}
	return []grpc.ServerOption{grpc.Creds(credentials.NewTLS(c.api.ServerConfig(clientAuth)))}
}

// watchers returns the reload.Watchers of the certificate files (cfg
// gives the Clock, Logger and Poll), counted in counter with what
// "peer_certificates" and "api_certificates"; peerChanged runs after each
// change of the peer ones.
func (c certs) watchers(cfg reload.Config, counter *prometheus.CounterVec, peerChanged func()) ([]*reload.Watcher, error) {
	var ws []*reload.Watcher
	for _, l := range []struct {
		name    string
		set     *certfile.Set
		changed func()
	}{{"peer", c.peer, peerChanged}, {"api", c.api, nil}} {
		if l.set == nil {
			continue
		}
		cfg := cfg
		cfg.Results = counter.MustCurryWith(prometheus.Labels{"what": l.name + "_certificates"})
		cfg.Changed = l.changed
		w, err := l.set.Watcher(cfg)
		if err != nil {
			return nil, err
		}
		ws = append(ws, w)
	}
	return ws, nil
}

// registerSecurity exports whether the node runs exposed in clear
// (--insecure) and when its certificates expire.
func (c certs) registerSecurity(reg prometheus.Registerer, cfg Config) error {
	insecure := 0.0
	if cfg.Exposed() {
		insecure = 1
	}
	cs := []prometheus.Collector{prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "ringlimit_insecure",
		Help: "1 when a peer or gossip address other machines reach runs without mutual TLS or a gossip key (--insecure).",
	}, func() float64 { return insecure })}
	for _, l := range []struct {
		name string
		set  *certfile.Set
	}{{"peer", c.peer}, {"api", c.api}} {
		if l.set == nil {
			continue
		}
		cs = append(cs, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "ringlimit_tls_certificate_expiry_timestamp_seconds",
			Help:        "When the certificate the listener presents expires (Unix time); re-read with the files.",
			ConstLabels: prometheus.Labels{"listener": l.name},
		}, func() float64 { return float64(l.set.NotAfter().Unix()) }))
	}
	for _, col := range cs {
		if err := reg.Register(col); err != nil {
			return err
		}
	}
	return nil
}
