package cluster

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// Checks of the addresses a Config names.

// splitIPPort parses "ip:port" with an IP literal host and a port in
// [0, 65535].
func splitIPPort(addr string) (net.IP, int, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, 0, err
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return nil, 0, fmt.Errorf("host %q is not an IP address", host)
	}
	port, err := parsePort(portStr)
	if err != nil {
		return nil, 0, err
	}
	return ip, port, nil
}

func parsePort(s string) (int, error) {
	p, err := strconv.ParseUint(s, 10, 16)
	if err != nil {
		return 0, fmt.Errorf("port %q is not a number in [0, 65535]", s)
	}
	return int(p), nil
}

// checkDialable accepts "host:port" that another machine can dial: a
// non-empty host that is not an unspecified address, and a port in [1, 65535].
func checkDialable(addr string) error {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if host == "" {
		return fmt.Errorf("%q has no host", addr)
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		return fmt.Errorf("%q is not dialable: advertise a concrete address, not %s", addr, host)
	}
	port, err := parsePort(portStr)
	if err != nil {
		return err
	}
	if port == 0 {
		return fmt.Errorf("%q has port 0", addr)
	}
	if len(addr) > MaxAddrLen {
		return fmt.Errorf("%d bytes, longer than %d", len(addr), MaxAddrLen)
	}
	return nil
}

// checkSeed accepts "host:port" with a non-empty host and a port in [1, 65535].
func checkSeed(addr string) error {
	if isSRVName(addr) {
		return nil
	}
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%w (a seed is host:port, or a DNS SRV name such as _gossip._tcp.ringlimit.default.svc.cluster.local)", err)
	}
	if host == "" {
		return fmt.Errorf("%q has no host", addr)
	}
	port, err := parsePort(portStr)
	if err != nil {
		return err
	}
	if port == 0 {
		return fmt.Errorf("%q has port 0", addr)
	}
	return nil
}

// isSRVName reports whether a seed is a DNS SRV name: no port, and
// _service._proto.name (the first two labels start with an underscore,
// then at least one more label).
func isSRVName(seed string) bool {
	labels := strings.Split(strings.TrimSuffix(seed, "."), ".")
	return len(labels) >= 3 && !strings.ContainsAny(seed, ":[]") &&
		len(labels[0]) > 1 && labels[0][0] == '_' && len(labels[1]) > 1 && labels[1][0] == '_' && labels[2] != ""
}
