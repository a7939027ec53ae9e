package client

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/ringlimit/ringlimit/proto/ringlimitv1"
)

// A batch of checks, and one of lease operations, travels as a message of
// the node's Batches stream rather than as a call of its own: a message
// costs both sides less than a call (pinned, 64 goroutines, 10,000 keys:
// a tenth less CPU a check on the nodes and on the client). One
// stream per node is opened with the first batch, and again after it broke
// or the node drained it (it stops). A node that does not know Batches
// (an older one) answers Unimplemented: that batch, and every later one
// to that node, is sent as a call.

// errUnary fails a batch that must be sent as a call instead.
var errUnary = errors.New("client: node does not serve Batches")

// batchStream is one Batches stream to a node with the messages sent on
// it and not yet answered.
type batchStream struct {
	cs     pb.RateLimiter_BatchesClient
	cancel context.CancelFunc
	sendMu sync.Mutex // Send and CloseSend are not safe for concurrent use

	mu       sync.Mutex
	next     uint64
	waiting  map[uint64]chan<- *pb.BatchResponse
	err      error // why it broke; nil while it works
	draining bool  // the node drained it: no new message, close once answered
	closed   bool  // CloseSend was called
}

// usable reports whether new messages may go on s.
func (s *batchStream) usable() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err == nil && !s.draining
}

// batchStream returns n's stream, opening one when it has none usable;
// opening waits for a connection until ctx ends.
func (n *node) batchStream(ctx context.Context) (*batchStream, error) {
	n.streamMu.Lock()
	defer n.streamMu.Unlock()
	if s := n.stream; s != nil && s.usable() {
		return s, nil
	}
	sctx, cancel := context.WithCancel(n.c.ctx)
	stop := context.AfterFunc(ctx, cancel)
	cs, err := n.rpc.Batches(sctx)
	if !stop() { // the batch's deadline came first
		err = status.FromContextError(ctx.Err()).Err()
	}
	if err != nil {
		cancel()
		return nil, err
	}
	s := &batchStream{cs: cs, cancel: cancel, waiting: map[uint64]chan<- *pb.BatchResponse{}}
	n.stream = s
	n.c.wg.Go(func() { n.receive(s) })
	return s, nil
}

// receive hands each answer of s to its waiter until s ends.
func (n *node) receive(s *batchStream) {
	defer s.cancel()
	for {
		r, err := s.cs.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = status.Error(codes.Unavailable, "client: "+n.addr+" ended the Batches stream")
			}
			s.mu.Lock()
			s.err = err
			for id, ch := range s.waiting {
				close(ch)
				delete(s.waiting, id)
			}
			s.mu.Unlock()
			return
		}
		s.mu.Lock()
		var ch chan<- *pb.BatchResponse
		if r.GetDrain() {
			s.draining = true
		} else if ch = s.waiting[r.GetId()]; ch != nil {
			delete(s.waiting, r.GetId())
		}
		s.closeIfDrained()
		s.mu.Unlock()
		if ch != nil {
			ch <- r // buffered
		}
	}
}

// register gives req the next id of s and has ch wait for its answer, or
// returns why s takes no more messages.
func (s *batchStream) register(req *pb.BatchRequest, ch chan<- *pb.BatchResponse) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.err != nil:
		return s.err
	case s.draining:
		return status.Error(codes.Unavailable, "client: the node drains its Batches streams")
	}
	s.next++
	req.Id = s.next
	s.waiting[req.Id] = ch
	return nil
}

// closeIfDrained closes the sending side of a drained stream once every
// message sent on it is answered (s.mu held): the node then ends it.
func (s *batchStream) closeIfDrained() {
	if s.draining && len(s.waiting) == 0 && !s.closed {
		s.closed = true
		go func() { // not under mu: CloseSend waits for a Send in progress
			s.sendMu.Lock()
			defer s.sendMu.Unlock()
			_ = s.cs.CloseSend()
		}()
	}
}

// roundTrip sends req on n's Batches stream and waits for its answer, or
// for ctx to end. It returns the status error the message's call would
// have failed with, one wrapping errUnary when the batch must be sent as a
// call, or the stream's error.
func (n *node) roundTrip(ctx context.Context, req *pb.BatchRequest) (*pb.BatchResponse, error) {
	if n.unary.Load() {
		return nil, errUnary
	}
	ch := make(chan *pb.BatchResponse, 1)
	var s *batchStream
	for try := 0; ; try++ {
		var err error
		if s, err = n.batchStream(ctx); err != nil {
			return nil, n.streamErr(err)
		}
		if err = s.register(req, ch); err == nil {
			break
		}
		if try > 0 { // it broke or drained since it was opened: once more only
			return nil, n.streamErr(err)
		}
	}
	if dl, ok := ctx.Deadline(); ok {
		req.TimeoutMs = uint32(min(max((time.Until(dl)+time.Millisecond-1)/time.Millisecond, 1), 1<<31))
	}
	// A Send held up past the batch's deadline (a node that stopped
	// reading) breaks the stream: the next batch opens another.
	stop := context.AfterFunc(ctx, s.cancel)
	s.sendMu.Lock()
	_ = s.cs.Send(req) // when it fails the stream broke: Recv says why, and fails this message
	s.sendMu.Unlock()
	stop()
	select {
	case r, ok := <-ch:
		if !ok {
			s.mu.Lock()
			err := s.err
			s.mu.Unlock()
			return nil, n.streamErr(err)
		}
		if c := codes.Code(r.GetCode()); c != codes.OK {
			return nil, status.Error(c, r.GetMessage())
		}
		return r, nil
	case <-ctx.Done():
		s.mu.Lock()
		delete(s.waiting, req.Id)
		s.closeIfDrained()
		s.mu.Unlock()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

// streamErr is err, from a stream that broke: errUnary for a node that
// does not know Batches (it is then sent calls), err otherwise.
func (n *node) streamErr(err error) error {
	if status.Code(err) == codes.Unimplemented {
		n.unary.Store(true)
		return errUnary
	}
	return err
}

// checkCall sends one batch of checks: on the node's Batches stream, or
// as a Check call to a node that does not serve Batches.
func (n *node) checkCall(ctx context.Context, req *pb.CheckRequest) (*pb.CheckResponse, error) {
	r, err := n.roundTrip(ctx, &pb.BatchRequest{Call: &pb.BatchRequest_Check{Check: req}})
	if errors.Is(err, errUnary) {
		return n.rpc.Check(ctx, req)
	}
	return r.GetCheck(), err
}

// leasesCall sends one batch of lease operations: on the node's Batches
// stream, or as a Leases call to a node that does not serve Batches.
func (n *node) leasesCall(ctx context.Context, req *pb.LeasesRequest) (*pb.LeasesResponse, error) {
	r, err := n.roundTrip(ctx, &pb.BatchRequest{Call: &pb.BatchRequest_Leases{Leases: req}})
	if errors.Is(err, errUnary) {
		return n.rpc.Leases(ctx, req)
	}
	return r.GetLeases(), err
}
