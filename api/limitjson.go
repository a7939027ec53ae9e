package api

import "github.com/ringlimit/ringlimit/bucket"

// LimitJSON is an inline limit in a request.
type LimitJSON struct {
	Algorithm string `json:"algorithm,omitempty"`
	Limit     int64  `json:"limit"`
	// Per is a Go duration string such as "1s" or "1m30s".
	Per   string `json:"per"`
	Burst int64  `json:"burst,omitempty"`
	// FailureMode is what to answer when the key's owner cannot be reached:
	// "local" (default), "fail_open" or "fail_closed"; parsed as the body is
	// decoded.
	FailureMode bucket.FailureMode `json:"failure_mode,omitempty"`
	// Lease lets nodes that do not own the key admit from short leases of
	// its tokens (token_bucket only).
	Lease bool `json:"lease,omitempty"`
	// Replication is "async" (default) or "sync": an admitted spend is
	// acknowledged by the key's successor before the answer, so that a
	// crash of its owner right after the answer over-admits none of it.
	Replication string `json:"replication,omitempty"`
	// Calendar is "day", "week", "month" or "year", in place of Per: a
	// fixed window whose windows are Timezone's local calendar periods
	// (Timezone an IANA zone, default UTC; WeekStart a week's first day,
	// default "monday").
	Calendar  string `json:"calendar,omitempty"`
	Timezone  string `json:"timezone,omitempty"`
	WeekStart string `json:"week_start,omitempty"`
}
