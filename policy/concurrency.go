package policy

import (
	"errors"
	"fmt"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
)

// A concurrency layer (algorithm: concurrency, limit only) holds at most
// limit leases of its key at once instead of spending tokens. A check or
// an acquire through it takes a lease: for lease_ttl when the request
// names no TTL, for what it names capped at max_lease_ttl otherwise. A
// forward-auth request (/v1/authz) has no completion hook: its lease is
// held for the whole lease_ttl.

// DefaultMaxLeaseTTL is a concurrency layer's max_lease_ttl when the file
// gives none.
const DefaultMaxLeaseTTL = 5 * time.Minute

// IsConcurrency reports whether the layer holds leases (algorithm
// concurrency) rather than spending tokens.
func (c *Check) IsConcurrency() bool { return c.Limit.Algorithm() == bucket.Concurrency }

// LeaseTTLFor is the TTL of a lease this layer grants to a request that
// asks ttl (0: the layer's lease_ttl), capped at its max_lease_ttl.
func (c *Check) LeaseTTLFor(ttl time.Duration) time.Duration {
	if ttl <= 0 {
		ttl = c.LeaseTTL
	}
	return min(ttl, c.MaxLeaseTTL)
}

// parseConcurrency validates the concurrency fields of the layer l parsed
// from y: lease_ttl and max_lease_ttl on a concurrency layer only, each
// between bucket.MinLeaseTTL and bucket.MaxLeaseTTL, lease_ttl at most
// max_lease_ttl; per and burst not on a concurrency layer. Every error
// names its field.
func parseConcurrency(y limitYAML, l *Layer) error {
	if l.Limit.Algorithm() != bucket.Concurrency {
		switch {
		case y.LeaseTTL != "":
			return errors.New("lease_ttl: only a concurrency layer holds leases")
		case y.MaxLeaseTTL != "":
			return errors.New("max_lease_ttl: only a concurrency layer holds leases")
		}
		return nil
	}
	switch {
	case y.Per != "":
		return errors.New("per: a concurrency layer takes limit only (at most limit in flight at once)")
	case y.Burst != 0:
		return errors.New("burst: a concurrency layer takes limit only (at most limit in flight at once)")
	}
	l.MaxLeaseTTL = DefaultMaxLeaseTTL
	if y.MaxLeaseTTL != "" {
		d, err := leaseTTL("max_lease_ttl", y.MaxLeaseTTL)
		if err != nil {
			return err
		}
		l.MaxLeaseTTL = d
	}
	l.LeaseTTL = min(bucket.DefaultLeaseTTL, l.MaxLeaseTTL)
	if y.LeaseTTL != "" {
		d, err := leaseTTL("lease_ttl", y.LeaseTTL)
		if err != nil {
			return err
		}
		if d > l.MaxLeaseTTL {
			return fmt.Errorf("lease_ttl: %v is above max_lease_ttl %v", d, l.MaxLeaseTTL)
		}
		l.LeaseTTL = d
	}
	return nil
}

// concurrencyOverride gives an override's concurrency layer l (parsed as
// set) what a file's would have by default: its failure mode (fail_closed
// unless given), lease_ttl 30s and max_lease_ttl 5m. Other layers are left
// as they are.
func concurrencyOverride(l *Layer, set bucket.Settings) {
	if l.Limit.Algorithm() == bucket.Concurrency {
		l.FailureMode, l.LeaseTTL, l.MaxLeaseTTL = set.FailureMode, bucket.DefaultLeaseTTL, DefaultMaxLeaseTTL
	}
}

// leaseTTL parses the lease TTL s of field.
func leaseTTL(field, s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not a duration such as \"30s\"", field, s)
	}
	if d < bucket.MinLeaseTTL || d > bucket.MaxLeaseTTL {
		return 0, fmt.Errorf("%s: must be between %v and %v, got %v", field, bucket.MinLeaseTTL, bucket.MaxLeaseTTL, d)
	}
	return d, nil
}
