package bucket

import "github.com/ringlimit/ringlimit/clock"

// Bucket is the state of one key under one limit. Each algorithm implements
// it; New picks the implementation from the limit. A Bucket starts full (a
// key never seen) and is not safe for concurrent use: the Store is.
type Bucket interface {
	// TakeAt spends cost at time now if the limit allows it, and returns
	// the decision. It returns an error, and changes nothing, when cost is
	// not between 1 and Limit().Capacity().
	TakeAt(now clock.Instant, cost int64) (Decision, error)
	// Limit returns the limit the bucket enforces.
	Limit() Limit
}

// New returns an empty-history (full) Bucket for the limit l, which must have
// been built by NewLimit. A Concurrency limit's Bucket refuses every check
// with an error wrapping ErrLimit: it is acquired (Leases), not checked.
func New(l Limit) Bucket {
	switch l.alg {
	case TokenBucket:
		return &Token{lim: l}
	case LeakyBucket:
		return &Leaky{lim: l}
	case FixedWindow:
		return &Fixed{lim: l}
	case SlidingWindowCounter:
		return &SlidingCounter{lim: l}
	case Concurrency:
		return acquired{lim: l}
	default:
		return &SlidingLog{lim: l}
	}
}

// Token is a token bucket: Burst tokens of capacity refilled at Count per
// Per, computed lazily at each check. A new Token is full.
type Token struct {
	lim  Limit
	st   state
	seen bool
}

// TakeAt implements Bucket.
func (b *Token) TakeAt(at clock.Instant, cost int64) (Decision, error) {
	now := int64(at)
	if err := b.lim.CheckCost(cost); err != nil {
		return Decision{}, err
	}
	d := b.lim.takeToken(&b.st, !b.seen, now, cost)
	b.seen = true
	return d, nil
}

// Limit implements Bucket.
func (b *Token) Limit() Limit { return b.lim }

// Leaky is a leaky bucket used as a shaper: a queue of Burst units of cost
// that drains at Count per Per. An admitted check carries the Delay before
// its turn; a check that does not fit in the queue is rejected.
type Leaky struct {
	lim  Limit
	st   state
	seen bool
}

// TakeAt implements Bucket.
func (b *Leaky) TakeAt(at clock.Instant, cost int64) (Decision, error) {
	now := int64(at)
	if err := b.lim.CheckCost(cost); err != nil {
		return Decision{}, err
	}
	d := b.lim.takeLeaky(&b.st, !b.seen, now, cost)
	b.seen = true
	return d, nil
}

// Limit implements Bucket.
func (b *Leaky) Limit() Limit { return b.lim }

// Fixed is a fixed window counter: at most Count per window of length Per,
// windows cut from the timeline. A rejection does not count.
type Fixed struct {
	lim Limit
	st  state
}

// TakeAt implements Bucket.
func (b *Fixed) TakeAt(at clock.Instant, cost int64) (Decision, error) {
	now := int64(at)
	if err := b.lim.CheckCost(cost); err != nil {
		return Decision{}, err
	}
	return b.lim.takeFixed(&b.st, now, cost), nil
}

// Limit implements Bucket.
func (b *Fixed) Limit() Limit { return b.lim }

// SlidingCounter is a sliding window counter: it estimates the cost spent in
// the last Per as curr + prev × (1 − elapsed fraction of the current window).
type SlidingCounter struct {
	lim Limit
	st  state
}

// TakeAt implements Bucket.
func (b *SlidingCounter) TakeAt(at clock.Instant, cost int64) (Decision, error) {
	now := int64(at)
	if err := b.lim.CheckCost(cost); err != nil {
		return Decision{}, err
	}
	return b.lim.takeCounter(&b.st, now, cost), nil
}

// Limit implements Bucket.
func (b *SlidingCounter) Limit() Limit { return b.lim }

// SlidingLog is a sliding window log: the exact count of cost admitted in the
// last Per, kept as runs of cost admitted at one instant (at most 64, see
// maxLogRuns).
type SlidingLog struct {
	lim Limit
	log []logRun
}

// TakeAt implements Bucket.
func (b *SlidingLog) TakeAt(at clock.Instant, cost int64) (Decision, error) {
	now := int64(at)
	if err := b.lim.CheckCost(cost); err != nil {
		return Decision{}, err
	}
	return b.lim.takeLog(&b.log, now, cost), nil
}

// Limit implements Bucket.
func (b *SlidingLog) Limit() Limit { return b.lim }

var (
	_ Bucket = (*Token)(nil)
	_ Bucket = (*Leaky)(nil)
	_ Bucket = (*Fixed)(nil)
	_ Bucket = (*SlidingCounter)(nil)
	_ Bucket = (*SlidingLog)(nil)
)
