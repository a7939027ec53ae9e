package peer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/ringlimit/ringlimit/clock"
	peerv1 "github.com/ringlimit/ringlimit/proto/peerv1"
)

// stream is one Check stream to the peer, with the batches sent on it and
// not yet answered. It breaks as a whole: on a transport error, on a batch
// unanswered within Timeout, or when the peer closes; its batches then
// fail, and the next batch opens a new stream.
type stream struct {
	c      *conn
	cs     peerv1.Peer_CheckClient
	ctx    context.Context
	cancel context.CancelCauseFunc

	sendMu sync.Mutex // SendMsg and CloseSend are not safe for concurrent use
	// pend is the answer to a reverse batch that waits for this node's
	// next batch to carry it (reverse.go); guarded by sendMu.
	pend  *received
	alone checkBatch // a message of an answer alone; guarded by sendMu
	// reverse is set when the stream was opened to take the peer's
	// reverse batches: it has a Server to decide them (rev.server).
	reverse bool

	mu       sync.Mutex
	broken   bool // no more batches: it failed, or drains
	draining bool // close it once the batches in flight are answered
	inflight map[uint64]*batch
	watch    clock.Timer // fires when the oldest batch in flight may be overdue
	armed    bool
}

// open starts a Check stream and its receiver. Opening waits for a
// connection at most Timeout.
func (c *conn) open() (*stream, error) {
	ctx, cancel := context.WithCancelCause(c.ctx)
	s := &stream{c: c, ctx: ctx, cancel: cancel, inflight: make(map[uint64]*batch, c.cfg.Batch.MaxInFlight)}
	t := c.cfg.Clock.AfterFunc(c.cfg.Timeout, func() {
		cancel(fmt.Errorf("peer %s: no stream within %v", c.name, c.cfg.Timeout))
	})
	octx := ctx
	if c.rev.server.Load() != nil && c.cfg.Self < c.name && takesReverse(c.cfg) {
		s.reverse = true
		octx = metadata.AppendToOutgoingContext(ctx, reverseKey, "1")
	}
	cs, err := c.rpc.Check(octx, grpc.CallContentSubtype(codecName))
	t.Stop()
	if err != nil {
		cancel(err)
		if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
			err = cause
		}
		return nil, err
	}
	s.cs = cs
	s.watch = c.cfg.Clock.AfterFunc(c.cfg.Timeout, s.overdue)
	s.watch.Stop()
	c.wg.Go(s.recv)
	return s, nil
}

// add registers b as in flight under id. It reports false if the stream
// has broken.
func (s *stream) add(id uint64, b *batch) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.broken {
		return false
	}
	b.sent = s.c.cfg.Clock.Now()
	s.inflight[id] = b
	if !s.armed {
		s.armed = true
		s.watch.Reset(s.c.cfg.Timeout)
	}
	return true
}

