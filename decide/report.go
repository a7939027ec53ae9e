package decide

import (
	"context"
	"fmt"
	"time"

	"github.com/ringlimit/ringlimit/adaptive"
	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/forward"
	"github.com/ringlimit/ringlimit/policy"
)

// Reports: how a request a policy admitted ended (POST /v1/report, gRPC
// Report) goes to the owner of each of its adaptive layers' keys, whose
// controller observes it.

// Reporter sends a report to an adaptive key's owner. *forward.Router
// implements it.
type Reporter interface {
	ReportScope(ctx context.Context, scope, key string, l bucket.Limit, spec *adaptive.Spec, o forward.Outcome, latency time.Duration) (forward.ReportResult, error)
}

var _ Reporter = (*forward.Router)(nil)

// ReportResult is the answer to a report.
type ReportResult struct {
	// Reported is how many adaptive layers took the sample (0: the request
	// has none).
	Reported int64
	// Limit is the current limit of the first adaptive layer (0: none),
	// Owner the node that observed it.
	Limit int64
	Owner string
}

// adaptiveScope is the scope a layer's adaptive limit is known by: its
// layer's, when it has an adaptive limit.
func adaptiveScope(l *policy.Check) string {
	if l.Adaptive == nil {
		return ""
	}
	return l.Scope
}

// Report resolves a policy request (its errors name fields as AddPolicy's
// do) and tells the owners of its adaptive layers, in order, how one
// request ended, under the Decider's deadline. A request with no adaptive
// layer answers Reported 0 and asks no one. A layer whose owner cannot be
// reached fails the report (wrapping forward.ErrUnavailable; the layers
// before it took the sample).
func (d *Decider) Report(ctx context.Context, req policy.Request, o forward.Outcome, latency time.Duration) (ReportResult, error) {
	if d.policy == nil {
		return ReportResult{}, ErrNoPolicy
	}
	if latency < 0 {
		return ReportResult{}, fmt.Errorf("latency_ms: must be 0 or more, got %v", latency)
	}
	layers, err := d.policy.Resolve(req)
	if err != nil {
		return ReportResult{}, err
	}
	var res ReportResult
	ctx = d.Bound(ctx)
	for i := range layers {
		l := &layers[i]
		if l.Adaptive == nil {
			continue
		}
		if d.reporter == nil {
			return res, fmt.Errorf("%w: this node reports nothing", forward.ErrUnavailable)
		}
		r, err := d.reporter.ReportScope(ctx, l.Scope, l.Key, l.Limit, l.Adaptive, o, latency)
		if err != nil {
			return res, fmt.Errorf("%s: %w", l.Scope, err)
		}
		if res.Reported == 0 {
			res.Limit, res.Owner = r.Limit, r.Owner
		}
		res.Reported++
	}
	return res, nil
}
