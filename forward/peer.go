package forward

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/bucket"
	peerv1 "github.com/ringlimit/ringlimit/proto/peerv1"
)

var errPeerClosed = errors.New("peer connection closed")

// StreamWindow and ConnWindow are the HTTP/2 flow-control windows of the
// connections between nodes, per stream and per connection, in bytes. Fixed
// windows turn off grpc-go's bandwidth-delay estimation, which sends a ping
// (and gets an ack) on every round trip of a busy connection: frames that
// cost about 6% of the machine's CPU per check with one unary call per check
// on 3 nodes. A node serves its public gRPC API with the same windows. The
// stream window holds the largest batch: 512 checks, about 40 KB with short
// keys and 550 KB with keys of the longest (1,024 bytes).
const (
	StreamWindow = 1 << 20
	ConnWindow   = 2 << 20
)

// peer is the connection to one other node and the batcher in front of it.
// A single loop goroutine takes a slot (MaxInFlight), then gathers every
// call waiting in the queue, up to MaxBatch checks, into one batch, which it
// writes to the peer's Check stream: while all slots are busy, calls pile
// up and leave together. A batch costs one message each way on a stream
// that stays open, not an RPC of its own.
type peer struct {
	r        *Router
	name     string
	addr     string
	conn     *grpc.ClientConn
	client   peerv1.PeerClient
	queue    chan *call
	slots    chan struct{}
	done     chan struct{}
	retireAt int64 // set under Router.mu when the peer leaves the ring

	// Owned by the loop goroutine.
	st     *stream    // the open Check stream; nil before the first batch
	nextID uint64     // id of the last batch sent
	out    checkBatch // the batch being sent, reused
}

// call is one request's checks for this peer, waiting for their decisions.
type call struct {
	ctx    context.Context // the caller's: once it ends, the call is not sent
	checks []wireCheck
	res    []wireDecision
	owner  string
	err    error
	done   chan struct{}
}

func newPeer(r *Router, name, addr string) (*peer, error) {
	opts := append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStaticStreamWindowSize(StreamWindow), grpc.WithStaticConnWindowSize(ConnWindow),
	}, r.cfg.DialOptions...)
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, err
	}
	p := &peer{
		r:      r,
		name:   name,
		addr:   addr,
		conn:   conn,
		client: peerv1.NewPeerClient(conn),
		queue:  make(chan *call, 4096),
		slots:  make(chan struct{}, r.cfg.MaxInFlight),
		done:   make(chan struct{}),
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		p.loop()
	}()
	return p, nil
}

func (p *peer) close() {
	select {
	case <-p.done:
	default:
		close(p.done)
		p.conn.Close()
	}
}

// check sends g's checks to the peer, in calls of at most MaxBatch checks,
// and writes their results into out.
func (p *peer) check(ctx context.Context, g *group, checks []Check, out []Result) error {
	for idx := g.idx; len(idx) > 0; {
		n := min(len(idx), p.r.cfg.MaxBatch)
		if err := p.checkChunk(ctx, idx[:n], checks, out); err != nil {
			return err
		}
		idx = idx[n:]
	}
	return nil
}

func (p *peer) checkChunk(ctx context.Context, idx []int, checks []Check, out []Result) error {
	c := &call{ctx: ctx, checks: make([]wireCheck, len(idx)), res: make([]wireDecision, len(idx)), done: make(chan struct{})}
	var asked []int // indexes (into idx) of the checks that ask for a lease
	for j, i := range idx {
		ch := &checks[i]
		c.checks[j] = wireCheck{key: ch.Key, limit: toWireLimit(&ch.Limit), cost: ch.Cost, refund: ch.Refund}
		if ch.Lease && !ch.Refund {
			if _, busy := p.r.leases.pending.LoadOrStore(ch.Key, struct{}{}); !busy {
				c.checks[j].lease = p.r.leaseSize(ch, p.r.view.Load().ring.Len())
				asked = append(asked, j)
			}
		}
	}
	defer func() {
		for _, j := range asked {
			p.r.leases.pending.Delete(checks[idx[j]].Key)
		}
	}()
	select {
	case p.queue <- c:
	case <-p.done:
		return errPeerClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-c.done:
	case <-p.done: // closed after c was queued: nobody may answer it
		select {
		case <-c.done:
		default:
			return errPeerClosed
		}
	case <-ctx.Done():
		return ctx.Err()
	}
	if c.err != nil {
		return c.err
	}
	for _, j := range asked {
		if d := &c.res[j]; d.leaseGranted > 0 {
			p.r.install(&checks[idx[j]], d.leaseGranted, time.Duration(d.leaseTTLMs)*time.Millisecond, p.r.cfg.Clock.Now())
		}
	}
	for j, i := range idx {
		d := &c.res[j]
		out[i] = Result{
			Decision: bucket.Decision{
				Allowed:    d.allowed,
				Limit:      checks[i].Limit.Count(),
				Remaining:  d.remaining,
				RetryAfter: time.Duration(d.retryAfterMs) * time.Millisecond,
				ResetAfter: time.Duration(d.resetAfterMs) * time.Millisecond,
				Delay:      time.Duration(d.delayMs) * time.Millisecond,
			},
			Owner:     c.owner,
			OwnerAddr: p.addr,
		}
	}
	return nil
}

