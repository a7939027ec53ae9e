package api

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	pb "github.com/ringlimit/ringlimit/proto/ringlimitv1"
)

// benchKeys is how many keys the benchmarks cycle over. The limit admits
// every check: the fake clock never moves, and a billion fit in each bucket.
const benchKeys = 1024

// benchGRPCServer serves register's services on a loopback listener and
// returns a client connection to it.
func benchGRPCServer(b *testing.B, register func(*grpc.Server)) *grpc.ClientConn {
	b.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	s := grpc.NewServer()
	register(s)
	served := make(chan error, 1)
	go func() { served <- s.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		s.Stop()
		b.Fatal(err)
	}
	b.Cleanup(func() {
		conn.Close()
		s.Stop()
		<-served
	})
	return conn
}

func BenchmarkHTTPCheck(b *testing.B) {
	e := newTestEnv(b, nil)
	srv := httptest.NewServer(e.api.Handler(nil))
	b.Cleanup(srv.Close)
	tr := &http.Transport{MaxIdleConnsPerHost: 4}
	b.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr}
	url := srv.URL + "/v1/check"

	bodies := make([][]byte, benchKeys)
	for i := range bodies {
		bodies[i] = []byte(chk(fmt.Sprintf("bench:%d", i), "1", `{"limit":1000000000,"per":"1s"}`))
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(bodies[i%benchKeys]))
		if err != nil {
			b.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("check %d: status %d", i, resp.StatusCode)
		}
	}
}

// benchRequests returns n gRPC requests of per inline checks each, on keys
// "bench:0", "bench:1", … in order, under a limit that admits them all.
func benchRequests(n, per int) []*pb.CheckRequest {
	reqs := make([]*pb.CheckRequest, n)
	for i := range reqs {
		checks := make([]*pb.Check, per)
		for j := range checks {
			checks[j] = pbCheck(fmt.Sprintf("bench:%d", i*per+j), nil, pb.Algorithm_TOKEN_BUCKET, 1_000_000_000, 1000, 0)
		}
		reqs[i] = batch(checks...)
	}
	return reqs
}

func BenchmarkGRPCCheck(b *testing.B) {
	e := newTestEnv(b, nil)
	client := pb.NewRateLimiterClient(benchGRPCServer(b, func(s *grpc.Server) { e.api.RegisterGRPC(s) }))
	reqs := benchRequests(benchKeys, 1)
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		resp, err := client.Check(ctx, reqs[i%benchKeys])
		if err != nil {
			b.Fatal(err)
		}
		if !resp.GetDecisions()[0].GetAllowed() {
			b.Fatalf("check %d rejected", i)
		}
	}
}

// BenchmarkGRPCBaselineHealth is the floor under BenchmarkGRPCCheck: one
// unary call of the standard health service over the same kind of loopback
// connection, doing no work of its own.
func BenchmarkGRPCBaselineHealth(b *testing.B) {
	hs := health.NewServer()
	client := healthpb.NewHealthClient(benchGRPCServer(b, func(s *grpc.Server) { healthpb.RegisterHealthServer(s, hs) }))
	ctx := context.Background()
	req := &healthpb.HealthCheckRequest{}
	b.ReportAllocs()
	for b.Loop() {
		resp, err := client.Check(ctx, req)
		if err != nil {
			b.Fatal(err)
		}
		if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			b.Fatalf("health status %v", resp.GetStatus())
		}
	}
}

// BenchmarkHTTPHandler is the server's share of one POST /v1/check: the
// handler alone, without a network or an HTTP client (decode, check on the
// local store, headers, encode).
func BenchmarkHTTPHandler(b *testing.B) {
	e := newTestEnv(b, nil)
	h := e.api.Handler(nil)
	bodies := make([][]byte, benchKeys)
	for i := range bodies {
		bodies[i] = []byte(chk(fmt.Sprintf("bench:%d", i), "1", `{"limit":1000000000,"per":"1s"}`))
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		req := httptest.NewRequest(http.MethodPost, "/v1/check", bytes.NewReader(bodies[i%benchKeys]))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatalf("check %d: status %d", i, rec.Code)
		}
	}
}

// BenchmarkGRPCHandler is the server's share of one gRPC check without the
// network: the handler alone, on a request already decoded, as
// BenchmarkHTTPHandler is for HTTP (plan, check on the local store, answer).
func BenchmarkGRPCHandler(b *testing.B) {
	e := newTestEnv(b, nil)
	g := &grpcServer{api: e.api}
	reqs := benchRequests(benchKeys, 1)
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		resp, err := g.Check(ctx, reqs[i%benchKeys])
		if err != nil || !resp.GetDecisions()[0].GetAllowed() {
			b.Fatalf("check %d: %v, %v", i, resp, err)
		}
	}
}

// BenchmarkGRPCHandlerBatch is BenchmarkGRPCHandler with 16 checks per
// request: the handler's allocations are per request, not per check.
func BenchmarkGRPCHandlerBatch(b *testing.B) {
	e := newTestEnv(b, nil)
	g := &grpcServer{api: e.api}
	reqs := benchRequests(benchKeys/16, 16)
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		resp, err := g.Check(ctx, reqs[i%len(reqs)])
		if err != nil || len(resp.GetDecisions()) != 16 || !resp.GetDecisions()[15].GetAllowed() {
			b.Fatalf("check %d: %v, %v", i, resp, err)
		}
	}
}

// BenchmarkGRPCHandlerBatchHot is BenchmarkGRPCHandlerBatch with 64 checks
// of one key per request, as a client coalescing a hot key sends them.
func BenchmarkGRPCHandlerBatchHot(b *testing.B) {
	e := newTestEnv(b, nil)
	g := &grpcServer{api: e.api}
	checks := make([]*pb.Check, 64)
	for j := range checks {
		checks[j] = pbCheck("bench:hot", nil, pb.Algorithm_TOKEN_BUCKET, 1_000_000_000, 1000, 0)
	}
	req := batch(checks...)
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		resp, err := g.Check(ctx, req)
		if err != nil || len(resp.GetDecisions()) != 64 || !resp.GetDecisions()[63].GetAllowed() {
			b.Fatalf("check %d: %v, %v", i, resp, err)
		}
	}
}
