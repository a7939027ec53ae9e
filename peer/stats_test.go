package peer_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
	"github.com/ringlimit/ringlimit/peer"
)

// Stats carries what the Stats source knows, the checks the server decided for
// its peers, and what Report fills in; Keys is read from the same answer.
func TestStatsReport(t *testing.T) {
	clk := testkit.NewClock(0)
	a := startNode(t, "A", clk, nil)
	b, lis := newNode(t, "B", clk, nil)
	b.scfg.Report = func(st *peer.Stats) {
		st.Name = "not B" // the server's own name wins
		st.Checks, st.Refused, st.Forwarded, st.Degraded = 100, 7, 40, 2
		st.ReplicationLag, st.ReplicationPending = 1500*time.Microsecond, 3
		st.PolicyVersion, st.RLSVersion = "sha256:0123", "rls:4567"
		st.Uptime, st.Version = 90*time.Second, "v1.2.3"
	}
	b.serve(t, lis)
	formCluster(a, b)
	for _, key := range []string{"s-1", "s-2", "s-1"} {
		check1(t, a, "B", key, hourlyLimit(5))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got := a.pool.Stats(ctx)
	want := peer.Stats{Name: "B", Keys: 2, RingVersion: testVersion, Checks: 100, Refused: 7, Forwarded: 40, Degraded: 2,
		PeerChecks: 3, ReplicationLag: 1500 * time.Microsecond, ReplicationPending: 3,
		PolicyVersion: "sha256:0123", RLSVersion: "rls:4567", Uptime: 90 * time.Second, Version: "v1.2.3"}
	if len(got) != 1 || !reflect.DeepEqual(got["B"], want) {
		t.Fatalf("Stats from A = %+v\nwant B: %+v", got, want)
	}
	if local := b.psrv.LocalStats(); !reflect.DeepEqual(local, want) {
		t.Fatalf("B's LocalStats = %+v\nwant %+v", local, want)
	}
	if keys := a.pool.Keys(ctx); len(keys) != 1 || keys["B"] != 2 {
		t.Fatalf("Keys from A = %v, want B: 2", keys)
	}
	// A node without Report answers the Stats source's part only.
	if st := b.pool.Stats(ctx)["A"]; !reflect.DeepEqual(st, peer.Stats{Name: "A", Keys: 0, RingVersion: testVersion}) {
		t.Fatalf("Stats from B = %+v, want A's name and ring version only", st)
	}
}