func (p *peer) loop() {
	var carry *call // a call that did not fit in the previous batch
	for {
		select {
		case p.slots <- struct{}{}:
		case <-p.done:
			if carry != nil {
				carry.fail(errPeerClosed)
			}
			p.drain()
			return
		}
		first := carry
		carry = nil
		for first == nil || p.abandoned(first) {
			select {
			case first = <-p.queue:
			case <-p.done:
				<-p.slots
				p.drain()
				return
			}
		}
		b := &batch{calls: []*call{first}, n: len(first.checks)}
	gather:
		for b.n < p.r.cfg.MaxBatch {
			select {
			case c := <-p.queue:
				if p.abandoned(c) {
					continue
				}
				if b.n+len(c.checks) > p.r.cfg.MaxBatch {
					carry = c
					break gather
				}
				b.calls = append(b.calls, c)
				b.n += len(c.checks)
			default:
				break gather
			}
		}
		p.send(b)
	}
}

// abandoned reports whether c's caller gave up while c waited in the
// queue, and if so fails c: its checks are not sent, so the owner spends
// nothing for a request that has already failed.
func (p *peer) abandoned(c *call) bool {
	err := c.ctx.Err()
	if err == nil {
		return false
	}
	p.r.m.abandoned.Add(float64(len(c.checks)))
	c.fail(err)
	return true
}

func (c *call) fail(err error) {
	c.err = err
	close(c.done)
}

// drain fails the calls still queued when the peer closes.
func (p *peer) drain() {
	for {
		select {
		case c := <-p.queue:
			c.fail(errPeerClosed)
		default:
			return
		}
	}
}

// batch is the calls one message on the stream carries. It holds a slot
// until it is answered or fails.
type batch struct {
	calls []*call
	n     int           // checks in calls
	sent  time.Duration // when it was added to the stream, on the router's monotonic clock
}

// stream is one Check stream to the peer, with the batches sent on it and
// not yet answered. It breaks as a whole: on a transport error, on a batch
// unanswered within PeerTimeout, or when the peer closes; its batches then
// fail, and the next batch opens a new stream.
type stream struct {
	p      *peer
	cs     peerv1.Peer_CheckClient
	ctx    context.Context
	cancel context.CancelCauseFunc

	sendMu sync.Mutex // SendMsg and CloseSend are not safe for concurrent use

	mu       sync.Mutex
	broken   bool // no more batches: it failed, or drains
	draining bool // close it once the batches in flight are answered
	inflight map[uint64]*batch
	watch    *time.Timer // fires when the oldest batch in flight may be overdue
	armed    bool
}

// send writes b to the peer's stream, opening one if there is none. Only
// the loop goroutine calls it.
func (p *peer) send(b *batch) {
	p.nextID++
	m := &p.out
	m.from, m.id, m.checks = p.r.cfg.Self, p.nextID, m.checks[:0]
	for _, c := range b.calls {
		m.checks = append(m.checks, c.checks...)
	}
	p.r.m.rpcs.Inc()
	p.r.m.forwarded.Add(float64(b.n))
	p.r.m.batchSize.Observe(float64(b.n))
	s := p.st
	if s == nil || !s.add(m.id, b) {
		var err error
		if s, err = p.open(); err != nil {
			p.finish(b, nil, err)
			return
		}
		p.st = s
		if testHookOpened != nil {
			testHookOpened(s)
		}
		if !s.add(m.id, b) {
			// Broken already: the peer drained it at once (it is
			// stopping) or it failed. b was not sent; it fails now.
			p.finish(b, nil, fmt.Errorf("peer %s ended a new stream before its first batch", p.name))
			return
		}
	}
	// SendMsg encodes m before it returns: the next batch may reuse it.
	s.sendMu.Lock()
	err := s.cs.SendMsg(m)
	s.sendMu.Unlock()
	if err != nil {
		// The stream is done: its status comes out of RecvMsg, which the
		// cancel makes sure returns; the receiver fails b with it.
		s.cancel(nil)
	}
}

