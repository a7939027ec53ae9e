package bucket

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// LimitSpec is a limit as its user writes it, before validation: the
// fields an inline limit of the HTTP and gRPC APIs, a layer of a policy
// file, an override and an Envoy rate_limit entry have in common. Each caller fills
// the fields its input has and leaves the others zero; Parse is the one
// place where they are checked, and its errors name the field as the
// caller's input spells it.
//
// A LimitSpec is a plain value; Parse does not modify it. (Limit.Spec, the
// canonical name of a built Limit in its keys, is another thing.)
type LimitSpec struct {
	// Algorithm is a wire name (token_bucket, leaky_bucket, fixed_window,
	// sliding_window_log, sliding_window_counter, concurrency); "" is
	// TokenBucket. A concurrency limit has a Limit and no Per or Burst, is
	// never leased, is always replicated before the answer (Replication ""
	// or "sync") and fails closed unless FailureMode is "fail_open".
	Algorithm string
	// Limit is the count per Per: the sustained rate of the buckets, the
	// count per window of the window algorithms. At least 1.
	Limit int64
	// Per is the period as text: a Go duration such as "1s", "1m30s" or
	// "250ms". A caller whose input is a duration already (gRPC's per_ms,
	// an Envoy unit, the Go client) leaves it "" and sets PerDuration.
	Per string
	// PerDuration is the period when Per is "". Both "" and 0: the period
	// is missing.
	PerDuration time.Duration
	// Burst is the bucket capacity (token bucket) or queue size (leaky
	// bucket); 0 means Limit. The window algorithms ignore it, but a
	// negative burst is refused whatever the algorithm.
	Burst int64
	// FailureMode is "local", "fail_open" or "fail_closed"; "" is Local.
	FailureMode string
	// Lease lets entry nodes admit from short leases of the key's tokens:
	// token bucket only, and not with sync replication.
	Lease bool
	// Replication is "async" (or "") or "sync": an admitted spend is
	// acknowledged by the key's successor before the answer.
	Replication string
	// Calendar is "day", "week", "month" or "year": a fixed window whose
	// windows are the periods of Timezone's local calendar, in place of
	// Per ("" none). Timezone is an IANA zone ("" is UTC); WeekStart the
	// first day of a week ("monday" … "sunday"; "" is Monday).
	Calendar, Timezone, WeekStart string
}

// Settings is a parsed LimitSpec: the Limit and what travels with it on
// every check.
type Settings struct {
	Limit       Limit
	FailureMode FailureMode
	Lease       bool
	// Sync is Replication "sync".
	Sync bool
}

// FieldError is a field of a limit that cannot be used. Its message is
// Path + ": " + Msg, e.g. `limit.per: "10" is not a duration (try 10s)`.
// It wraps ErrAlgorithm (algorithm), ErrFailureMode (failure_mode),
// ErrCalendar (calendar, timezone, week_start) or ErrLimit (every other
// field). A caller whose input names the field
// differently (per_ms, requests_per_unit) reads Field and Msg.
type FieldError struct {
	// Path names the field where the caller's input has it: the prefix
	// given to LimitSpec.Parse, a '.', and Field.
	Path string
	// Field is the LimitSpec's name of the field: algorithm, limit, per,
	// burst, failure_mode, lease, replication, calendar, timezone or
	// week_start.
	Field string
	// Msg says what is wrong, without the field: `must be at least 1, got 0`.
	Msg string
	err error
}

func (e *FieldError) Error() string { return e.Path + ": " + e.Msg }

// Unwrap returns the sentinel the error belongs to (ErrLimit, …).
func (e *FieldError) Unwrap() error { return e.err }

// At returns a copy of e whose Path is path + "." + Field ("" path: Field
// alone).
func (e *FieldError) At(path string) *FieldError {
	c := *e
	c.Path = joinPath(path, e.Field)
	return &c
}

// ErrFailureMode is wrapped by the error for an unknown failure mode.
var ErrFailureMode = errors.New("bucket: unknown failure mode")

func fieldErr(sentinel error, field, format string, args ...any) *FieldError {
	return &FieldError{Path: field, Field: field, Msg: fmt.Sprintf(format, args...), err: sentinel}
}

