package node

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/cluster"
)

// FieldError is Validate's error: the field at fault and what is wrong with
// it. Msg names other fields by their names; when it starts with Field's
// name it is a whole sentence about it (a program that configures the
// node from flags can put flag names in their place).
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return "node: Config." + e.Field + ": " + e.Msg }

// Validate reports the first field that is not valid as a *FieldError; it
// changes nothing.
func (c *Config) Validate() error {
	bad := func(field, format string, args ...any) error {
		return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	if c.SnapshotInterval < 0 || (c.SnapshotInterval > 0 && c.SnapshotInterval < 10*time.Millisecond) {
		return bad("SnapshotInterval", "must be 0 (the default, 1s) or at least 10ms, got %v", c.SnapshotInterval)
	}
	if c.Name == "" {
		return bad("Name", "must not be empty")
	}
	for _, a := range []struct{ field, v string }{{"HTTPAddr", c.HTTPAddr}, {"GRPCAddr", c.GRPCAddr}, {"PeerAddr", c.PeerAddr}, {"GossipAddr", c.GossipAddr}} {
		if _, _, err := net.SplitHostPort(a.v); err != nil && (a.field == "GossipAddr" || !c.given(a.field)) {
			return bad(a.field, "%v", err)
		}
	}
	if err := c.validateAdvertise(); err != nil {
		return err
	}
	switch {
	case c.Replication < 0 || c.Replication > 8:
		return bad("Replication", "must be from 0 to 8, got %d", c.Replication)
	case c.ReplicationMaxLoss < 0 || c.ReplicationMaxLoss > 1<<30:
		return bad("ReplicationMaxLoss", "must be from 0 to %d tokens, got %d", 1<<30, c.ReplicationMaxLoss)
	case c.ClusterSize < 0:
		return bad("ClusterSize", "must not be negative, got %d", c.ClusterSize)
	case len(c.ClusterName) > cluster.MaxLabelLen:
		return bad("ClusterName", "must be at most %d bytes, got %d", cluster.MaxLabelLen, len(c.ClusterName))
	}
	for _, d := range []struct {
		field string
		v     time.Duration
	}{{"HTTPReadTimeout", c.HTTPReadTimeout}, {"HTTPWriteTimeout", c.HTTPWriteTimeout}, {"HTTPIdleTimeout", c.HTTPIdleTimeout}, {"CheckTimeout", c.CheckTimeout}} {
		if d.v <= 0 {
			return bad(d.field, "must be positive, got %v", d.v)
		}
	}
	switch {
	case c.DrainDelay < 0:
		return bad("DrainDelay", "must not be negative, got %v", c.DrainDelay)
	case c.Grace < 0:
		return bad("Grace", "must not be negative, got %v", c.Grace)
	case c.MaxConns < 0:
		return bad("MaxConns", "must not be negative, got %d", c.MaxConns)
	case c.GRPCIdleTimeout <= 0:
		return bad("GRPCIdleTimeout", "must be positive, got %v", c.GRPCIdleTimeout)
	case c.CheckTimeout >= c.HTTPWriteTimeout:
		return bad("CheckTimeout", "CheckTimeout (%v) must be less than HTTPWriteTimeout (%v), or a late answer could not be written", c.CheckTimeout, c.HTTPWriteTimeout)
	}
	if err := c.validateTLS(); err != nil {
		return err
	}
	switch {
	case c.RLSStatKeys < 0:
		return bad("RLSStatKeys", "must not be negative, got %d", c.RLSStatKeys)
	case !(c.RLSNearLimitRatio > 0 && c.RLSNearLimitRatio <= 1):
		return bad("RLSNearLimitRatio", "must be above 0 and at most 1, got %v", c.RLSNearLimitRatio)
	case c.MaxKeys < 1:
		return bad("MaxKeys", "must be at least 1, got %d", c.MaxKeys)
	case c.MaxKeyBytes < 1 || c.MaxKeyBytes > bucket.MaxKeyLen:
		return bad("MaxKeyBytes", "must be between 1 and %d, got %d", bucket.MaxKeyLen, c.MaxKeyBytes)
	case c.MaxMemory < MinShardMemory:
		return bad("MaxMemory", "must be at least %d bytes, got %d", MinShardMemory, c.MaxMemory)
	case c.QuiesceTimeout < 0:
		return bad("QuiesceTimeout", "must not be negative, got %v", c.QuiesceTimeout)
	case c.QuiesceIdle < 0:
		return bad("QuiesceIdle", "must not be negative, got %v", c.QuiesceIdle)
	}
	return nil
}

// validateAdvertise checks the advertised addresses' syntax.
func (c *Config) validateAdvertise() error {
	if h := c.AdvertiseHost; h != "" {
		if ip := net.ParseIP(h); ip != nil && ip.IsUnspecified() {
			return &FieldError{"AdvertiseHost", fmt.Sprintf("AdvertiseHost %s: other machines cannot dial an unspecified address", h)}
		}
	}
	for _, a := range []struct{ field, v string }{{"AdvertiseHTTP", c.AdvertiseHTTP}, {"AdvertiseGRPC", c.AdvertiseGRPC},
		{"AdvertisePeer", c.AdvertisePeer}, {"AdvertiseGossip", c.AdvertiseGossip}} {
		if a.v == "" {
			continue
		}
		if err := checkDialable(a.v); err != nil {
			return &FieldError{a.field, err.Error()}
		}
	}
	if c.AdvertiseGossip != "" && net.ParseIP(hostOf(c.AdvertiseGossip)) == nil {
		return &FieldError{"AdvertiseGossip", fmt.Sprintf("AdvertiseGossip %s: the host must be an IP address", c.AdvertiseGossip)}
	}
	if c.Resolver != "" {
		if err := checkDialable(c.Resolver); err != nil {
			return &FieldError{"Resolver", err.Error()}
		}
	}
	return nil
}

// checkDialable accepts host:port with a non-empty host that is not an
// unspecified address and a port from 1 to 65535.
func checkDialable(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if host == "" {
		return fmt.Errorf("%q has no host", addr)
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		return fmt.Errorf("%q: other machines cannot dial an unspecified address", addr)
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return fmt.Errorf("%q: the port must be from 1 to 65535", addr)
	}
	return nil
}

// validateTLS checks that TLS files come in complete sets, and refuses a
// node whose peer or gossip address other machines can reach without
// mutual TLS and a gossip key, unless Insecure is set.
func (c *Config) validateTLS() error {
	if n := countSet(c.TLSCA, c.TLSCert, c.TLSKey); n != 0 && n != 3 {
		return &FieldError{"TLSCA", "TLSCA, TLSCert and TLSKey go together: give all three or none"}
	}
	if (c.APITLSCert == "") != (c.APITLSKey == "") {
		return &FieldError{"APITLSCert", "APITLSCert and APITLSKey go together: give both or neither"}
	}
	if c.APITLSClientCA != "" && c.APITLSCert == "" {
		return &FieldError{"APITLSClientCA", "APITLSClientCA needs APITLSCert and APITLSKey"}
	}
	if c.Insecure {
		return nil
	}
	for _, l := range []struct{ field, addr string }{{"PeerAddr", c.PeerAddr}, {"GossipAddr", c.GossipAddr}} {
		if isLoopback(hostOf(l.addr)) || (l.field == "PeerAddr" && c.PeerListener != nil) || (l.field == "GossipAddr" && c.GossipTransport != nil) {
			continue
		}
		var missing []string
		if !c.peerTLS() {
			missing = append(missing, "TLSCA, TLSCert and TLSKey (mutual TLS between nodes)")
		}
		if len(c.GossipKeys) == 0 {
			missing = append(missing, "GossipKeys (encrypted gossip)")
		}
		if len(missing) > 0 {
			return &FieldError{l.field, fmt.Sprintf("%s %s is reachable from other machines: give %s, or Insecure to run in clear", l.field, l.addr, strings.Join(missing, " and "))}
		}
	}
	return nil
}

// given reports whether the listener of an address field is given as a
// net.Listener, which makes the address unused.
func (c *Config) given(field string) bool {
	switch field {
	case "HTTPAddr":
		return c.HTTPListener != nil
	case "GRPCAddr":
		return c.GRPCListener != nil
	case "PeerAddr":
		return c.PeerListener != nil
	}
	return false
}

func countSet(s ...string) int {
	n := 0
	for _, v := range s {
		if v != "" {
			n++
		}
	}
	return n
}