// testHookOpened, when set by a test, runs after a new stream is open and
// before the first batch is added to it.
var testHookOpened func(*stream)

// open starts a Check stream and its receiver. Opening waits for a
// connection at most PeerTimeout.
func (p *peer) open() (*stream, error) {
	ctx, cancel := context.WithCancelCause(p.r.ctx)
	s := &stream{p: p, ctx: ctx, cancel: cancel, inflight: make(map[uint64]*batch, p.r.cfg.MaxInFlight)}
	t := time.AfterFunc(p.r.cfg.PeerTimeout, func() {
		cancel(fmt.Errorf("peer %s: no stream within %v", p.name, p.r.cfg.PeerTimeout))
	})
	cs, err := p.client.Check(ctx, grpc.CallContentSubtype(peerCodecName))
	t.Stop()
	if err != nil {
		cancel(err)
		if c := context.Cause(ctx); c != nil && !errors.Is(c, context.Canceled) {
			err = c
		}
		return nil, err
	}
	s.cs = cs
	s.watch = time.AfterFunc(time.Hour, s.overdue)
	s.watch.Stop()
	p.r.wg.Add(1)
	go func() {
		defer p.r.wg.Done()
		s.recv()
	}()
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
	b.sent = time.Since(s.p.r.started)
	s.inflight[id] = b
	if !s.armed {
		s.armed = true
		s.watch.Reset(s.p.r.cfg.PeerTimeout)
	}
	return true
}

// overdue breaks the stream if its oldest batch has waited PeerTimeout for
// its answer; otherwise it sets the watch for when that batch would be.
func (s *stream) overdue() {
	s.mu.Lock()
	// A draining stream is broken but still has batches to answer: they
	// keep their deadline. A failed one has none left (inflight is nil).
	if len(s.inflight) == 0 {
		s.armed = false
		s.mu.Unlock()
		return
	}
	oldest := time.Duration(1<<63 - 1)
	for _, b := range s.inflight {
		oldest = min(oldest, b.sent)
	}
	left := oldest + s.p.r.cfg.PeerTimeout - time.Since(s.p.r.started)
	if left > 0 {
		s.watch.Reset(left)
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	s.cancel(fmt.Errorf("peer %s: no answer within %v", s.p.name, s.p.r.cfg.PeerTimeout))
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
			s.cancel(fmt.Errorf("peer %s answered batch %d, which is not in flight", s.p.name, ans.id))
			continue
		}
		s.p.finish(b, &ans, nil)
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
		s.p.finish(b, nil, err)
	}
}

// finish answers b's calls from ans, or fails them with err, and frees
// b's slot.
func (p *peer) finish(b *batch, ans *checkAnswer, err error) {
	defer func() { <-p.slots }()
	if err == nil && ans.err != "" {
		err = status.Error(codes.InvalidArgument, fmt.Sprintf("peer %s refused the batch: %s", p.name, ans.err))
	}
	if err == nil && len(ans.decisions) != b.n {
		err = fmt.Errorf("peer %s answered %d decisions for %d checks", p.name, len(ans.decisions), b.n)
	}
	var owner string
	if err == nil {
		owner = intern(ans.owner, p.name)
	}
	off := 0
	for _, c := range b.calls {
		if err != nil {
			c.err = err
		} else {
			copy(c.res, ans.decisions[off:off+len(c.checks)])
			c.owner = owner
		}
		off += len(c.checks)
		close(c.done)
	}
}

func limitToWire(l *bucket.Limit) peerv1.Limit {
	return peerv1.Limit{Algorithm: uint32(l.Algorithm()), Limit: l.Count(), PerNs: int64(l.Per()), Burst: l.Burst()}
}

func limitFromWire(w *peerv1.Limit) (bucket.Limit, error) {
	if w == nil {
		return bucket.Limit{}, errors.New("missing limit")
	}
	return (&wireLimit{alg: w.GetAlgorithm(), limit: w.GetLimit(), perNs: w.GetPerNs(), burst: w.GetBurst()}).toLimit()
}

func (w *wireLimit) toLimit() (bucket.Limit, error) {
	if w.alg > 255 {
		return bucket.Limit{}, fmt.Errorf("algorithm %d", w.alg)
	}
	return bucket.NewLimit(bucket.Algorithm(w.alg), w.limit, time.Duration(w.perNs), w.burst)
}
