package bucket

import (
	"errors"
	"fmt"
	"time"

	"github.com/ringlimit/ringlimit/clock"
)

// A Concurrency limit counts leases held at once rather than cost spent
// over time: it is acquired (Leases.Acquire) and released, never checked.
// Every Store operation refuses it with errAcquired, so that a check that
// names one changes nothing.

// Bounds of a concurrency lease.
const (
	// MinLeaseTTL and MaxLeaseTTL bound how long a lease lives without a
	// renew.
	MinLeaseTTL = time.Second
	MaxLeaseTTL = time.Hour
	// DefaultLeaseTTL is the TTL of an acquire that names none.
	DefaultLeaseTTL = 30 * time.Second
	// MaxRequestIDLen is the longest request id an acquire may carry, in
	// bytes.
	MaxRequestIDLen = 128
	// DefaultMaxLeases is the lease records one node holds at most, by
	// default (owned and replicas together).
	DefaultMaxLeases = 1 << 16
	// MaxLeaseBytes bounds the bytes a lease table's records count
	// (leaseBytes: the id, the key, the request id and a fixed share).
	MaxLeaseBytes = 32 << 20
)

// Errors of the lease table.
var (
	// ErrLeaseNotFound: no such lease (unknown, forged, expired or
	// released).
	ErrLeaseNotFound = errors.New("bucket: lease not found")
	// ErrLeaseID: the id is malformed.
	ErrLeaseID = errors.New("bucket: malformed lease id")
	// ErrLeasesFull: the table holds its bound of unexpired leases.
	ErrLeasesFull = errors.New("bucket: lease table full")
)

// errAcquired is what every Store operation answers for a Concurrency
// limit.
var errAcquired = fmt.Errorf("%w: a concurrency limit is acquired (POST /v1/acquire), not checked", ErrLimit)

// CheckLeaseTTL returns an error, a *FieldError for field, unless ttl is
// within MinLeaseTTL and MaxLeaseTTL.
func CheckLeaseTTL(field string, ttl time.Duration) error {
	if ttl < MinLeaseTTL || ttl > MaxLeaseTTL {
		return fieldErr(ErrLimit, field, "must be between %v and %v, got %v", MinLeaseTTL, MaxLeaseTTL, ttl)
	}
	return nil
}

// acquired is the Bucket of a Concurrency limit: it refuses every check.
type acquired struct{ lim Limit }

func (b acquired) TakeAt(clock.Instant, int64) (Decision, error) { return Decision{}, errAcquired }
func (b acquired) Limit() Limit                                  { return b.lim }

// parseConcurrency is LimitSpec.Parse for a Concurrency limit: a limit,
// no per and no burst, never leased, always replicated before the answer
// (replication absent or sync), failing closed unless told to fail open.
func (s *LimitSpec) parseConcurrency() (Settings, *FieldError) {
	if s.Per != "" || s.PerDuration != 0 {
		return Settings{}, fieldErr(ErrLimit, "per", "a concurrency limit has no per")
	}
	if s.Burst != 0 {
		return Settings{}, fieldErr(ErrLimit, "burst", "a concurrency limit has no burst")
	}
	lim, err := newLimit(Concurrency, s.Limit, 0, 0)
	if err != nil {
		return Settings{}, err
	}
	mode := FailClosed
	if s.FailureMode != "" {
		if mode, err = parseFailureMode(s.FailureMode); err != nil {
			return Settings{}, err
		}
		if mode == Local {
			return Settings{}, fieldErr(ErrFailureMode, "failure_mode",
				"a concurrency limit cannot be decided locally (a share of in-flight slots per node would exceed the limit): want fail_open or fail_closed")
		}
	}
	if s.Lease {
		return Settings{}, fieldErr(ErrLimit, "lease", "only the token bucket can lease, not %v", Concurrency)
	}
	switch s.Replication {
	case "", "sync":
	default:
		return Settings{}, fieldErr(ErrLimit, "replication", "a concurrency limit is always replicated before the answer: want sync (or nothing), got %q", s.Replication)
	}
	return Settings{Limit: lim, FailureMode: mode, Sync: true}, nil
}
