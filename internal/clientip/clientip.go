package clientip

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// Trusted is a list of trusted proxies: prefixes, masked, with IPv4 ones in
// their 4-byte form. The zero value trusts no one. It is read-only once
// built and safe for concurrent use.
type Trusted []netip.Prefix

// ParseProxy parses one trusted proxy: a CIDR prefix ("10.0.0.0/8",
// "::1/128") or a single address (a prefix of its full length). An
// IPv4-mapped prefix (::ffff:10.0.0.0/104) is turned into its IPv4 form.
func ParseProxy(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("%q is not a CIDR prefix: %w", s, err)
		}
		if p.Addr().Is4In6() {
			if p.Bits() < 96 {
				return netip.Prefix{}, fmt.Errorf("%q: an IPv4-mapped prefix must be /96 or longer", s)
			}
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is neither a CIDR prefix nor an address: %w", s, err)
	}
	a = a.Unmap().WithZone("")
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// ParseList parses every entry of list with ParseProxy; the error names
// the first bad entry by its index.
func ParseList(list []string) (Trusted, error) {
	var t Trusted
	for i, s := range list {
		p, err := ParseProxy(s)
		if err != nil {
			return nil, fmt.Errorf("clientip: entry %d: %w", i, err)
		}
		t = append(t, p)
	}
	return t, nil
}

// Contains reports whether a is inside one of the trusted prefixes.
func (t Trusted) Contains(a netip.Addr) bool {
	for _, p := range t {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// ParseAddr parses an address, with or without a port (and brackets around
// an IPv6 one), unmapping IPv4-in-IPv6 and dropping any zone.
func ParseAddr(s string) (netip.Addr, bool) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		ap, err := netip.ParseAddrPort(s)
		if err != nil {
			return netip.Addr{}, false
		}
		a = ap.Addr()
	}
	return a.Unmap().WithZone(""), true
}

// Hops returns the comma-separated entries of every line of the header
// name (X-Forwarded-For), in order, each trimmed of spaces.
func Hops(h http.Header, name string) []string {
	var hops []string
	for _, line := range h.Values(name) {
		for hop := range strings.SplitSeq(line, ",") {
			hops = append(hops, strings.TrimSpace(hop))
		}
	}
	return hops
}

// Resolve is the client IP of a request that came over a connection from
// remoteAddr ("ip:port", as http.Request.RemoteAddr) carrying the
// forwarding hops (oldest first, as X-Forwarded-For lists them): the remote
// address, unless it is a trusted proxy, in which case hops are walked from
// the right past the trusted proxies to the first that is not one. If every
// hop is trusted the left-most is the client; an entry that is not an
// address stops the walk at the last trusted hop (a proxy vouched for it,
// but not for what it says). A remote address that is not an IP (a unix
// socket) is returned as it is, its host part if it has one.
func Resolve(remoteAddr string, hops []string, t Trusted) string {
	peer, ok := ParseAddr(remoteAddr)
	if !ok {
		if host, _, err := net.SplitHostPort(remoteAddr); err == nil {
			return host
		}
		return remoteAddr
	}
	if !t.Contains(peer) {
		return peer.String()
	}
	ip := peer // the nearest address a trusted proxy vouches for
	for i := len(hops) - 1; i >= 0; i-- {
		a, ok := ParseAddr(hops[i])
		if !ok {
			break
		}
		ip = a
		if !t.Contains(a) {
			break
		}
	}
	return ip.String()
}
