package forward

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/bucket"
	peerv1 "github.com/ringlimit/ringlimit/proto/peerv1"
)

// RegisterPeer registers the internal Peer service on s. Serve it on a
// listener only other nodes reach.
func (r *Router) RegisterPeer(s grpc.ServiceRegistrar) {
	peerv1.RegisterPeerServer(s, &peerServer{r: r})
}

type peerServer struct {
	peerv1.UnimplementedPeerServer
	r *Router
}

// Check decides forwarded checks on this node's store (hop limit 1).
func (s *peerServer) Check(ctx context.Context, req *peerv1.CheckRequest) (*peerv1.CheckResponse, error) {
	r := s.r
	checks := req.GetChecks()
	resp := &peerv1.CheckResponse{Owner: r.cfg.Self, Decisions: make([]*peerv1.Decision, len(checks))}
	decisions := make([]peerv1.Decision, len(checks))
	v := r.awaitMember(ctx, req.GetFrom())
	now := r.cfg.Clock.Now()
	r.lastPeerCheck.Store(int64(time.Since(r.started)))
	r.m.received.Add(float64(len(checks)))
	limits := make([]bucket.Limit, len(checks))
	for i, c := range checks {
		l, err := limitFromWire(c.GetLimit())
		if err == nil {
			err = bucket.CheckKey(c.GetKey())
		}
		if err == nil {
			err = l.CheckCost(c.GetCost())
		}
		if err != nil {
			return nil, status.Error(codes.InvalidArgument, fmt.Sprintf("checks[%d]: %v", i, err))
		}
		limits[i] = l
	}
	for i, c := range checks {
		if c.GetRefund() {
			r.cfg.Store.Refund(c.GetKey(), &limits[i], now, c.GetCost())
			resp.Decisions[i] = &decisions[i]
			continue
		}
		res := r.decideLocal(ctx, v, c.GetKey(), &limits[i], c.GetCost(), now)
		d := &decisions[i]
		if n := c.GetLease(); n > 0 && res.Allowed && limits[i].Algorithm() == bucket.TokenBucket {
			if d.LeaseGranted = r.cfg.Store.Grant(c.GetKey(), &limits[i], now, min(n, limits[i].Burst())); d.LeaseGranted > 0 {
				d.LeaseTtlMs = r.cfg.LeaseTTL.Milliseconds()
				res.Remaining = max(res.Remaining-d.LeaseGranted, 0)
			}
		}
		d.Allowed = res.Allowed
		d.Remaining = res.Remaining
		d.RetryAfterMs = res.RetryAfter.Milliseconds()
		d.ResetAfterMs = res.ResetAfter.Milliseconds()
		d.DelayMs = res.Delay.Milliseconds()
		resp.Decisions[i] = d
	}
	return resp, nil
}

// Handoff merges pushed bucket state: the more spent side wins.
func (s *peerServer) Handoff(ctx context.Context, req *peerv1.HandoffRequest) (*peerv1.HandoffResponse, error) {
	r := s.r
	now := r.cfg.Clock.Now()
	var merged int64
	for _, b := range req.GetBuckets() {
		l, err := limitFromWire(b.GetLimit())
		if err != nil {
			continue
		}
		if r.cfg.Store.Merge(b.GetKey(), &l, now, b.GetUsed()) == nil {
			merged++
		}
	}
	r.m.handoffReceived.Add(float64(merged))
	return &peerv1.HandoffResponse{Merged: merged}, nil
}

// Fetch answers a new owner asking for a key's state.
func (s *peerServer) Fetch(ctx context.Context, req *peerv1.FetchRequest) (*peerv1.FetchResponse, error) {
	r := s.r
	l, used, ok := r.cfg.Store.Used(req.GetKey(), r.cfg.Clock.Now())
	if !ok {
		return &peerv1.FetchResponse{}, nil
	}
	w := limitToWire(&l)
	return &peerv1.FetchResponse{Found: true, State: &peerv1.BucketState{Key: req.GetKey(), Limit: &w, Used: used}}, nil
}

// Stats reports this node's key count and ring version.
func (s *peerServer) Stats(ctx context.Context, _ *peerv1.StatsRequest) (*peerv1.StatsResponse, error) {
	return &peerv1.StatsResponse{Name: s.r.cfg.Self, Keys: int64(s.r.cfg.Store.Len()), RingVersion: s.r.RingVersion()}, nil
}

// PeerKeys asks every peer on the ring how many keys it holds, in parallel,
// each within PeerTimeout, and includes this node. Peers that do not answer
// are missing from the map.
func (r *Router) PeerKeys(ctx context.Context) map[string]int64 {
	v := r.view.Load()
	out := map[string]int64{r.cfg.Self: int64(r.cfg.Store.Len())}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for name, p := range v.peers {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, r.cfg.PeerTimeout)
			defer cancel()
			resp, err := p.client.Stats(ctx, &peerv1.StatsRequest{})
			if err != nil {
				return
			}
			mu.Lock()
			out[name] = resp.GetKeys()
			mu.Unlock()
		})
	}
	wg.Wait()
	return out
}

// Notify hands a message from another node to Config.OnNotify.
func (s *peerServer) Notify(ctx context.Context, req *peerv1.NotifyRequest) (*peerv1.NotifyResponse, error) {
	if s.r.cfg.OnNotify == nil {
		return nil, status.Error(codes.Unimplemented, "this node takes no notifications")
	}
	if err := s.r.cfg.OnNotify(ctx, req.GetKind(), req.GetPayload()); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	return &peerv1.NotifyResponse{}, nil
}

// Notify sends a message to the named peers (every peer on the ring when
// names is empty), in parallel, each within PeerTimeout, and returns the
// errors of those that did not take it.
func (r *Router) Notify(ctx context.Context, kind string, payload []byte, names ...string) error {
	v := r.view.Load()
	targets := map[string]*peer{}
	if len(names) == 0 {
		targets = v.peers
	}
	for _, n := range names {
		if p := v.peers[n]; p != nil {
			targets[n] = p
		}
	}
	errs := make(chan error, len(targets))
	var wg sync.WaitGroup
	for name, p := range targets {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, r.cfg.PeerTimeout)
			defer cancel()
			if _, err := p.client.Notify(ctx, &peerv1.NotifyRequest{From: r.cfg.Self, Kind: kind, Payload: payload}); err != nil {
				errs <- fmt.Errorf("%s: %w", name, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return errors.Join(all...)
}

// awaitMember returns the current view. A node whose ring is still only
// itself (it has just joined) first waits, at most half the peer deadline,
// for its ring to include from: it hears from members that already see it
// before its own ring knows them, and deciding then would start keys full
// instead of fetching them from their previous owners.
func (r *Router) awaitMember(ctx context.Context, from string) *view {
	v := r.view.Load()
	if from == "" || v.ring.Has(from) || v.ring.Len() > 1 {
		return v
	}
	timer := time.NewTimer(r.cfg.PeerTimeout / 2)
	defer timer.Stop()
	for {
		changed := *r.viewChanged.Load()
		if v = r.view.Load(); v.ring.Has(from) {
			return v
		}
		select {
		case <-changed:
		case <-timer.C:
			return r.view.Load()
		case <-ctx.Done():
			return r.view.Load()
		}
	}
}
