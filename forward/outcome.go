package forward

// Outcome is how a request ended, as a release or a report says.
type Outcome uint8

const (
	// OutcomeOK: the request succeeded.
	OutcomeOK Outcome = iota
	// OutcomeError: the request failed in a way that signals overload (a
	// 5xx, a timeout).
	OutcomeError
	// OutcomeDropped: the request was never served (refused, cancelled by
	// its caller); an adaptive limit ignores it.
	OutcomeDropped
)
