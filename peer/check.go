package peer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/bucket"
	peerv1 "github.com/ringlimit/ringlimit/proto/peerv1"
)

// The server side of the Check stream: the batches a peer forwards, decided
// here, and on a stream opened for them, this node's reverse batches for
// that peer (reverse.go).

// Check decides the batches of checks a peer forwards (hop limit 1), one
// after the other as they arrive on the stream; a batch that may wait is
// decided on its own goroutine. Batches and answers are pooled: deciding a
// batch allocates nothing per check. On a stream opened for reverse
// batches (reverse.go), this node's Pool sends its own batches for the
// peer, and an answer waits a few scheduling rounds for one of them to
// carry it.
func (s *Server) Check(st peerv1.Peer_CheckServer) error {
	ctx := st.Context()
	var mu sync.Mutex // st.SendMsg is not safe for concurrent use
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var link *reverseLink // this node's batches for sender on st; nil: none
	var pend *received    // an answer waiting for a reverse batch to carry it; guarded by mu
	var drained bool      // drain sent or the handler returning: no reverse batch follows; guarded by mu
	defer func() {
		mu.Lock()
		drained = true // the stream is done: no more reverse batches
		mu.Unlock()
		close(stop)
		wg.Wait()
		if link != nil {
			s.rev.drop(link)
			link.close(fmt.Errorf("peer %s: its Check stream to this node ended", link.peer))
		}
	}()
	send := func(pb *received) error {
		mu.Lock()
		defer mu.Unlock()
		return st.SendMsg(&pb.out) // encodes before it returns
	}
	wg.Go(func() {
		select {
		case <-s.draining:
			mu.Lock()
			drained = true
			_ = st.SendMsg(&checkAnswer{owner: s.self, drain: true})
			mu.Unlock()
		case <-stop:
		}
	})
	var alone checkAnswer // a reverse batch alone; guarded by mu
	sendReverse := func(m *checkBatch) error {
		mu.Lock()
		defer mu.Unlock()
		if drained {
			return errReverseClosed
		}
		out := &alone
		p := pend
		pend = nil
		if p != nil {
			out = &p.out
		}
		out.owner, out.reverse = s.self, m
		err := st.SendMsg(out)
		out.reverse = nil
		if p != nil {
			receivedPool.Put(p)
		}
		return err
	}
	reverse := s.rev != nil && reverseAsked(ctx) && takesReverse(s.poolCfg)
	var sender string   // the last batch's sender, authorized
	var authGen uint64  // the generation of the CAs Recheck adopted when it was
	var ans checkAnswer // a reverse batch's answer, reused: finish copies what it keeps
	for {
		pb := receivedPool.Get().(*received)
		if err := st.RecvMsg(&pb.in); err != nil {
			receivedPool.Put(pb)
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if s.known != nil && (sender == "" || pb.in.from != sender || s.checkedGen() != authGen) {
			// A new sender, or new CAs adopted since it was authorized.
			authGen = s.checkedGen()
			if err := s.authorize(ctx, pb.in.from); err != nil {
				receivedPool.Put(pb)
				return err
			}
			sender = strings.Clone(pb.in.from)
		}
		if reverse && link == nil {
			// The sender, authorized; or, without authentication, the
			// name the first batch gives (the peer port trusts its
			// callers then).
			name := sender
			if s.known == nil {
				name = strings.Clone(pb.in.from)
			}
			link = newReverseLink(s.poolCfg, name, sendReverse)
			s.rev.put(link)
		}
		if link != nil && pb.in.from != link.peer {
			receivedPool.Put(pb)
			return status.Errorf(codes.InvalidArgument, "a batch from %q on the Check stream of %s", pb.in.from, link.peer)
		}
		if pb.in.reverseRaw != nil {
			err := errors.New("a reverse answer on a stream not opened for reverse batches")
			if link != nil {
				err = link.answer(pb.in.reverseRaw, &ans)
			}
			if err != nil {
				receivedPool.Put(pb)
				return status.Error(codes.InvalidArgument, err.Error())
			}
			if pb.in.id == 0 && len(pb.in.checks) == 0 {
				receivedPool.Put(pb) // an answer alone
				continue
			}
		}
		if s.h.MayWait(pb.in.from) {
			wg.Go(func() {
				s.decide(ctx, pb)
				_ = send(pb) // a broken stream ends RecvMsg too
				receivedPool.Put(pb)
			})
			continue
		}
		s.decide(ctx, pb)
		if link != nil && link.batchMayGo() {
			// Wait a few rounds for a reverse batch to carry the answer.
			mu.Lock()
			pend = pb
			mu.Unlock()
			yieldForAnswer(func() bool {
				mu.Lock()
				defer mu.Unlock()
				return pend != pb
			})
			mu.Lock()
			mine := pend == pb
			if mine {
				pend = nil
			}
			mu.Unlock()
			if !mine {
				continue // sent with a reverse batch, which gave pb back
			}
		}
		err := send(pb)
		receivedPool.Put(pb)
		if err != nil {
			return err
		}
	}
}

// received is a received batch with its answer, reused through
// receivedPool.
type received struct {
	in      checkBatch
	out     checkAnswer
	reqs    []Request
	answers []Answer
	spans   []tracedCheck // the traced checks of in, while they are decided
}

var receivedPool = sync.Pool{New: func() any { return new(received) }}

// decide validates one batch whole and, if every check in it is valid,
// has the handler decide it into pb.out.
func (s *Server) decide(ctx context.Context, pb *received) {
	in, out := &pb.in, &pb.out
	out.owner, out.id, out.err, out.decisions = s.self, in.id, "", out.decisions[:0]
	if len(in.checks) > MaxCheckBatch {
		s.m.refused.Inc()
		out.err = fmt.Sprintf("batch of %d checks, the most is %d", len(in.checks), MaxCheckBatch)
		return
	}
	s.m.received.Add(float64(len(in.checks)))
	s.peerChecks.Add(uint64(len(in.checks)))
	pb.reqs = pb.reqs[:0]
	for i := range in.checks {
		c := &in.checks[i]
		l, err := c.limit.toLimit()
		if err == nil {
			err = bucket.CheckKey(c.key)
		}
		if err == nil {
			err = errors.Join(l.CheckCost(c.cost), c.checkAdaptive())
		}
		if err != nil {
			out.err = fmt.Sprintf("checks[%d]: %v", i, err)
			return
		}
		pb.reqs = append(pb.reqs, Request{Key: c.key, Limit: l, Cost: c.cost, Refund: c.refund, Lease: c.lease, Final: c.final, Sync: c.sync, Peek: c.peek,
			ReserveTTL: time.Duration(max(c.reserveTTLNs, 0))})
		c.setAdaptive(&pb.reqs[len(pb.reqs)-1])
	}
	if cap(pb.answers) < len(pb.reqs) {
		pb.answers = make([]Answer, len(pb.reqs))
	}
	pb.answers = pb.answers[:len(pb.reqs)]
	clear(pb.answers)
	s.startSpans(ctx, pb)
	s.h.Decide(ctx, in.from, in.ringVersion, pb.reqs, pb.answers)
	for i := range pb.answers {
		out.decisions = append(out.decisions, wireDecision{})
		out.decisions[i].fromAnswer(&pb.answers[i])
	}
	pb.endSpans()
}
