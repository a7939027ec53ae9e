package bucket

import (
	"errors"
	"fmt"
	"math/bits"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/ringlimit/ringlimit/clock"
)

// Algorithm names one of the five rate-limiting algorithms, or Concurrency.
type Algorithm uint8

// The five algorithms. TokenBucket is the zero value and the default.
const (
	// TokenBucket admits bursts up to Burst and refills at Limit per Per.
	TokenBucket Algorithm = iota
	// LeakyBucket shapes: a queue of Burst drains at Limit per Per; an admitted
	// check carries the Delay after which its turn comes.
	LeakyBucket
	// FixedWindow counts up to Limit per window of length Per cut from the clock.
	FixedWindow
	// SlidingWindowLog keeps the timestamp of every admitted unit of cost in the
	// last Per and admits while there are fewer than Limit.
	SlidingWindowLog
	// SlidingWindowCounter estimates the last Per as curr + prev × (1 − elapsed).
	SlidingWindowCounter
	// Concurrency is an in-flight limit: at most Limit leases held at once
	// (leases.go). It has no period and no burst, and the Store refuses it:
	// a concurrency limit is acquired, not checked.
	Concurrency
	numAlgorithms
)

var algorithmNames = [numAlgorithms]string{
	TokenBucket:          "token_bucket",
	LeakyBucket:          "leaky_bucket",
	FixedWindow:          "fixed_window",
	SlidingWindowLog:     "sliding_window_log",
	SlidingWindowCounter: "sliding_window_counter",
	Concurrency:          "concurrency",
}

// String returns the algorithm's wire name, e.g. "token_bucket".
func (a Algorithm) String() string {
	if a < numAlgorithms {
		return algorithmNames[a]
	}
	return fmt.Sprintf("algorithm(%d)", uint8(a))
}

// ParseAlgorithm turns a wire name into an Algorithm. The empty string is
// TokenBucket, the default. Its error wraps ErrAlgorithm and a *FieldError
// for the field "algorithm".
func ParseAlgorithm(s string) (Algorithm, error) {
	a, err := parseAlgorithm(s)
	if err != nil {
		return 0, fmt.Errorf("bucket: %w", err)
	}
	return a, nil
}

// Bounds on a Limit's parameters. They keep every product in the exact
// integer arithmetic below 2^62 and the memory of one key bounded.
const (
	// MinPer is the shortest period (window) a limit may use.
	MinPer = time.Millisecond
	// MaxPer is the longest period (window) a limit may use: 366 days.
	MaxPer = 366 * 24 * time.Hour
	// MaxCount is the largest Limit or Burst of any algorithm but
	// FixedWindow.
	MaxCount = 1<<31 - 1
	// MaxWindowCount is the largest Limit of a FixedWindow: every value
	// an Envoy requests_per_unit (a uint32) can hold.
	MaxWindowCount = 1<<32 - 1
	// MaxLogLimit is the largest Limit of a SlidingWindowLog. A key's log
	// holds at most 64 runs of 16 bytes whatever the limit (see logRun).
	MaxLogLimit = 100_000
	// MaxKeyLen is the longest key a request may name, in bytes. The
	// store's keys add their namespace (see MaxNamespaceLen).
	MaxKeyLen = 1024
)

// Errors returned for bad parameters. They wrap into messages that name the
// offending field; test with errors.Is.
var (
	ErrAlgorithm = errors.New("bucket: unknown algorithm")
	ErrLimit     = errors.New("bucket: invalid limit")
	ErrCost      = errors.New("bucket: invalid cost")
	ErrKey       = errors.New("bucket: invalid key")
	// ErrKeyTooLong is wrapped, with ErrKey, by the error for a key longer
	// than the store accepts.
	ErrKeyTooLong = errors.New("bucket: key too long")
)

// tooLong is the error for a key of n bytes where at most max are
// accepted.
type tooLong struct{ n, max int }

func (e tooLong) Error() string {
	return fmt.Sprintf("%v: key is %d bytes, the maximum is %d", ErrKey, e.n, e.max)
}

func (e tooLong) Is(target error) bool { return target == ErrKey || target == ErrKeyTooLong }

// Limit is a validated, precomputed rate limit: an algorithm and its
// parameters. Build one with NewLimit; the zero Limit is not usable.
// A Limit is immutable and safe for concurrent use.
type Limit struct {
	alg   Algorithm
	limit int64         // count per per
	per   time.Duration // period of the rate, or window length
	burst int64         // bucket capacity / queue size; equals limit for windows

	// Buckets only: the rate limit/per reduced to num tokens per den
	// nanoseconds. Levels are kept in units of 1/den token, so refilling
	// for e nanoseconds adds exactly e*num units.
	num, den int64
	capUnits int64 // burst * den
	fillNs   int64 // ⌈capUnits/num⌉: nanoseconds from empty to full

	fp uint64 // fingerprint of (alg, limit, per, burst, cal)

	// cal, when its Unit is not NoCalendar, makes a FixedWindow's windows
	// the periods of a local calendar (NewCalendarLimit); per is then
	// the longest such period, a bound for what waits on a whole window.
	cal Calendar
}

