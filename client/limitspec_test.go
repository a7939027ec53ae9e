package client_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/client"
	pb "github.com/ringlimit/ringlimit/proto/ringlimitv1"
)

// A limit Validate refuses, sent anyway, is refused by a node in the same
// words: both read it with bucket.LimitSpec. Only the location differs
// (the client names the limit, the node the check's field, per_ms for
// the period the wire carries in milliseconds).
func TestLimitErrorsAsTheNodes(t *testing.T) {
	c := newCluster(t, 1, "")
	cl := newClient(t, client.Config{Targets: c.addrs()})
	for _, l := range []client.Limit{
		client.PerSecond(0),
		client.PerMinute(-3),
		client.Per(5, -time.Second),
		client.Per(5, 367*24*time.Hour),
		client.PerSecond(5).WithBurst(-2),
		client.PerSecond(5).WithBurst(1 << 31),
		client.PerSecond(bucket.MaxLogLimit + 1).WithAlgorithm(bucket.SlidingWindowLog),
		client.PerSecond(bucket.MaxCount + 1).WithAlgorithm(bucket.LeakyBucket),
	} {
		verr := l.Validate()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, serr := cl.Check(ctx, &pb.Check{Key: "k", Limit: client.LimitProto(l)})
		cancel()
		st, _ := status.FromError(serr)
		if verr == nil || st.Code() != codes.InvalidArgument {
			t.Errorf("%v: Validate %v, node %v; want both to refuse it", l, verr, serr)
			continue
		}
		mine, ok := strings.CutPrefix(verr.Error(), "client: limit "+l.String()+": ")
		theirs, ok2 := strings.CutPrefix(st.Message(), "checks[0].limit.")
		if after, isPer := strings.CutPrefix(theirs, "per_ms: "); isPer {
			theirs = "per: " + after
		}
		if !ok || !ok2 || mine != theirs {
			t.Errorf("%v: Validate %q, node %q; want the same words", l, verr, st.Message())
		}
	}
}
