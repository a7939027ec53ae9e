package api

import (
	"context"
	"log/slog"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/forward"
	pb "github.com/ringlimit/ringlimit/proto/ringlimitv1"
)

// ringOnly is a Cluster that knows its ring and nothing else.
type ringOnly struct {
	Cluster
	ring forward.ClientRing
}

func (c ringOnly) RingVersion() uint64            { return c.ring.Version }
func (c ringOnly) ClientRing() forward.ClientRing { return c.ring }

// The Ring call answers the table, then the version alone to a caller that
// holds it; with --private-reads only an admin caller gets either, and
// answers to others carry no ring version.
func TestGRPCRing(t *testing.T) {
	cr := forward.ClientRing{Version: 7, Names: []string{"a", "b"}, Addrs: []string{"10.0.0.1:9090", "10.0.0.2:9090"},
		Owners: []int{0, 1, 1}, Successors: []int{1, 0, 0}}
	for _, private := range []bool{false, true} {
		e := newTestEnv(t, nil)
		tokens := &Tokens{}
		tokens.Set([]Token{{Name: "ops", Token: testAdminToken}})
		a, err := New(Config{Checker: e.router, Cluster: ringOnly{ring: cr}, AdminTokens: tokens, PrivateReads: private,
			Logger: slog.New(slog.DiscardHandler), Registerer: prometheus.NewRegistry()})
		if err != nil {
			t.Fatal(err)
		}
		g := &grpcServer{api: a}
		admin := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer "+testAdminToken))
		stranger := context.Background()

		r, err := g.Ring(stranger, &pb.RingRequest{})
		if private {
			if status.Code(err) != codes.PermissionDenied {
				t.Fatalf("private: Ring without a token = %v, %v; want PermissionDenied", r, err)
			}
		} else if err != nil {
			t.Fatal(err)
		}
		ctx := stranger
		if private {
			ctx = admin
		}
		r, err = g.Ring(ctx, &pb.RingRequest{})
		if err != nil || r.GetVersion() != 7 || len(r.GetMembers()) != 2 || r.GetMembers()[1].GetAddr() != "10.0.0.2:9090" ||
			!slices.Equal(r.GetOwners(), []uint32{0, 1, 1}) || !slices.Equal(r.GetSuccessors(), []uint32{1, 0, 0}) {
			t.Fatalf("private %v: Ring = %v, %v; want version 7, members a and b, owners [0 1 1], successors [1 0 0]", private, r, err)
		}
		r, err = g.Ring(ctx, &pb.RingRequest{KnownVersion: 7})
		if err != nil || r.GetVersion() != 7 || len(r.GetMembers()) != 0 || len(r.GetOwners()) != 0 {
			t.Fatalf("private %v: Ring of the known version = %v, %v; want the version alone", private, r, err)
		}
		check := &pb.CheckRequest{Checks: []*pb.Check{{Key: "k", Limit: &pb.Limit{Limit: 10, PerMs: 1000}}}}
		want := uint64(7)
		if private {
			want = 0
		}
		if resp, err := g.Check(stranger, check); err != nil || resp.GetRingVersion() != want {
			t.Fatalf("private %v: Check answered ring version %d, %v; want %d", private, resp.GetRingVersion(), err, want)
		}
	}
}