// NewLimit validates and precomputes a limit: limit per per, with burst as
// the bucket capacity (TokenBucket) or queue size (LeakyBucket). A burst of 0
// means burst = limit. Window algorithms ignore burst; Concurrency ignores
// per and burst (at most limit leases at once). Its error wraps
// ErrAlgorithm or ErrLimit and a *FieldError naming the parameter; Spec.Parse
// builds a Limit from what a user wrote.
func NewLimit(alg Algorithm, limit int64, per time.Duration, burst int64) (Limit, error) {
	l, err := newLimit(alg, limit, per, burst)
	if err != nil {
		return Limit{}, fmt.Errorf("bucket: %w", err)
	}
	return l, nil
}

func newLimit(alg Algorithm, limit int64, per time.Duration, burst int64) (Limit, *FieldError) {
	if alg >= numAlgorithms {
		return Limit{}, errAlgorithm(alg.String())
	}
	if err := checkCount(alg, limit); err != nil {
		return Limit{}, err
	}
	if alg == Concurrency {
		per = 0 // a concurrency limit has no period
	} else if err := checkPer(per); err != nil {
		return Limit{}, err
	}
	l := Limit{alg: alg, limit: limit, per: per, burst: limit}
	if alg == TokenBucket || alg == LeakyBucket {
		if burst < 0 {
			return Limit{}, fieldErr(ErrLimit, "burst", "must be at least 1, got %d", burst)
		}
		if burst > MaxCount {
			return Limit{}, fieldErr(ErrLimit, "burst", "must be at most %d, got %d", MaxCount, burst)
		}
		if burst > 0 {
			l.burst = burst
		}
		g := gcd(limit, int64(per))
		l.num, l.den = limit/g, int64(per)/g
		hi, lo := bits.Mul64(uint64(l.burst), uint64(l.den))
		if hi != 0 || lo >= 1<<62 {
			return Limit{}, fieldErr(ErrLimit, "burst", "%d with a rate of %d per %v cannot be represented exactly; use a shorter per or a rounder rate", l.burst, limit, per)
		}
		l.capUnits = int64(lo)
		l.fillNs = ceilDiv(l.capUnits, l.num)
	}
	var b [25]byte
	b[0] = byte(alg)
	put64(b[1:], uint64(limit))
	put64(b[9:], uint64(per))
	put64(b[17:], uint64(l.burst))
	l.fp = xxhash.Sum64(b[:])
	return l, nil
}

// NewCalendarLimit builds a fixed window of limit per period of cal: a
// zone's local days, weeks, months or years (see Calendar). Its error
// wraps ErrLimit or ErrCalendar and is a *FieldError naming the field
// (limit, calendar, week_start).
func NewCalendarLimit(limit int64, cal Calendar) (Limit, error) {
	l, err := newCalendarLimit(limit, cal)
	if err != nil {
		return Limit{}, fmt.Errorf("bucket: %w", err)
	}
	return l, nil
}

// longestPeriod bounds a calendar period: a local day lasts up to 25 h
// (26 h allowed, for a zone that once shifted by two), and a week, month
// or year at most 2 h more than its days.
var longestPeriod = [...]time.Duration{Day: 26 * time.Hour, Week: 7*24*time.Hour + 2*time.Hour,
	Month: 31*24*time.Hour + 2*time.Hour, Year: 366*24*time.Hour + 2*time.Hour}

func newCalendarLimit(limit int64, cal Calendar) (Limit, *FieldError) {
	if err := checkCount(FixedWindow, limit); err != nil {
		return Limit{}, err
	}
	if cal.Unit < Day || cal.Unit > Year {
		return Limit{}, fieldErr(ErrCalendar, "calendar", "want day, week, month or year, got %v", cal.Unit)
	}
	if cal.WeekStart < time.Sunday || cal.WeekStart > time.Saturday {
		return Limit{}, fieldErr(ErrCalendar, "week_start", "want a day of the week, got %d", cal.WeekStart)
	}
	if cal.Unit != Week {
		cal.WeekStart = 0 // only weeks have a first day: one limit, one fingerprint
	}
	if cal.Loc == time.UTC {
		cal.Loc = nil
	}
	l := Limit{alg: FixedWindow, limit: limit, per: longestPeriod[cal.Unit], burst: limit, cal: cal}
	var b [25]byte
	b[0] = byte(FixedWindow) | 0x80
	put64(b[1:], uint64(limit))
	put64(b[9:], uint64(cal.Unit)<<8|uint64(cal.WeekStart))
	put64(b[17:], xxhash.Sum64String(cal.Zone()))
	l.fp = xxhash.Sum64(b[:])
	return l, nil
}

// WithCount returns l with count per period (and burst, 0 meaning count)
// in place of its own: the same algorithm, period and calendar.
func (l Limit) WithCount(count, burst int64) (Limit, error) {
	if l.cal.Unit != NoCalendar {
		return NewCalendarLimit(count, l.cal)
	}
	return NewLimit(l.alg, count, l.per, burst)
}

