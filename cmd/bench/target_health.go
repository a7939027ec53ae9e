package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// healthTarget calls grpc.health.v1.Health/Check: a unary call that does
// nothing, the floor under any unary RPC. Each call counts as one allowed
// "check" whatever len(keys) is.
type healthTarget struct {
	addrs   []string
	conns   []*grpc.ClientConn
	clients []healthpb.HealthClient
	rr      roundRobin
}

func newHealthTarget(addrs []string) (*healthTarget, error) {
	conns, err := dialAll(addrs)
	if err != nil {
		return nil, err
	}
	t := &healthTarget{addrs: addrs, conns: conns, rr: roundRobin{n: uint64(len(conns))}}
	for _, cc := range conns {
		t.clients = append(t.clients, healthpb.NewHealthClient(cc))
	}
	return t, nil
}

var healthReq = &healthpb.HealthCheckRequest{}

func (t *healthTarget) Check(ctx context.Context, keys []string) (allowed, rejected, degraded int, err error) {
	resp, err := t.clients[t.rr.pick()].Check(ctx, healthReq)
	if err != nil {
		return 0, 0, 0, err
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return 0, 0, 0, fmt.Errorf("health status %v", resp.GetStatus())
	}
	return 1, 0, 0, nil
}

func (t *healthTarget) Describe() string { return fmt.Sprintf("grpc-health %v", t.addrs) }
func (t *healthTarget) Close() error     { return closeAll(t.conns) }

// serveHealth serves the standard health service (status SERVING) on addr
// until ctx ends: the bare unary server of the baseline, in its own
// process so that its CPU can be read from /proc like a node's.
func serveHealth(ctx context.Context, addr string, log io.Writer) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	fmt.Fprintf(log, "bench: serving grpc.health.v1 on %s (pid %d)\n", lis.Addr(), os.Getpid())
	return serveHealthOn(ctx, lis)
}

// serveHealthOn serves the health service on lis until ctx ends.
func serveHealthOn(ctx context.Context, lis net.Listener) error {
	s := grpc.NewServer()
	healthpb.RegisterHealthServer(s, health.NewServer())
	served := make(chan error, 1)
	go func() { served <- s.Serve(lis) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	s.Stop()
	<-served
	return nil
}