// overdue breaks the stream if its oldest batch has waited Timeout for its
// answer; otherwise it sets the watch for when that batch would be.
func (s *stream) overdue() {
	s.mu.Lock()
	// A draining stream is broken but still has batches to answer: they
	// keep their deadline. A failed one has none left (inflight is nil).
	if len(s.inflight) == 0 {
		s.armed = false
		s.mu.Unlock()
		return
	}
	if _, left := oldestIn(s.inflight, s.c.cfg); left > 0 {
		s.watch.Reset(left)
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	s.c.quiet()
	s.cancel(fmt.Errorf("peer %s: no answer within %v", s.c.name, s.c.cfg.Timeout))
}

// oldestIn returns the batch of inflight (not empty) sent first, and how
// long it has left of cfg.Timeout.
func oldestIn(inflight map[uint64]*batch, cfg *Config) (*batch, time.Duration) {
	var oldest *batch
	for _, b := range inflight {
		if oldest == nil || b.sent < oldest.sent {
			oldest = b
		}
	}
	return oldest, oldest.sent.Add(cfg.Timeout).Sub(cfg.Clock.Now())
}

// recv hands each response to its batch, and has each reverse batch
// decided and answered, until the stream breaks; then it fails every batch
// still in flight.
func (s *stream) recv() {
	var ans checkAnswer // reused: finish copies what it keeps
	for {
		if err := s.cs.RecvMsg(&ans); err != nil {
			if c := context.Cause(s.ctx); c != nil && !errors.Is(c, context.Canceled) {
				err = c
			}
			s.fail(err)
			return
		}
		if ans.drain {
			s.mu.Lock()
			s.broken, s.draining = true, true
			s.mu.Unlock()
			s.closeIfDrained()
			continue
		}
		var rb *received // the reverse batch ans carries, if any
		if ans.reverseRaw != nil {
			var err error
			if rb, err = s.reverseBatch(ans.reverseRaw); err != nil {
				s.cancel(err)
				continue
			}
		}
		if rb == nil || ans.id != 0 {
			s.mu.Lock()
			b := s.inflight[ans.id]
			delete(s.inflight, ans.id)
			s.mu.Unlock()
			if b == nil {
				if rb != nil {
					receivedPool.Put(rb)
				}
				s.cancel(fmt.Errorf("peer %s answered batch %d, which is not in flight", s.c.name, ans.id))
				continue
			}
			s.c.finish(b, &ans, nil)
			s.closeIfDrained()
		}
		if rb != nil {
			s.answerReverse(rb)
		}
	}
}

// reverseBatch reads the reverse batch raw of a received message into a
// pooled batch, which only a stream opened for them (s.reverse) takes, and
// only from the peer it was dialed as (its certificate was verified for that
// name).
func (s *stream) reverseBatch(raw []byte) (*received, error) {
	if !s.reverse {
		return nil, fmt.Errorf("peer %s sent a reverse batch on a stream not opened for them", s.c.name)
	}
	rb := receivedPool.Get().(*received)
	b := rb.in.buffer(len(raw))
	copy(b, raw)
	err := rb.in.parse(b)
	if err == nil && rb.in.from != s.c.name {
		err = fmt.Errorf("peer %s sent a reverse batch from %q", s.c.name, rb.in.from)
	}
	if err == nil && rb.in.id == 0 {
		err = fmt.Errorf("peer %s sent a reverse batch without an id", s.c.name)
	}
	if err != nil {
		receivedPool.Put(rb)
		return nil, err
	}
	return rb, nil
}

// answerReverse decides the reverse batch rb on this node's peer service
// and sends the answer: with this node's next batch for the peer when one
// may go (batchMayGo) and goes within answerYields scheduling rounds, else
// alone. A batch that may wait is decided on its own goroutine and
// answered alone.
func (s *stream) answerReverse(rb *received) {
	srv := s.c.rev.server.Load()
	if srv.h.MayWait(rb.in.from) {
		s.c.wg.Go(func() {
			srv.decide(s.ctx, rb)
			s.sendAnswer(rb, false)
		})
		return
	}
	srv.decide(s.ctx, rb)
	if !s.batchMayGo() {
		s.sendAnswer(rb, false)
		return
	}
	s.sendMu.Lock()
	s.pend = rb
	s.sendMu.Unlock()
	yieldForAnswer(func() bool {
		s.sendMu.Lock()
		defer s.sendMu.Unlock()
		return s.pend != rb
	})
	s.sendAnswer(rb, true)
}

// batchMayGo reports whether a batch of this node's for the peer may go on
// the stream now: none is in flight on it, where it would hold the
// batcher's slot (Batch.MaxInFlight, 1 by default).
func (s *stream) batchMayGo() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.inflight) == 0 && !s.broken
}

// sendAnswer sends the answer of rb alone, unless pending is set and a
// batch took it already, and gives rb back to the pool.
func (s *stream) sendAnswer(rb *received, pending bool) {
	s.sendMu.Lock()
	if pending && s.pend != rb {
		s.sendMu.Unlock()
		return // sent with a batch, which gave rb back
	}
	if pending {
		s.pend = nil
	}
	s.alone.from, s.alone.reverse = s.c.cfg.Self, &rb.out
	err := s.cs.SendMsg(&s.alone)
	s.alone.reverse = nil
	s.sendMu.Unlock()
	receivedPool.Put(rb)
	if err != nil {
		s.cancel(nil) // the receiver sees the stream's end
	}
}

// closeIfDrained half-closes a draining stream once nothing is in flight;
// the peer then ends it, and recv sees the end.
func (s *stream) closeIfDrained() {
	s.mu.Lock()
	done := s.draining && len(s.inflight) == 0
	if done {
		s.draining = false
	}
	s.mu.Unlock()
	if done {
		s.sendMu.Lock()
		_ = s.cs.CloseSend()
		s.sendMu.Unlock()
	}
}

func (s *stream) fail(err error) {
	s.cancel(err)
	s.mu.Lock()
	s.broken = true
	failed := s.inflight
	s.inflight = nil
	s.watch.Stop()
	s.mu.Unlock()
	for _, b := range failed {
		s.c.finish(b, nil, err)
	}
}
