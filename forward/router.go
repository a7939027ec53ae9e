package forward

import (
	"context"
	"errors"
	"fmt"

	"github.com/ringlimit/ringlimit/bucket"
)

// Check is one limit check: spend Cost of Key under Limit.
type Check struct {
	Key   string
	Limit bucket.Limit
	Cost  int64
}

// Result is the answer to one Check.
type Result struct {
	bucket.Decision
	// Owner is the name of the node that decided.
	Owner string
	// Degraded is true when the owner could not be reached and the check's
	// failure mode decided instead.
	Degraded bool
}

// ErrInvalid wraps every error caused by a bad check; callers map it to
// INVALID_ARGUMENT / 400.
var ErrInvalid = errors.New("invalid check")

// Config configures a Router.
type Config struct {
	// Self is this node's name, reported as the Owner of local decisions.
	// Required.
	Self string
	// Store holds the buckets of the keys this node owns. Required.
	Store *bucket.Store
	// Clock gives the time of each check. Nil means bucket.NewMonotonic().
	Clock bucket.Clock
}

// Validate fills defaults and reports missing fields.
func (c *Config) Validate() error {
	if c.Self == "" {
		return errors.New("forward: Self must name this node")
	}
	if c.Store == nil {
		return errors.New("forward: Store is required")
	}
	if c.Clock == nil {
		c.Clock = bucket.NewMonotonic()
	}
	return nil
}

// Router decides checks. It is safe for concurrent use.
type Router struct {
	cfg Config
}

// New validates cfg and returns a Router.
func New(cfg Config) (*Router, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Router{cfg: cfg}, nil
}

// ValidateChecks returns an error wrapping ErrInvalid that names the first
// bad check (by index), or nil.
func ValidateChecks(checks []Check) error {
	for i := range checks {
		c := &checks[i]
		if err := bucket.CheckKey(c.Key); err != nil {
			return fmt.Errorf("%w: checks[%d].key: %w", ErrInvalid, i, err)
		}
		if !c.Limit.Valid() {
			return fmt.Errorf("%w: checks[%d].limit: missing", ErrInvalid, i)
		}
		if err := c.Limit.CheckCost(c.Cost); err != nil {
			return fmt.Errorf("%w: checks[%d].cost: %w", ErrInvalid, i, err)
		}
	}
	return nil
}

// Check decides checks in order and writes one Result per check into out,
// which must be at least as long as checks. If any check is invalid it
// returns an error wrapping ErrInvalid and applies none of them.
func (r *Router) Check(ctx context.Context, checks []Check, out []Result) error {
	if len(out) < len(checks) {
		return fmt.Errorf("forward: %d results for %d checks", len(out), len(checks))
	}
	if err := ValidateChecks(checks); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	now := r.cfg.Clock.Now()
	for i := range checks {
		c := &checks[i]
		d, err := r.cfg.Store.Take(c.Key, &c.Limit, now, c.Cost)
		if err != nil { // unreachable after ValidateChecks
			return fmt.Errorf("%w: checks[%d]: %w", ErrInvalid, i, err)
		}
		out[i] = Result{Decision: d, Owner: r.cfg.Self}
	}
	return nil
}

// Self returns this node's name.
func (r *Router) Self() string { return r.cfg.Self }

// ErrUnavailable wraps errors where no node could decide a check and its
// failure mode does not say what to answer; callers map it to 503 /
// UNAVAILABLE.
var ErrUnavailable = errors.New("owner unavailable")
