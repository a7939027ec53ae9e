package faultnet_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/internal/testonly/faultnet"
)

// rpcCut is the deadline of a call that must fail across a cut.
const rpcCut = 300 * time.Millisecond

func TestGRPCAcrossCut(t *testing.T) {
	n := newNet(t)
	lis, err := n.Listen("node-1")
	if err != nil {
		t.Fatal(err)
	}
	var caller atomic.Value // node of the last caller, from the connection's address
	srv := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if p, ok := peer.FromContext(ctx); ok {
			if a, ok := p.Addr.(faultnet.Addr); ok {
				caller.Store(a.Node)
			}
		}
		return h(ctx, req)
	}))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	t.Cleanup(func() {
		srv.Stop()
		<-served
	})

	client := func(from string) healthpb.HealthClient {
		cc, err := grpc.NewClient("passthrough:///"+lis.Addr().String(),
			grpc.WithContextDialer(n.Dialer(from)),
			grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return healthpb.NewHealthClient(cc)
	}
	check := func(c healthpb.HealthClient, within time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), within)
		defer cancel()
		_, err := c.Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	}

	// An established connection: calls fail by their deadline while cut,
	// and succeed after the heal on the same connection.
	c2 := client("node-2")
	if err := check(c2, patience); err != nil {
		t.Fatalf("Check before the cut: %v", err)
	}
	if got := caller.Load(); got != "node-2" {
		t.Fatalf("server saw a call from %v, want node-2", got)
	}
	n.Cut("node-1", "node-2")
	start := time.Now()
	err = check(c2, rpcCut)
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("Check across a cut: %v, want DeadlineExceeded", err)
	}
	t.Logf("call across the cut failed after %v", time.Since(start).Round(time.Millisecond))
	n.Heal("node-1", "node-2")
	if err := check(c2, patience); err != nil {
		t.Fatalf("Check after the heal: %v", err)
	}

	// No connection yet: the dial blocks while node-3 is isolated.
	n.Isolate("node-3")
	c3 := client("node-3")
	if err := check(c3, rpcCut); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("first Check from an isolated node: %v, want DeadlineExceeded", err)
	}
	n.Restore("node-3")
	if err := check(c3, patience); err != nil {
		t.Fatalf("Check after Restore: %v", err)
	}
	if got := caller.Load(); got != "node-3" {
		t.Fatalf("server saw a call from %v, want node-3", got)
	}
}
