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

// leaser records the acquires it is given and grants each.
type leaser struct {
	mu  sync.Mutex
	got []peermsg.AcquireRequest
}

func (l *leaser) AcquireFor(_ context.Context, _ string, q peermsg.AcquireRequest) peermsg.LeaseAnswer {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.got = append(l.got, q)
	return peermsg.LeaseAnswer{Status: peermsg.LeaseOK, Lease: "l1.x", InFlight: 1, Limit: 4, Owner: "B"}
}

func (l *leaser) RenewFor(context.Context, string, string, time.Duration, bool) peermsg.LeaseAnswer {
	return peermsg.LeaseAnswer{}
}

func (l *leaser) ReleaseFor(context.Context, string, string, uint8, time.Duration, bool) peermsg.LeaseAnswer {
	return peermsg.LeaseAnswer{}
}

// An acquire reaches the key's owner with its adaptive spec, scope and
// renewal cap as sent (an acquire without them arrives without them); one
// with an invalid spec is refused (InvalidArgument) before the Leaser
// sees it.
func TestPeerAcquireCarriesAdaptiveAndMaxTTL(t *testing.T) {
	clk := testkit.NewClock(0)
	ls := &leaser{}
	b, lis := newNode(t, "B", clk, nil)
	b.scfg.Leaser = ls
	b.serve(t, lis)
	a := startNode(t, "A", clk, nil)
	formCluster(a, b)
	spec := adaptive.Spec{Algorithm: adaptive.AIMD, Min: 2, Max: 10, Initial: 4, Window: time.Second, MinSamples: 3, Backoff: 0.75}
	q := peermsg.AcquireRequest{Key: "p|route|u", Limit: bucket.MustLimit(bucket.Concurrency, 10, 0, 0), TTL: 30 * time.Second,
		RequestID: "req-1", Adaptive: &spec, AdaptiveScope: "route:/export", MaxTTL: time.Minute}
	ctx := context.Background()
	plain := q
	plain.Adaptive, plain.AdaptiveScope, plain.MaxTTL = nil, "", 0
	for _, sent := range []peermsg.AcquireRequest{q, plain} {
		ans, err := a.pool.AcquireLease(ctx, "B", sent)
		if err != nil || ans.Status != peermsg.LeaseOK || ans.Limit != 4 {
			t.Fatalf("acquire: %+v, %v", ans, err)
		}
	}
	if len(ls.got) != 2 {
		t.Fatalf("B's Leaser got %d acquires, want 2", len(ls.got))
	}
	got := ls.got[0]
	if got.Adaptive == nil || *got.Adaptive != spec || got.AdaptiveScope != "route:/export" || got.MaxTTL != time.Minute ||
		got.Key != q.Key || got.TTL != q.TTL || got.RequestID != q.RequestID || got.Limit != q.Limit {
		t.Fatalf("B's Leaser got %+v (spec %+v), want %+v", got, got.Adaptive, q)
	}
	if got := ls.got[1]; got.Adaptive != nil || got.AdaptiveScope != "" || got.MaxTTL != 0 {
		t.Fatalf("B's Leaser got %+v for an acquire with no spec nor cap", got)
	}
	bad := q
	badSpec := spec
	badSpec.Min = 0
	bad.Adaptive = &badSpec
	if _, err := a.pool.AcquireLease(ctx, "B", bad); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("acquire with min 0: %v, want InvalidArgument", err)
	}
	if len(ls.got) != 2 {
		t.Fatalf("B's Leaser saw the acquire with an invalid spec")
	}
}
