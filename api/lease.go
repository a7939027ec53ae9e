package api

// In-flight (concurrency) limits: POST /v1/acquire takes a slot and
// answers a lease (the body is a CheckResponse with lease, in_flight and
// expires_in_ms); /v1/renew extends it; /v1/release gives it back with
// the outcome and latency of the work it covered; /v1/report tells a
// policy's adaptive layers how a request ended.

// CodeLeaseNotFound: no such lease (unknown, forged, expired or, for a
// renew, released): 404.
const CodeLeaseNotFound = "LEASE_NOT_FOUND"

// Outcomes of a release or a report, as the JSON spells them.
const (
	OutcomeOK      = "ok"
	OutcomeError   = "error"
	OutcomeDropped = "dropped"
)

// AcquireRequest is the body of POST /v1/acquire: a check's key fields
// (an inline key with a limit {"algorithm": "concurrency", "limit": N}, or
// a policy request), the lease's TTL and an idempotency id.
type AcquireRequest struct {
	Key   string                `json:"key,omitempty"`
	Limit *ConcurrencyLimitJSON `json:"limit,omitempty"`

	Policy string `json:"policy,omitempty"`
	APIKey string `json:"api_key,omitempty"`
	User   string `json:"user,omitempty"`
	IP     string `json:"ip,omitempty"`
	Route  string `json:"route,omitempty"`
	Tier   string `json:"tier,omitempty"`

	// TTL is how long the lease lives unless renewed, a Go duration: 1s
	// to 1h inline (default 30s); for policy the layer's lease_ttl by
	// default, capped by its max_lease_ttl.
	TTL string `json:"ttl,omitempty"`
	// RequestID makes the acquire idempotent: repeated while its lease
	// lives, it answers that lease and takes no second slot. At most 128
	// bytes.
	RequestID string `json:"request_id,omitempty"`
}

// ConcurrencyLimitJSON is an inline in-flight limit: at most Limit leases
// of the key at once.
type ConcurrencyLimitJSON struct {
	// Algorithm must be "concurrency".
	Algorithm string `json:"algorithm"`
	Limit     int64  `json:"limit"`
	// FailureMode is what to answer while the key's owner cannot be
	// reached: "fail_closed" (default for concurrency), "fail_open" or
	// "local".
	FailureMode string `json:"failure_mode,omitempty"`
}

// RenewRequest is the body of POST /v1/renew.
type RenewRequest struct {
	Lease string `json:"lease"`
	// TTL extends the lease to this long from now; default as for acquire.
	TTL string `json:"ttl,omitempty"`
}

// RenewResponse is the body of a 200 answer to POST /v1/renew.
type RenewResponse struct {
	Renewed     bool   `json:"renewed"`
	ExpiresInMs int64  `json:"expires_in_ms"`
	InFlight    int64  `json:"in_flight"`
	Limit       int64  `json:"limit"`
	Owner       string `json:"owner"`
}

// ReleaseRequest is the body of POST /v1/release.
type ReleaseRequest struct {
	Lease string `json:"lease"`
	// Outcome is "ok" (default), "error" or "dropped".
	Outcome string `json:"outcome,omitempty"`
	// LatencyMs is how long the work took, 0 or more.
	LatencyMs int64 `json:"latency_ms,omitempty"`
}

// ReleaseResponse is the body of a 200 answer to POST /v1/release:
// released is false when the lease was released before or expired (a
// release is idempotent).
type ReleaseResponse struct {
	Released bool   `json:"released"`
	InFlight int64  `json:"in_flight"`
	Limit    int64  `json:"limit"`
	Owner    string `json:"owner"`
}

// ReportRequest is the body of POST /v1/report: a policy request's
// fields (adaptive limits live in policy), the request's outcome and its
// latency.
type ReportRequest struct {
	Policy string `json:"policy,omitempty"`
	APIKey string `json:"api_key,omitempty"`
	User   string `json:"user,omitempty"`
	IP     string `json:"ip,omitempty"`
	Route  string `json:"route,omitempty"`
	Tier   string `json:"tier,omitempty"`

	Outcome   string `json:"outcome,omitempty"`
	LatencyMs int64  `json:"latency_ms,omitempty"`
}

// ReportResponse is the body of a 200 answer to POST /v1/report.
type ReportResponse struct {
	// Reported is how many adaptive layers took the sample.
	Reported int64 `json:"reported"`
	// Limit is the current limit of the first adaptive layer.
	Limit int64  `json:"limit"`
	Owner string `json:"owner"`
}
