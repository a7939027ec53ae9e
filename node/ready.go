package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ringlimit/ringlimit/clock"
	"github.com/ringlimit/ringlimit/cluster"
	pb "github.com/ringlimit/ringlimit/proto/ringlimitv1"
)

// Readiness.
//
// A node becomes ready for traffic (GET /readyz 200, grpc.health.v1
// SERVING) once it has joined its cluster, is on its own ring, is not in a
// minority, and its ring has not changed for readySettle. It then stays
// ready until a graceful shutdown starts: a member dying or a partition
// later are answered by the failure modes, not by taking every node out of
// its load balancer at once. /healthz stays a liveness check: the process
// serves.

// readySettle is how long the ring must stay unchanged before the node
// reports ready: members joining together converge within a few gossip
// rounds, and a load balancer should not send traffic to a node whose ring
// is still moving.
const readySettle = time.Second

// healthPoll is how often the gRPC health service is brought in line with
// ready.
const healthPoll = 200 * time.Millisecond

// readiness tracks what ready needs that the cluster and router do not keep.
type readiness struct {
	clock    clock.Clock // Config.Clock
	mu       sync.Mutex
	ring     []string      // names on the ring at the last change
	changed  clock.Instant // when they last changed
	draining bool
	ready    bool // was ready once: stays so until draining
}

// noteMembers records the members on the ring, from the cluster's Listener.
func (r *readiness) noteMembers(all []cluster.Member) {
	var names []string
	for _, m := range all {
		if m.State == cluster.StateAlive || m.State == cluster.StateSuspect {
			names = append(names, m.Name)
		}
	}
	slices.Sort(names)
	r.mu.Lock()
	defer r.mu.Unlock()
	if !slices.Equal(names, r.ring) {
		r.ring, r.changed = names, r.clock.Now()
	}
}

// drain marks the node not ready for good; it reports whether it was ready
// to be drained (false the second time).
func (r *readiness) drain() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	was := r.draining
	r.draining = true
	return !was
}

// ready is nil when the node should get traffic, else why not.
func (n *Node) ready() error {
	r := &n.readiness
	r.mu.Lock()
	draining, ready, since := r.draining, r.ready, r.clock.Now().Sub(r.changed)
	r.mu.Unlock()
	if draining {
		return errors.New("draining: the node is shutting down")
	}
	if ready {
		return nil
	}
	if err := n.joining(since); err != nil {
		return err
	}
	r.mu.Lock()
	r.ready = !r.draining
	r.mu.Unlock()
	return nil
}

// joining is why a node that has not been ready yet is still not, or nil;
// since is how long ago its ring last changed.
func (n *Node) joining(since time.Duration) error {
	switch {
	case !n.cluster.Joined():
		return errors.New("not joined: no seed of --join has answered yet")
	case !slices.Contains(n.router.RingMembers(), n.router.Self()):
		return errors.New("not on the ring yet")
	case n.router.Status().Minority:
		return errors.New("in a minority: fewer than a majority of the cluster's members are up")
	case since < readySettle:
		return fmt.Errorf("the ring changed %v ago: waiting %v for it to settle", since.Round(time.Millisecond), readySettle)
	}
	return nil
}

// healthServices are the services the gRPC health service reports, "" being
// the whole server.
func healthServices(rls bool) []string {
	s := []string{"", pb.RateLimiter_ServiceDesc.ServiceName}
	if rls {
		s = append(s, rlsv3.RateLimitService_ServiceDesc.ServiceName)
	}
	return s
}

// runHealth keeps the gRPC health service's status in line with ready,
// every healthPoll on the node's clock, until ctx ends.
func (n *Node) runHealth(ctx context.Context, hs *health.Server, services []string) {
	t := n.clock.NewTicker(healthPoll)
	defer t.Stop()
	last := healthpb.HealthCheckResponse_UNKNOWN
	for {
		st := healthpb.HealthCheckResponse_SERVING
		if n.ready() != nil {
			st = healthpb.HealthCheckResponse_NOT_SERVING
		}
		if st != last {
			for _, s := range services {
				hs.SetServingStatus(s, st)
			}
			last = st
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
	}
}
