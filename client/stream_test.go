package client_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/client"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
	pb "github.com/ringlimit/ringlimit/proto/ringlimitv1"
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

// TestClientBatchesNodeCrashes: a node crashes (it stops as a crashed one
// does, given an ended context: nothing handed off, its connections cut)
// while 16 goroutines check through the client, each an exact key owned by
// a survivor and a key the crashed node owned. No check fails: those in
// flight on the crashed node's stream, and those after, are answered by
// the other nodes. The survivor's key stays exact: 200 of 800 admitted.
func TestClientBatchesNodeCrashes(t *testing.T) {
	const goroutines, each, limit, big = 16, 50, 200, 1_000_000
	c := newCluster(t, 3, "")
	// A batch left waiting on the broken stream would hold its check past
	// the check's own deadline (20s; the client's Timeout is longer): an
	// error.
	cl := newClient(t, client.Config{Targets: c.addrs(), Timeout: time.Minute})
	victim := c.nodes[2]
	exact := ""
	var onVictim []string
	for i := 0; exact == "" || len(onVictim) < goroutines; i++ {
		k := fmt.Sprintf("crash-%d", i)
		if exact == "" && c.owner(ikey(k, limit)) != victim.name {
			exact = k
		}
		if len(onVictim) < goroutines && c.owner(ikey(k, big)) == victim.name {
			onVictim = append(onVictim, k)
		}
	}
	var done atomic.Int64
	crashed := make(chan struct{})
	go func() {
		defer close(crashed)
		testkit.Poll(20*time.Second, func() bool { return done.Load() >= goroutines*each/4 })
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		victim.n.Close(ctx)
	}()
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted, answered := 0, 0
	var errs []error
	for g := range goroutines {
		wg.Go(func() {
			for range each {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				ds, err := cl.Check(ctx, inline(exact, limit, 1))
				_, err2 := cl.Check(ctx, inline(onVictim[g], big, 1))
				cancel()
				mu.Lock()
				if err != nil || err2 != nil {
					errs = append(errs, errors.Join(err, err2))
				} else {
					answered++
					if ds[0].GetAllowed() {
						admitted++
					}
				}
				mu.Unlock()
				done.Add(1)
			}
		})
	}
	wg.Wait()
	<-crashed
	// The survivors' rings drop the crashed node before the cluster
	// stops: a node that stops hands its keys off, and would wait for a
	// member its ring still holds.
	c.nodes = c.nodes[:2]
	if err := c.converge(); err != nil {
		t.Fatal(err)
	}
	if len(errs) != 0 || answered != goroutines*each || admitted != limit {
		t.Fatalf("%d errors (first: %v), %d of %d answered, %d admitted; want 0, all, %d", len(errs), errs, answered, goroutines*each, admitted, limit)
	}
}

// breakingServer serves RateLimiter/Batches by reading one message and
// ending the stream UNAVAILABLE without answering it: the stream breaks
// with a batch in flight.
type breakingServer struct {
	pb.UnimplementedRateLimiterServer
	got atomic.Int64
}

func (s *breakingServer) Batches(st pb.RateLimiter_BatchesServer) error {
	if _, err := st.Recv(); err != nil {
		return err
	}
	s.got.Add(1)
	return status.Error(codes.Unavailable, "the stream broke")
}

// TestClientBatchesStreamBreaks: a batch in flight when its stream breaks
// fails at once with the stream's status (the check then has no node
// left: ErrNoNode wrapping UNAVAILABLE), not at its deadline; the next
// batch opens a new stream.
func TestClientBatchesStreamBreaks(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	bs := &breakingServer{}
	pb.RegisterRateLimiterServer(srv, bs)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	cl := newClient(t, client.Config{Targets: []string{lis.Addr().String()}, Timeout: time.Minute, RingRefresh: -1})
	for i := range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		_, err := cl.Check(ctx, inline("breaks", 10, 1))
		cancel()
		if !errors.Is(err, client.ErrNoNode) || !strings.Contains(err.Error(), "the stream broke") {
			t.Fatalf("check %d: %v; want ErrNoNode with the stream's UNAVAILABLE", i, err)
		}
	}
	if bs.got.Load() != 2 {
		t.Fatalf("the node got %d batches, want 2 (one a stream)", bs.got.Load())
	}
}
