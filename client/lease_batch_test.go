package client_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/client"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
	pb "github.com/ringlimit/ringlimit/proto/ringlimitv1"
)

// holdLeases makes the cluster's servers hold every Leases RPC whose first
// operation acquires key until the returned release is called (at the
// latest when the test ends); held is closed when the first one arrives.
func holdLeases(t *testing.T, c *testCluster, key string) (held <-chan struct{}, release func()) {
	t.Helper()
	h, r := make(chan struct{}), make(chan struct{})
	var heldOnce, releaseOnce sync.Once
	c.rpc.mu.Lock()
	c.rpc.leaseHook = func(_ string, req *pb.LeasesRequest) error {
		if req.GetOps()[0].GetAcquire().GetCheck().GetKey() == key {
			heldOnce.Do(func() { close(h) })
			<-r
		}
		return nil
	}
	c.rpc.mu.Unlock()
	release = func() { releaseOnce.Do(func() { close(r) }) }
	t.Cleanup(release)
	return h, release
}

// TestLeaseOpsCoalesce: while one acquire's Leases RPC is held, 8 more
// acquires of a limit of 10 queue behind it and leave together in one
// RPC (sizes [1 8]); a release meanwhile travels on its own and is
// answered while the acquires wait. Then the 11th lease is refused.
func TestLeaseOpsCoalesce(t *testing.T) {
	const queued = 8
	c := newCluster(t, 1, "")
	cl := newClient(t, client.Config{Targets: c.addrs(), MaxInFlight: 1, Timeout: 10 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	first, err := cl.Acquire(ctx, "pool", 10, 0, "")
	if err != nil || !first.Allowed {
		t.Fatalf("first acquire: %+v, %v", first, err)
	}
	c.rpc.reset()
	held, release := holdLeases(t, c, "pool")
	var wg sync.WaitGroup
	leases := make([]client.Lease, queued+1)
	errs := make([]error, queued+1)
	wg.Go(func() { leases[0], errs[0] = cl.Acquire(ctx, "pool", 10, 0, "") })
	<-held
	for i := 1; i <= queued; i++ {
		wg.Go(func() { leases[i], errs[i] = cl.Acquire(ctx, "pool", 10, 0, "") })
	}
	if !testkit.Poll(10*time.Second, func() bool { return client.QueuedLeaseOps(cl, 0) == queued }) {
		t.Fatalf("%d acquires queued, want %d", client.QueuedLeaseOps(cl, 0), queued)
	}
	// The release is not held behind the acquires' batch.
	if ok, err := cl.Release(ctx, first.ID, client.OutcomeOK, time.Millisecond); !ok || err != nil {
		t.Fatalf("release while the acquires wait: %v, %v", ok, err)
	}
	release()
	wg.Wait()
	for i := range leases {
		if errs[i] != nil || !leases[i].Allowed || leases[i].ID == "" {
			t.Fatalf("acquire %d: %+v, %v", i, leases[i], errs[i])
		}
	}
	c.rpc.mu.Lock()
	sizes := slices.Clone(c.rpc.leaseSizes)
	c.rpc.mu.Unlock()
	// The held acquire, the release, the 8 acquires together.
	if !slices.Equal(sizes, []int{1, 1, queued}) {
		t.Fatalf("Leases RPC sizes %v, want [1 1 %d]", sizes, queued)
	}
	l, err := cl.Acquire(ctx, "pool", 10, 0, "")
	if err != nil || !l.Allowed || l.InFlight != 10 {
		t.Fatalf("10th lease: %+v, %v", l, err)
	}
	if l, err := cl.Acquire(ctx, "pool", 10, 0, ""); err != nil || l.Allowed || l.InFlight != 10 {
		t.Fatalf("11th acquire: %+v, %v; want refused at 10 in flight", l, err)
	}
}

// TestLeaseOpsGoToOwners: once an acquire of each key has been answered,
// 24 callers acquiring and releasing 12 keys (limit 2: each key's two
// callers both get a slot) send every operation to the node that owns
// its key: each node receives exactly 4 operations per key it owns
// (2 acquires, 2 releases), and every key ends with nothing in flight.
func TestLeaseOpsGoToOwners(t *testing.T) {
	const keys = 12
	c := newCluster(t, 3, "")
	cl := newClient(t, client.Config{Targets: c.addrs(), Timeout: 10 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	name := func(k int) string { return fmt.Sprintf("route-%d", k) }
	stored := make([]string, keys) // each key as the nodes store it, which its lease names
	for k := range keys {          // learn each key's owner
		l, err := cl.Acquire(ctx, name(k), 2, 0, "")
		if err != nil || !l.Allowed {
			t.Fatalf("warm-up acquire of %s: %+v, %v", name(k), l, err)
		}
		if stored[k], err = bucket.ParseLeaseID(l.ID); err != nil {
			t.Fatal(err)
		}
		if ok, err := cl.Release(ctx, l.ID, client.OutcomeOK, 0); !ok || err != nil {
			t.Fatalf("warm-up release of %s: %v, %v", name(k), ok, err)
		}
	}
	c.rpc.reset()
	var wg sync.WaitGroup
	errs := make(chan error, 2*keys)
	for g := range 2 * keys {
		wg.Go(func() {
			l, err := cl.Acquire(ctx, name(g%keys), 2, 0, "")
			if err != nil || !l.Allowed {
				errs <- fmt.Errorf("acquire of %s: %+v, %v", name(g%keys), l, err)
				return
			}
			if ok, err := cl.Release(ctx, l.ID, client.OutcomeOK, 0); !ok || err != nil {
				errs <- fmt.Errorf("release of %s: %v, %v", name(g%keys), ok, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	want := map[string]int64{}
	for k := range keys {
		want[c.owner(stored[k])] += 4
	}
	c.rpc.mu.Lock()
	got := maps.Clone(c.rpc.leaseByNode)
	c.rpc.mu.Unlock()
	if !maps.Equal(got, want) {
		t.Fatalf("operations by node %v, want %v (each at its key's owner)", got, want)
	}
	for k := range keys {
		if l, err := cl.Acquire(ctx, name(k), 2, 0, ""); err != nil || !l.Allowed || l.InFlight != 1 {
			t.Fatalf("%s after the releases: %+v, %v; want in_flight 1", name(k), l, err)
		}
	}
}
