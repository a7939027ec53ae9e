package forward

import (
	"context"
	"errors"
	"fmt"
	"io"
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

// Check decides the batches of checks a peer forwards (hop limit 1), one
// after the other as they arrive on the stream. A batch that may have to
// wait (for its sender to join this node's ring, or for a previous owner's
// state after a ring change) is decided on its own goroutine instead, so
// that it does not hold up the batches behind it. Batches and answers are
// pooled: deciding a batch allocates nothing per check.
func (s *peerServer) Check(st peerv1.Peer_CheckServer) error {
	ctx := st.Context()
	var mu sync.Mutex // st.SendMsg is not safe for concurrent use
	var wg sync.WaitGroup
	stop := make(chan struct{})
	defer func() {
		close(stop)
		wg.Wait()
	}()
	send := func(pb *peerBatch) error {
		mu.Lock()
		defer mu.Unlock()
		return st.SendMsg(&pb.out) // encodes before it returns
	}
	wg.Go(func() {
		select {
		case <-s.r.draining:
			mu.Lock()
			_ = st.SendMsg(&checkAnswer{owner: s.r.cfg.Self, drain: true})
			mu.Unlock()
		case <-stop:
		}
	})
	for {
		pb := batchPool.Get().(*peerBatch)
		if err := st.RecvMsg(&pb.in); err != nil {
			batchPool.Put(pb)
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if s.r.mayWait(pb.in.from) {
			wg.Go(func() {
				s.r.decide(ctx, pb)
				_ = send(pb) // a broken stream ends RecvMsg too
				batchPool.Put(pb)
			})
			continue
		}
		s.r.decide(ctx, pb)
		err := send(pb)
		batchPool.Put(pb)
		if err != nil {
			return err
		}
	}
}

// DrainPeers asks every peer with a Check stream open to this node to end
// it: the peer sends nothing more on it, the batches in flight are answered,
// and the peer closes it, so that a graceful stop of the gRPC server need
// not wait for streams that would otherwise stay open. A node calls it when
// it stops serving; Close calls it too.
func (r *Router) DrainPeers() {
	r.drainOnce.Do(func() { close(r.draining) })
}

// peerBatch is a received batch with its answer, reused through batchPool.
type peerBatch struct {
	in     checkBatch
	out    checkAnswer
	limits []bucket.Limit
}

var batchPool = sync.Pool{New: func() any { return new(peerBatch) }}

// mayWait reports whether deciding a batch from the named peer may block:
// the sender is not on this node's ring yet, or a ring change is recent
// enough that keys may be fetched from their previous owner.
func (r *Router) mayWait(from string) bool {
	v := r.view.Load()
	if from != "" && !v.ring.Has(from) && v.ring.Len() <= 1 {
		return true
	}
	return (v.prev != nil || v.others != nil) && r.cfg.Clock.Now()-v.changed < int64(r.cfg.Grace)
}

// decide decides one forwarded batch on this node's store into pb.out. The
// batch is applied only if every check in it is valid.
func (r *Router) decide(ctx context.Context, pb *peerBatch) {
	in, out := &pb.in, &pb.out
	out.owner, out.id, out.err, out.decisions = r.cfg.Self, in.id, "", out.decisions[:0]
	v := r.awaitMember(ctx, in.from)
	now := r.cfg.Clock.Now()
	r.lastPeerCheck.Store(int64(time.Since(r.started)))
	r.m.received.Add(float64(len(in.checks)))
	pb.limits = pb.limits[:0]
	for i := range in.checks {
		c := &in.checks[i]
		l, err := c.limit.toLimit()
		pb.limits = append(pb.limits, l)
		if err == nil {
			err = bucket.CheckKey(c.key)
		}
		if err == nil {
			err = pb.limits[i].CheckCost(c.cost)
		}
		if err != nil {
			out.err = fmt.Sprintf("checks[%d]: %v", i, err)
			return
		}
	}
	for i := range in.checks {
		c, l := &in.checks[i], &pb.limits[i]
		out.decisions = append(out.decisions, wireDecision{})
		d := &out.decisions[i]
		if c.refund {
			r.cfg.Store.Refund(c.key, l, now, c.cost)
			continue
		}
		res := r.decideLocal(ctx, v, c.key, l, c.cost, now)
		if c.lease > 0 && res.Allowed && l.Algorithm() == bucket.TokenBucket {
			if d.leaseGranted = r.cfg.Store.Grant(c.key, l, now, min(c.lease, l.Burst())); d.leaseGranted > 0 {
				d.leaseTTLMs = r.cfg.LeaseTTL.Milliseconds()
				res.Remaining = max(res.Remaining-d.leaseGranted, 0)
			}
		}
		d.allowed = res.Allowed
		d.remaining = res.Remaining
		d.retryAfterMs = res.RetryAfter.Milliseconds()
		d.resetAfterMs = res.ResetAfter.Milliseconds()
		d.delayMs = res.Delay.Milliseconds()
	}
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
