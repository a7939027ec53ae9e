package forward

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
	"github.com/ringlimit/ringlimit/peer"
)

// failingPeers answers every Check with err and counts the calls; the
// other methods do nothing.
type failingPeers struct {
	err    error
	checks atomic.Int64
}

func (p *failingPeers) SetMembers(uint64, map[string]string) {}
func (p *failingPeers) Check(context.Context, string, []peer.Request, []peer.Answer) (string, error) {
	p.checks.Add(1)
	return "", p.err
}
func (p *failingPeers) Fetch(context.Context, string, string, *bucket.Limit) (peer.State, bool, error) {
	return peer.State{}, false, nil
}
func (p *failingPeers) Handoff(context.Context, string, []peer.State) error { return nil }
func (p *failingPeers) Replicate(context.Context, string, []peer.State) (int, error) {
	return 0, nil
}
func (p *failingPeers) Reset(context.Context, string, string, *bucket.Limit, int64) (peer.ResetAnswer, error) {
	return peer.ResetAnswer{}, p.err
}
func (p *failingPeers) Keys(context.Context) map[string]int64 { return nil }
func (p *failingPeers) Addr(string) string                    { return "" }

var _ Peers = (*failingPeers)(nil)

// An owner whose queue is full (peer.ErrBusy) is asked again by the next
// check, and meanwhile each check is answered by its failure mode; an
// owner that failed otherwise is backed off from (not asked again within
// the peer deadline). Neither answer is an error.
func TestBusyOwnerNotBackedOff(t *testing.T) {
	for _, tc := range []struct {
		err       error
		wantCalls int64
	}{
		{fmt.Errorf("peer B: %w", peer.ErrBusy), 3},
		{errors.New("peer B: no answer"), 1},
	} {
		t.Run(tc.err.Error(), func(t *testing.T) {
			store, err := bucket.NewStore(bucket.StoreConfig{MaxKeys: 1024, Shards: 1})
			if err != nil {
				t.Fatal(err)
			}
			clk := testkit.NewClock(0)
			peers := &failingPeers{err: tc.err}
			r, err := New(Config{Self: "A", Store: store, Peers: peers, NewRing: newRing, Clock: clk,
				PeerTimeout: time.Second, Replication: ReplicationConfig{Off: true}})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close(context.Background())
			r.SetMembers([]Member{{Name: "A", Addr: "a"}, {Name: "B", Addr: "b"}})
			key := ""
			for i := 0; key == ""; i++ {
				k := fmt.Sprintf("busy-%d", i)
				if ownerIn(r.view.Load().ring, "A", k) == "B" {
					key = k
				}
			}
			lim := bucket.MustLimit(bucket.TokenBucket, 10, time.Hour, 10)
			out := make([]Result, 1)
			for i := range 3 {
				if err := r.Check(context.Background(), []Check{{Key: key, Limit: lim, Cost: 1, Mode: bucket.FailClosed}}, out); err != nil {
					t.Fatalf("check %d: %v", i, err)
				}
				if out[0].Allowed || !out[0].Degraded {
					t.Fatalf("check %d: %+v, want refused by its failure mode (fail closed)", i, out[0])
				}
			}
			if got := peers.checks.Load(); got != tc.wantCalls {
				t.Fatalf("owner asked %d times for 3 checks, want %d", got, tc.wantCalls)
			}
		})
	}
}
