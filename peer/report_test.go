package peer_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/adaptive"
	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/internal/peermsg"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
)

// reporter records the reports it is given and answers limit 17.
type reporter struct {
	mu   sync.Mutex
	from []string
	got  []peermsg.ReportRequest
}

func (r *reporter) ReportFor(_ context.Context, from string, q peermsg.ReportRequest) peermsg.ReportAnswer {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.from, r.got = append(r.from, from), append(r.got, q)
	return peermsg.ReportAnswer{Limit: 17, Owner: "B"}
}

// A report reaches the receiver's Reporter with every field as sent, and
// its answer comes back; a report with an invalid spec or outcome is
// refused (InvalidArgument) before the Reporter sees it; a node without
// a Reporter answers Unimplemented.
func TestPeerReport(t *testing.T) {
	clk := testkit.NewClock(0)
	rep := &reporter{}
	b, lis := newNode(t, "B", clk, nil)
	b.scfg.Reporter = rep
	b.serve(t, lis)
	a := startNode(t, "A", clk, nil)
	formCluster(a, b)
	spec := adaptive.Spec{Algorithm: adaptive.Gradient2, Min: 2, Max: 80, Initial: 10, Window: 250 * time.Millisecond,
		MinSamples: 4, Tolerance: 2, Smoothing: 0.5, LongWindow: 30, Fallback: 5, FallbackAfter: 5 * time.Second}
	q := peermsg.ReportRequest{Key: "p|tier|u", Limit: bucket.MustLimit(bucket.TokenBucket, 10, time.Second, 30), Spec: spec,
		Scope: "tier:free", Outcome: adaptive.Error, Latency: 1234 * time.Microsecond, Final: true}
	ctx := context.Background()
	ans, err := a.pool.Report(ctx, "B", q)
	if err != nil || ans != (peermsg.ReportAnswer{Limit: 17, Owner: "B"}) {
		t.Fatalf("report: %+v, %v", ans, err)
	}
	if len(rep.got) != 1 || rep.got[0] != q || rep.from[0] != "A" {
		t.Fatalf("B's Reporter got %+v from %v, want %+v from A", rep.got, rep.from, q)
	}
	bad := q
	bad.Spec.Min = 0
	if _, err := a.pool.Report(ctx, "B", bad); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("report with min 0: %v, want InvalidArgument", err)
	}
	bad = q
	bad.Outcome = adaptive.Dropped + 1
	if _, err := a.pool.Report(ctx, "B", bad); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("report with outcome 3: %v, want InvalidArgument", err)
	}
	if len(rep.got) != 1 {
		t.Fatalf("B's Reporter got %d reports, want 1", len(rep.got))
	}
	if _, err := b.pool.Report(ctx, "A", q); status.Code(err) != codes.Unimplemented {
		t.Fatalf("report to a node without a Reporter: %v, want Unimplemented", err)
	}
}
