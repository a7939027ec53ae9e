package peer

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"google.golang.org/grpc"

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
	cs, err := c.rpc.Check(ctx, grpc.CallContentSubtype(codecName))
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
	oldest := clock.Instant(1<<63 - 1)
	for _, b := range s.inflight {
		oldest = min(oldest, b.sent)
	}
	left := oldest.Add(s.c.cfg.Timeout).Sub(s.c.cfg.Clock.Now())
	if left > 0 {
		s.watch.Reset(left)
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	s.c.quiet()
	s.cancel(fmt.Errorf("peer %s: no answer within %v", s.c.name, s.c.cfg.Timeout))
}

// recv hands each response to its batch until the stream breaks, then fails
// every batch still in flight.
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
		s.mu.Lock()
		b := s.inflight[ans.id]
		delete(s.inflight, ans.id)
		s.mu.Unlock()
		if b == nil {
			s.cancel(fmt.Errorf("peer %s answered batch %d, which is not in flight", s.c.name, ans.id))
			continue
		}
		s.c.finish(b, &ans, nil)
		s.closeIfDrained()
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
