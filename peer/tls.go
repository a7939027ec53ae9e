package peer

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	grpcpeer "google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/clock"
)

// Certs is where the peer transport takes its TLS material: this node's
// certificate and the CAs it trusts, read again at every handshake, so
// that replacing them (internal/certfile.Set) rotates them with no
// restart. A node's certificate names the node: its member name is one of
// the certificate's DNS names or, for a certificate without DNS names, its
// subject common name.
type Certs interface {
	Certificate() *tls.Certificate
	Roots() *x509.CertPool
	// Generation changes whenever Certificate or Roots does.
	Generation() uint64
}

// AuthWait is how long the peer service waits for gossip to tell it of a
// member whose certificate it was shown before it refuses the call: a node
// that just joined may dial the others before they hear of it.
const AuthWait = 2 * time.Second

// clientTLS is the TLS configuration to dial the member named member: it
// presents this node's current certificate, and accepts only a server
// certificate that chains to the current CAs and names member.
func clientTLS(c Certs, member string) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		// The chain and the name are verified by VerifyConnection,
		// against the CAs of the moment (a tls.Config's RootCAs is fixed).
		InsecureSkipVerify: true,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			if cert := c.Certificate(); cert != nil {
				return cert, nil
			}
			return nil, errors.New("peer: no certificate to present")
		},
		VerifyConnection: func(cs tls.ConnectionState) error {
			leaf, err := verifyChain(cs.PeerCertificates, c.Roots(), x509.ExtKeyUsageServerAuth)
			if err != nil {
				return err
			}
			// Not cs.ServerName: it is empty when the address is an IP.
			if !slices.Contains(certNames(leaf), member) {
				return fmt.Errorf("peer: the server dialled as member %q presents a certificate for %q", member, certNames(leaf))
			}
			return nil
		},
	}
}

// verifyChain verifies that certs (leaf first) chain to roots for usage,
// and returns the leaf.
func verifyChain(certs []*x509.Certificate, roots *x509.CertPool, usage x509.ExtKeyUsage) (*x509.Certificate, error) {
	if len(certs) == 0 {
		return nil, errors.New("peer: no certificate presented")
	}
	if roots == nil {
		return nil, errors.New("peer: no CA to verify certificates against")
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	if _, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
		return nil, fmt.Errorf("peer: certificate %q: %w", certs[0].Subject.CommonName, err)
	}
	return certs[0], nil
}

// certNames returns the names a certificate gives its holder: its DNS
// names, or when it has none, its subject common name (as TLS clients
// have done since RFC 6125: a certificate with DNS names does not name its
// common name too).
func certNames(c *x509.Certificate) []string {
	if len(c.DNSNames) > 0 {
		return c.DNSNames
	}
	if c.Subject.CommonName != "" {
		return []string{c.Subject.CommonName}
	}
	return nil
}

// authorize returns nil when the call of ctx may act as the member from,
// or the status error that refuses it.
func (s *Server) authorize(ctx context.Context, from string) error {
	if s.known == nil {
		return nil
	}
	if from == "" {
		s.m.unauthenticated.Inc()
		return status.Error(codes.PermissionDenied, "peer: the call names no sender")
	}
	return s.authorizeAs(ctx, func(names []string) (string, bool) {
		return from, slices.Contains(names, from)
	})
}

// authorizeAny returns nil when the call of ctx comes from any member.
func (s *Server) authorizeAny(ctx context.Context) error {
	if s.known == nil {
		return nil
	}
	return s.authorizeAs(ctx, func(names []string) (string, bool) {
		for _, n := range names {
			if s.known(n) {
				return n, true
			}
		}
		return names[len(names)-1], true // waited for below
	})
}

// authorizeAs checks the call's verified client certificate: pick chooses,
// from the names it gives, the member the call acts as (false: the
// certificate does not name the sender). That member is waited for up to
// AuthWait.
func (s *Server) authorizeAs(ctx context.Context, pick func(names []string) (string, bool)) error {
	p, ok := grpcpeer.FromContext(ctx)
	var info credentials.TLSInfo
	gen, guarded := uint64(0), false
	if ok {
		switch ai := p.AuthInfo.(type) {
		case credentials.TLSInfo:
			info = ai
		case guardedInfo:
			info, gen, guarded = ai.TLSInfo, ai.gen, true
		default:
			ok = false
		}
	}
	if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		s.m.unauthenticated.Inc()
		return status.Error(codes.Unauthenticated, "peer: a verified client certificate is required")
	}
	if ck := s.checked.Load(); ck != nil && (!guarded || gen < ck.gen) {
		// The connection was made before the CAs Recheck adopted: the
		// certificate must verify against them too.
		if _, err := verifyChain(info.State.PeerCertificates, ck.roots, x509.ExtKeyUsageClientAuth); err != nil {
			s.m.unauthenticated.Inc()
			return status.Errorf(codes.Unauthenticated, "peer: the client certificate no longer verifies: %v", err)
		}
	}
	names := certNames(info.State.VerifiedChains[0][0])
	if len(names) == 0 {
		s.m.unauthenticated.Inc()
		return status.Error(codes.PermissionDenied, "peer: the certificate names no one")
	}
	name, ok := pick(names)
	if !ok {
		s.m.unauthenticated.Inc()
		return status.Errorf(codes.PermissionDenied, "peer: the certificate names %q, not the sender %q", names, name)
	}
	deadline := s.clock.Now().Add(AuthWait)
	for !s.known(name) {
		if deadline.Before(s.clock.Now()) {
			s.m.unauthenticated.Inc()
			return status.Errorf(codes.PermissionDenied, "peer: %q is not a member of this cluster", name)
		}
		if !clock.Sleep(s.clock, 20*time.Millisecond, ctx.Done()) {
			return status.FromContextError(ctx.Err()).Err()
		}
	}
	return nil
}
