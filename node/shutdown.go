package node

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"google.golang.org/grpc"
)

// shutdown leaves in order: stop reporting ready and keep serving for
// --drain-delay, announce the leave, hand every bucket to its new
// owner (still serving peers, who may fetch state meanwhile), stop the
// public surfaces after the checks in flight, then close the peer
// connections and the gossip.
func (n *Node) shutdown(ctx context.Context) error {
	var errs []error
	n.drain(ctx)
	if err := n.cluster.Leave(ctx); err != nil {
		errs = append(errs, fmt.Errorf("leave: %w", err))
	}
	if err := n.router.Leave(ctx); err != nil {
		errs = append(errs, fmt.Errorf("handoff: %w", err))
	}
	qctx, cancel := context.WithTimeout(ctx, cmp.Or(n.quiesceTimeout, 2*time.Second))
	if err := n.router.Quiesce(qctx, cmp.Or(n.quiesceIdle, 150*time.Millisecond)); err != nil {
		n.log.Warn("quiesce", "err", err)
	}
	cancel()
	n.log.Info("handed off", "keys", n.store.Len())
	n.peerServer.Drain() // peers end their Check streams, or GracefulStop would wait for them
	n.api.DrainStreams() // and clients their Batches streams
	grpcDone := make(chan struct{})
	go func() {
		var wg sync.WaitGroup
		wg.Go(n.grpcServer.GracefulStop)
		wg.Go(n.peerGRPC.GracefulStop)
		wg.Wait()
		close(grpcDone)
	}()
	httpDone := make(chan error, 1)
	go func() { httpDone <- n.httpServer.Shutdown(ctx) }()
	// Wall time, not the node's clock: net/http's Shutdown polls its
	// connections on the runtime's clock, and a connection that has not
	// sent a request would hold it for 5s; on a clock that stands still,
	// only this poll closes it.
	tick := time.NewTicker(50 * time.Millisecond)
	for waiting := true; waiting; {
		n.closeFresh()
		select {
		case err := <-httpDone:
			if err != nil {
				errs = append(errs, fmt.Errorf("http shutdown: %w", err))
			}
			waiting = false
		case <-tick.C:
		}
	}
	tick.Stop()
	select {
	case <-grpcDone:
	case <-ctx.Done():
		n.grpcServer.Stop()
		n.peerGRPC.Stop()
		<-grpcDone
		errs = append(errs, fmt.Errorf("grpc shutdown: %w", ctx.Err()))
	}
	for range 3 {
		if err := <-n.served; err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, grpc.ErrServerStopped) {
			errs = append(errs, err)
		}
	}
	if n.state != nil { // nothing is spent any more: the last state file holds it all
		if err := n.state.write(); err != nil {
			errs = append(errs, fmt.Errorf("state file: %w", err))
		}
	}
	if err := n.router.Close(ctx); err != nil {
		errs = append(errs, err)
	}
	if err := n.peers.Close(ctx); err != nil {
		errs = append(errs, err)
	}
	if err := n.cluster.Close(ctx); err != nil {
		errs = append(errs, fmt.Errorf("cluster: %w", err))
	}
	n.stopBg()
	n.bg.Wait()
	if n.audit != nil {
		if err := n.audit.Close(); err != nil {
			errs = append(errs, fmt.Errorf("audit log: %w", err))
		}
	}
	err := errors.Join(errs...)
	if err == nil {
		n.log.Info("node stopped")
	}
	return err
}

// drain turns /readyz and the gRPC health service to not ready at once, and
// keeps serving for the drain delay on the node's clock (or until ctx ends), so that load
// balancers stop sending traffic before the node leaves.
func (n *Node) drain(ctx context.Context) {
	if !n.readiness.drain() {
		return
	}
	n.health.Shutdown() // NOT_SERVING for every service, for good
	if n.drainFor <= 0 {
		return
	}
	n.log.Info("draining: not ready, still serving", "for", n.drainFor)
	t := n.clock.NewTimer(n.drainFor)
	defer t.Stop()
	select {
	case <-t.C():
	case <-ctx.Done():
	}
}

// Close stops accepting, waits for checks in flight until ctx ends, and
// closes the listeners. It is safe to call more than once; later calls
// return the first call's result. Given a context that has already ended,
// the node hands nothing off and stops as a crashed one would: the
// members promote their replicas of its keys.
func (n *Node) Close(ctx context.Context) error {
	n.closeOnce.Do(func() { n.closeErr = n.shutdown(ctx) })
	return n.closeErr
}