func joinPath(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

// Parse validates s and builds its Settings. path is where the caller's
// input has the limit ("limit", "checks[0].limit"; "" when the caller adds
// its own location): every error is a *FieldError whose Path is path and
// the field, in the one wording of this package:
//
//	limit.per: "10" is not a duration (try 10s)
//	limit.burst: must be at least 1, got -1
//	limit.lease: only the token bucket can lease, not sliding_window_log
//
// Fields are checked in the order algorithm, limit, per (or calendar,
// per, burst, timezone, week_start), burst, failure_mode, lease,
// replication; the first bad one is reported. Parse
// does not allocate unless it fails.
func (s *LimitSpec) Parse(path string) (Settings, error) {
	alg, err := parseAlgorithm(s.Algorithm)
	if err != nil {
		return Settings{}, err.At(path)
	}
	calendar := s.Calendar != "" || s.Timezone != "" || s.WeekStart != ""
	if calendar && s.Algorithm == "" {
		alg = FixedWindow // a calendar window's algorithm goes without saying
	}
	if err := checkCount(alg, s.Limit); err != nil {
		return Settings{}, err.At(path)
	}
	if alg == Concurrency && calendar {
		return Settings{}, fieldErr(ErrCalendar, "calendar", "a calendar window is a fixed_window, not %v", alg).At(path)
	}
	if alg == Concurrency {
		set, err := s.parseConcurrency()
		if err != nil {
			return Settings{}, err.At(path)
		}
		return set, nil
	}
	var lim Limit
	var ferr *FieldError
	if calendar {
		lim, ferr = s.parseCalendar(alg)
	} else {
		lim, ferr = s.parseRate(alg)
	}
	if ferr != nil {
		return Settings{}, ferr.At(path)
	}
	mode, err := parseFailureMode(s.FailureMode)
	if err != nil {
		return Settings{}, err.At(path)
	}
	if s.Lease {
		if err := checkLease(alg); err != nil {
			return Settings{}, err.At(path)
		}
	}
	var sync bool
	switch s.Replication {
	case "", "async":
	case "sync":
		if s.Lease {
			return Settings{}, fieldErr(ErrLimit, "replication",
				"sync cannot be leased (an entry node admits from a lease before the owner's replica has it)").At(path)
		}
		sync = true
	default:
		return Settings{}, fieldErr(ErrLimit, "replication", "want async or sync, got %q", s.Replication).At(path)
	}
	return Settings{Limit: lim, FailureMode: mode, Lease: s.Lease, Sync: sync}, nil
}

// parseRate builds a limit of alg per Per.
func (s *LimitSpec) parseRate(alg Algorithm) (Limit, *FieldError) {
	per := s.PerDuration
	if s.Per != "" || per == 0 {
		var err *FieldError
		if per, err = parsePer(s.Per); err != nil {
			return Limit{}, err
		}
	}
	if err := checkPer(per); err != nil {
		return Limit{}, err
	}
	if s.Burst < 0 {
		return Limit{}, fieldErr(ErrLimit, "burst", "must be at least 1, got %d", s.Burst)
	}
	return newLimit(alg, s.Limit, per, s.Burst)
}

// parseCalendar builds a calendar window (a fixed window): Calendar in
// Timezone, weeks from WeekStart, and no Per.
func (s *LimitSpec) parseCalendar(alg Algorithm) (Limit, *FieldError) {
	if s.Calendar == "" {
		return Limit{}, fieldErr(ErrCalendar, "calendar", "required with timezone or week_start: day, week, month or year")
	}
	if alg != FixedWindow {
		return Limit{}, fieldErr(ErrCalendar, "calendar", "a calendar window is a fixed_window, not %v", alg)
	}
	if s.Per != "" || s.PerDuration != 0 {
		return Limit{}, fieldErr(ErrLimit, "per", "give either per or calendar, not both")
	}
	if s.Burst < 0 {
		return Limit{}, fieldErr(ErrLimit, "burst", "must be at least 1, got %d", s.Burst)
	}
	unit, err := ParseCalendarUnit(s.Calendar)
	if err != nil {
		return Limit{}, fieldErr(ErrCalendar, "calendar", "want day, week, month or year, got %q", s.Calendar)
	}
	loc, err := LoadZone(s.Timezone)
	if err != nil {
		return Limit{}, fieldErr(ErrCalendar, "timezone", "%s", strings.TrimPrefix(err.Error(), ErrCalendar.Error()+": timezone: "))
	}
	cal := Calendar{Unit: unit, Loc: loc, WeekStart: time.Monday}
	if s.WeekStart != "" {
		if unit != Week {
			return Limit{}, fieldErr(ErrCalendar, "week_start", "only a week has a first day, not a %v", unit)
		}
		if cal.WeekStart, err = ParseWeekday(s.WeekStart); err != nil {
			return Limit{}, fieldErr(ErrCalendar, "week_start", "want a day of the week (monday … sunday), got %q", s.WeekStart)
		}
	}
	return newCalendarLimit(s.Limit, cal)
}

// CheckLease returns an error unless a limit of alg may be leased: only
// the token bucket can. The error is a *FieldError for the field "lease".
func CheckLease(alg Algorithm) error {
	if err := checkLease(alg); err != nil {
		return err
	}
	return nil
}

func checkLease(alg Algorithm) *FieldError {
	if alg != TokenBucket {
		return fieldErr(ErrLimit, "lease", "only the token bucket can lease, not %v", alg)
	}
	return nil
}

// parseAlgorithm is ParseAlgorithm's parser, with its error for the field.
func parseAlgorithm(s string) (Algorithm, *FieldError) {
	if s == "" {
		return TokenBucket, nil
	}
	for a, name := range algorithmNames {
		if name == s {
			return Algorithm(a), nil
		}
	}
	return 0, errAlgorithm(s)
}

func errAlgorithm(name string) *FieldError {
	return fieldErr(ErrAlgorithm, "algorithm", "unknown algorithm %q (want one of %s)", name, strings.Join(algorithmNames[:], ", "))
}

// parseFailureMode is ParseFailureMode's parser, with its error for the
// field.
func parseFailureMode(s string) (FailureMode, *FieldError) {
	if s == "" {
		return Local, nil
	}
	for m, name := range failureModeNames {
		if name == s {
			return FailureMode(m), nil
		}
	}
	return 0, fieldErr(ErrFailureMode, "failure_mode", "want local, fail_open or fail_closed, got %q", s)
}

// parsePer reads a period written as a Go duration. Only its syntax is
// checked here; checkPer checks its range.
func parsePer(s string) (time.Duration, *FieldError) {
	if s == "" {
		return 0, fieldErr(ErrLimit, "per", "required: a period between %v and %v", MinPer, MaxPer)
	}
	d, err := time.ParseDuration(s)
	if err == nil {
		return d, nil
	}
	if _, err := time.ParseDuration(s + "s"); err == nil {
		// A bare number: the unit is missing.
		return 0, fieldErr(ErrLimit, "per", "%q is not a duration (try %ss)", s, s)
	}
	if _, err := time.ParseDuration(shrinkNumbers(s)); err == nil {
		// A duration too long for time.Duration: out of range.
		return 0, fieldErr(ErrLimit, "per", "must be between %v and %v, got %s", MinPer, MaxPer, s)
	}
	return 0, fieldErr(ErrLimit, "per", "%q is not a duration (such as 1s, 1m30s or 250ms)", s)
}

// shrinkNumbers returns s with every run of digits replaced by "1": a
// duration that overflows time.Duration becomes one that parses, anything
// else that does not parse still does not.
func shrinkNumbers(s string) string {
	var b strings.Builder
	digits := false
	for _, c := range s {
		d := c >= '0' && c <= '9'
		if d && !digits {
			b.WriteByte('1')
		} else if !d {
			b.WriteRune(c)
		}
		digits = d
	}
	return b.String()
}

func checkPer(per time.Duration) *FieldError {
	if per < MinPer || per > MaxPer {
		return fieldErr(ErrLimit, "per", "must be between %v and %v, got %v", MinPer, MaxPer, per)
	}
	return nil
}

// checkCount checks the count of a limit of alg.
func checkCount(alg Algorithm, limit int64) *FieldError {
	if limit < 1 {
		return fieldErr(ErrLimit, "limit", "must be at least 1, got %d", limit)
	}
	if max := maxCount(alg); limit > max {
		return fieldErr(ErrLimit, "limit", "must be at most %d with %v, got %d", max, alg, limit)
	}
	return nil
}

// maxCount is the largest count of a limit of alg.
func maxCount(alg Algorithm) int64 {
	switch alg {
	case FixedWindow:
		return MaxWindowCount
	case SlidingWindowLog:
		return MaxLogLimit
	}
	return MaxCount
}
