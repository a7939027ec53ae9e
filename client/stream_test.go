package client_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/client"
)

// TestClientBatchesOneStreamPerNode: 300 checks from 30 goroutines and 30
// acquire+release pairs against 3 nodes travel on one Batches stream per
// node (3 in all), each batch seen by the nodes' unary interceptors as a
// Check or Leases call; the limit holds exactly (100 of 300 on one key).
func TestClientBatchesOneStreamPerNode(t *testing.T) {
	c := newCluster(t, 3, "")
	cl := newClient(t, client.Config{Targets: c.addrs(), Timeout: 10 * time.Second})
	var wg sync.WaitGroup
	var mu sync.Mutex
	allowed := 0
	for g := range 30 {
		wg.Go(func() {
			for i := range 10 {
				ds, err := cl.Check(context.Background(), inline("stream-key", 100, 1), inline(fmt.Sprintf("other-%d-%d", g, i), 5, 1))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if ds[0].GetAllowed() {
					allowed++
				}
				mu.Unlock()
			}
			l, err := cl.Acquire(context.Background(), fmt.Sprintf("jobs-%d", g), 1, 0, "")
			if err != nil || !l.Allowed {
				t.Errorf("acquire: %v, %v", l, err)
				return
			}
			if ok, err := cl.Release(context.Background(), l.ID, client.OutcomeOK, time.Millisecond); err != nil || !ok {
				t.Errorf("release: %v, %v", ok, err)
			}
		})
	}
	wg.Wait()
	if allowed != 100 {
		t.Fatalf("allowed %d of 300, want 100", allowed)
	}
	c.rpc.mu.Lock()
	defer c.rpc.mu.Unlock()
	var streams, leaseOps int64
	for _, n := range c.rpc.streams {
		streams += n
	}
	for _, n := range c.rpc.leaseByNode {
		leaseOps += n
	}
	if streams != 3 || c.rpc.checks.Load() != 600 || leaseOps != 60 {
		t.Fatalf("%d streams (%v), %d checks, %d lease operations seen; want 3, 600, 60", streams, c.rpc.streams, c.rpc.checks.Load(), leaseOps)
	}
}

// TestClientBatchesUnimplemented: a node that refuses Batches as
// Unimplemented (one older than it) is sent calls: every check and lease
// operation is answered, and the client opens no second stream to it.
func TestClientBatchesUnimplemented(t *testing.T) {
	c := newCluster(t, 1, "")
	c.rpc.streamHook = func(string) error { return status.Error(codes.Unimplemented, "unknown method Batches") }
	cl := newClient(t, client.Config{Targets: c.addrs(), Timeout: 10 * time.Second})
	for i := range 20 {
		ds, err := cl.Check(context.Background(), inline("old-node", 10, 1))
		if err != nil || ds[0].GetAllowed() != (i < 10) {
			t.Fatalf("check %d: %v, %v; want allowed %v", i, ds, err, i < 10)
		}
	}
	l, err := cl.Acquire(context.Background(), "old-jobs", 1, 0, "")
	if err != nil || !l.Allowed {
		t.Fatalf("acquire: %v, %v", l, err)
	}
	if ok, err := cl.Release(context.Background(), l.ID, client.OutcomeOK, time.Millisecond); err != nil || !ok {
		t.Fatalf("release: %v, %v", ok, err)
	}
	c.rpc.mu.Lock()
	defer c.rpc.mu.Unlock()
	if c.rpc.streams["node-1"] != 1 || c.rpc.checks.Load() != 20 || c.rpc.leaseByNode["node-1"] != 2 {
		t.Fatalf("%d streams, %d checks, %d lease operations; want 1, 20, 2", c.rpc.streams["node-1"], c.rpc.checks.Load(), c.rpc.leaseByNode["node-1"])
	}
}

// TestClientBatchesNodeStops: a node the client holds a Batches stream to
// stops within its deadline (the stream drained, not waited for), and the
// client's next checks go to the node left, on a stream of its own: the
// limit holds (10 of 20 on one key, before and after).
func TestClientBatchesNodeStops(t *testing.T) {
	c := newCluster(t, 2, "")
	cl := newClient(t, client.Config{Targets: c.addrs(), Timeout: 10 * time.Second})
	check := func(i int) bool {
		t.Helper()
		ds, err := cl.Check(context.Background(), inline("stops", 10, 1))
		if err != nil {
			t.Fatalf("check %d: %v", i, err)
		}
		return ds[0].GetAllowed()
	}
	allowed := 0
	for i := range 10 {
		if check(i) {
			allowed++
		}
	}
	c.rpc.mu.Lock()
	opened := c.rpc.streams["node-1"] + c.rpc.streams["node-2"]
	c.rpc.mu.Unlock()
	if opened == 0 {
		t.Fatal("no Batches stream was opened")
	}
	last := c.nodes[len(c.nodes)-1]
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := last.n.Close(ctx); err != nil {
		t.Fatalf("Close with a client's stream open: %v", err)
	}
	c.nodes = c.nodes[:len(c.nodes)-1]
	for i := 10; i < 20; i++ {
		if check(i) {
			allowed++
		}
	}
	if allowed != 10 {
		t.Fatalf("allowed %d of 20, want 10", allowed)
	}
}
