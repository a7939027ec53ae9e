package peer

import (
	"crypto/x509"
	"net"
	"sync"

	"google.golang.org/grpc/credentials"
)

// A certificate is verified when a connection is made; a CA or a node
// certificate that is then replaced must not leave that connection
// trusted. After a change the client side (Pool.Renew) replaces every
// connection at once, and retires the old ones once their calls are done;
// some time later (long enough for the other nodes to have done the same)
// the server side, with ServerConfig.Verify:
//
//   - adopts the CAs of the moment (Recheck): from then on, every call on
//     a connection made before is verified against them again, and a
//     Check stream's sender on its next batch, and
//   - closes every connection it serves whose client certificate no
//     longer verifies against them (Sweep).

// checkedCAs are the CAs Recheck adopted, and their generation.
type checkedCAs struct {
	roots *x509.CertPool
	gen   uint64
}

// checkedGen returns the generation of the CAs Recheck adopted last (0:
// none).
func (s *Server) checkedGen() uint64 {
	if ck := s.checked.Load(); ck != nil {
		return ck.gen
	}
	return 0
}

// Recheck adopts the CAs of the moment (ServerConfig.Verify's Certs):
// every later call on a connection made before, and the next batch of
// every Check stream, is refused Unauthenticated unless its client
// certificate verifies against them. Without ServerConfig.Verify it does
// nothing.
func (s *Server) Recheck() {
	if s.certs == nil {
		return
	}
	gen := s.certs.Generation() // before Roots: never newer than them
	s.checked.Store(&checkedCAs{roots: s.certs.Roots(), gen: gen})
}

// Credentials wraps creds, the peer server's TLS credentials, so that s
// knows the connections it serves: their client certificates are verified
// again on Sweep, and the generation of ServerConfig.Verify they were
// made under goes with each call. Without ServerConfig.Verify it returns
// creds.
func (s *Server) Credentials(creds credentials.TransportCredentials) credentials.TransportCredentials {
	if s.certs == nil {
		return creds
	}
	return &guardedCreds{TransportCredentials: creds, s: s}
}

// Sweep closes the connections s serves whose client certificate does not
// verify against the CAs Recheck adopted, and returns how many it closed.
func (s *Server) Sweep() int {
	ck := s.checked.Load()
	if ck == nil {
		return 0
	}
	roots := ck.roots
	s.connMu.Lock()
	var stale []*guardedConn
	for c := range s.conns {
		if _, err := verifyChain(c.certs, roots, x509.ExtKeyUsageClientAuth); err != nil {
			stale = append(stale, c)
		}
	}
	s.connMu.Unlock()
	for _, c := range stale {
		c.Close()
		s.m.certClosed.Inc()
	}
	return len(stale)
}

// guardedInfo is a served connection's TLS information and the generation
// of the server's Certs at its handshake.
type guardedInfo struct {
	credentials.TLSInfo
	gen uint64
}

// guardedCreds registers every connection it accepts with its server.
type guardedCreds struct {
	credentials.TransportCredentials
	s *Server
}

func (g *guardedCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	gen := g.s.certs.Generation()
	conn, ai, err := g.TransportCredentials.ServerHandshake(raw)
	if err != nil {
		return conn, ai, err
	}
	info, ok := ai.(credentials.TLSInfo)
	if !ok {
		return conn, ai, nil
	}
	c := &guardedConn{Conn: conn, s: g.s, certs: info.State.PeerCertificates}
	g.s.connMu.Lock()
	if g.s.conns == nil {
		g.s.conns = map[*guardedConn]struct{}{}
	}
	g.s.conns[c] = struct{}{}
	g.s.connMu.Unlock()
	return c, guardedInfo{TLSInfo: info, gen: gen}, nil
}

func (g *guardedCreds) Clone() credentials.TransportCredentials {
	return &guardedCreds{TransportCredentials: g.TransportCredentials.Clone(), s: g.s}
}

// guardedConn is a served connection, forgotten by its server when closed.
type guardedConn struct {
	net.Conn
	s     *Server
	certs []*x509.Certificate // the client's, leaf first
	once  sync.Once
}

func (c *guardedConn) Close() error {
	c.once.Do(func() {
		c.s.connMu.Lock()
		delete(c.s.conns, c)
		c.s.connMu.Unlock()
	})
	return c.Conn.Close()
}

// Renew replaces the connection to every member with a new one, made with
// the TLS material of the moment (Config.TLS), and retires the old ones:
// the calls in flight on them finish, new calls take the new ones, and the
// old ones are closed Grace later. Call it when Config.TLS changed, so that
// no connection outlives the certificates it was made with by more than
// Grace.
func (p *Pool) Renew() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	now := p.cfg.Clock.Now()
	for name, c := range p.conns {
		nc, err := dial(&p.cfg, &p.version, &p.rev, name, c.addr)
		if err != nil {
			p.cfg.Logger.Error("peer not reachable", "peer", name, "addr", c.addr, "err", err)
			continue
		}
		c.retireAt = now.Add(p.cfg.Grace)
		p.retired = append(p.retired, c)
		p.conns[name] = nc
	}
	p.publishLocked()
	if p.sweep == nil {
		p.sweep = p.cfg.Clock.AfterFunc(p.cfg.Grace, p.closeRetired)
	} else {
		p.sweep.Reset(p.cfg.Grace)
	}
}

// closeRetired closes the connections retired at least Grace ago.
func (p *Pool) closeRetired() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	stale := p.takeRetiredLocked(p.cfg.Clock.Now())
	p.mu.Unlock()
	for _, c := range stale {
		c.close()
	}
}
