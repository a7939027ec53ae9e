package bucket

import "fmt"

// FailureMode says what to answer for a check whose key's owner cannot be
// reached. It is part of a limit's configuration: parsed once when the
// limit or policy is loaded, carried with every check. The zero value is
// Local.
type FailureMode uint8

const (
	// Local decides on a bucket kept on the entry node with the limit
	// (rate and burst) divided by the number of live members, at least 1.
	Local FailureMode = iota
	// FailOpen admits.
	FailOpen
	// FailClosed rejects, with a retry-after of one second.
	FailClosed
)

var failureModeNames = [...]string{Local: "local", FailOpen: "fail_open", FailClosed: "fail_closed"}

// FailureModes lists the modes in order, for metrics and documentation.
func FailureModes() []FailureMode { return []FailureMode{Local, FailOpen, FailClosed} }

// String returns the mode's configuration name.
func (m FailureMode) String() string {
	if int(m) < len(failureModeNames) {
		return failureModeNames[m]
	}
	return fmt.Sprintf("failure_mode(%d)", uint8(m))
}

// Valid reports whether m is one of the three modes.
func (m FailureMode) Valid() bool { return int(m) < len(failureModeNames) }

// ParseFailureMode reads "local", "fail_open" or "fail_closed"; "" is
// Local. Its error wraps ErrFailureMode and a *FieldError for the field
// "failure_mode".
func ParseFailureMode(s string) (FailureMode, error) {
	m, err := parseFailureMode(s)
	if err != nil {
		return 0, fmt.Errorf("bucket: %w", err)
	}
	return m, nil
}

// MarshalText implements encoding.TextMarshaler.
func (m FailureMode) MarshalText() ([]byte, error) {
	if !m.Valid() {
		return nil, fmt.Errorf("bucket: unknown failure mode %d", uint8(m))
	}
	return []byte(m.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler (JSON and YAML).
func (m *FailureMode) UnmarshalText(b []byte) error {
	v, err := ParseFailureMode(string(b))
	if err != nil {
		return err
	}
	*m = v
	return nil
}

// MaxPrelimit is the largest pre-limiter factor a limit may ask for.
const MaxPrelimit = 1000

// CheckPrelimit validates a pre-limiter factor: 0 (off) or from 1 to
// MaxPrelimit times the limit.
func CheckPrelimit(f float64) error {
	if f == 0 || f >= 1 && f <= MaxPrelimit {
		return nil
	}
	return fmt.Errorf("prelimit: must be 0 (off) or between 1 and %d, got %v", MaxPrelimit, f)
}