// Window is the limit's period where every period has one length: Per,
// or 0 for a calendar window, whose days, weeks, months and years do not
// (a RateLimit-Policy header then leaves its w= out).
func (l Limit) Window() time.Duration {
	if l.cal.Unit != NoCalendar {
		return 0
	}
	return l.per
}

// Calendar returns the limit's calendar: NoCalendar unless it was built
// by NewCalendarLimit.
func (l Limit) Calendar() Calendar { return l.cal }

// window returns the fixed window that holds now: its start and the start
// of the next.
func (l *Limit) window(now int64) (start, end int64) {
	if l.cal.Unit != NoCalendar {
		return l.cal.Period(now)
	}
	w := int64(l.per)
	start = windowStart(now, w)
	return start, start + w
}

// windowOf is the start of the fixed window st counts in (0 for other
// algorithms, and for a state past its window: it holds nothing).
func (l *Limit) windowOf(st *state, now int64) int64 {
	if l.alg != FixedWindow || st.b <= 0 {
		return 0
	}
	if start, _ := l.window(now); st.a < start {
		return 0
	}
	return st.a
}

// nextWindow returns window when it is the fixed window right after the
// one that holds now (a sender's clock past a boundary this node's has
// not reached), and 0 otherwise: no farther, so that no sender can hold a
// key in a window of its choosing.
func (l *Limit) nextWindow(now, window int64) int64 {
	if l.alg != FixedWindow || window == 0 {
		return 0
	}
	if _, end := l.window(now); window == end {
		return window
	}
	return 0
}

// windowEnd returns the end of the fixed window that starts at start.
func (l *Limit) windowEnd(start int64) int64 {
	if l.cal.Unit != NoCalendar {
		_, end := l.cal.Period(start)
		return end
	}
	return satAdd(start, int64(l.per))
}

// MustLimit is NewLimit for parameters known to be valid; it panics otherwise.
// Meant for tests and examples.
func MustLimit(alg Algorithm, limit int64, per time.Duration, burst int64) Limit {
	l, err := NewLimit(alg, limit, per, burst)
	if err != nil {
		panic(err)
	}
	return l
}

// Algorithm returns the limit's algorithm.
func (l Limit) Algorithm() Algorithm { return l.alg }

// Count returns the limit's count per period (the "limit" parameter).
func (l Limit) Count() int64 { return l.limit }

// Per returns the period of the rate, or the window length.
func (l Limit) Per() time.Duration { return l.per }

// Burst returns the bucket capacity or queue size; for window algorithms it
// equals Count.
func (l Limit) Burst() int64 { return l.burst }

// Capacity is the largest cost a single check may have: Burst for buckets,
// Count for windows.
func (l Limit) Capacity() int64 { return l.burst }

// Valid reports whether l was built by NewLimit.
func (l Limit) Valid() bool { return l.limit > 0 }

// String formats the limit as "token_bucket 10/1s burst 50".
func (l Limit) String() string {
	if l.alg == TokenBucket || l.alg == LeakyBucket {
		return fmt.Sprintf("%s %d/%v burst %d", l.alg, l.limit, l.per, l.burst)
	}
	if l.alg == Concurrency {
		return fmt.Sprintf("%s %d", l.alg, l.limit)
	}
	if c := l.cal; c.Unit == Week {
		return fmt.Sprintf("%s %d/week from %s %s", l.alg, l.limit, c.WeekStart, c.Zone())
	} else if c.Unit != NoCalendar {
		return fmt.Sprintf("%s %d/%v %s", l.alg, l.limit, c.Unit, c.Zone())
	}
	return fmt.Sprintf("%s %d/%v", l.alg, l.limit, l.per)
}

// CheckCost returns an error unless 1 ≤ cost ≤ Capacity: a cost above what the
// limit could ever admit is an error, not an eternal rejection.
func (l *Limit) CheckCost(cost int64) error {
	if cost < 1 {
		return fmt.Errorf("%w: cost must be at least 1, got %d", ErrCost, cost)
	}
	if cost > l.burst {
		return fmt.Errorf("%w: cost %d exceeds the capacity %d of %s", ErrCost, cost, l.burst, l.String())
	}
	return nil
}

// CheckKey returns an error unless key, a key as the store holds it (a
// request's key within its namespace), is 1 to MaxKeyLen + MaxNamespaceLen
// bytes. CheckRequestKey checks a key as a request names it.
func CheckKey(key string) error {
	if key == "" {
		return errEmptyKey()
	}
	if len(key) > MaxKeyLen+MaxNamespaceLen {
		return tooLong{len(key), MaxKeyLen + MaxNamespaceLen}
	}
	return nil
}

func errEmptyKey() error { return fmt.Errorf("%w: key must not be empty", ErrKey) }

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

func put64(b []byte, v uint64) {
	for i := range 8 {
		b[i] = byte(v >> (8 * i))
	}
}

// ceilDiv returns ⌈a/b⌉ for a ≥ 0, b > 0.
func ceilDiv(a, b int64) int64 {
	return (a + b - 1) / b
}

// roundUpMs rounds a non-negative duration in nanoseconds up to a whole
// millisecond.
func roundUpMs(ns int64) time.Duration { return clock.CeilMillis(time.Duration(ns)) }
