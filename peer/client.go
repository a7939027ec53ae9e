package peer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/clock"
	"github.com/ringlimit/ringlimit/internal/batcher"
	peerv1 "github.com/ringlimit/ringlimit/proto/peerv1"
)

// errClosed fails the calls of a connection that closed.
var errClosed = errors.New("peer connection closed")

// conn is the connection to one other node and the batcher in front of it.
// The batcher's loop takes a slot (MaxInFlight), gathers every waiting call
// (up to MaxBatch checks) into one batch and writes it to the peer's Check
// stream: a batch costs one message each way on a stream that stays open,
// not an RPC of its own.
type conn struct {
	cfg     *Config
	version *atomic.Uint64 // the pool's ring version, read at each flush
	rev     *reverses      // the pool's reverse links (reverse.go)
	name    string
	addr    string
	cc      *grpc.ClientConn
	rpc     peerv1.PeerClient
	b       *batcher.Batcher[wireCheck, wireDecision]
	ctx     context.Context // ends the streams when the conn closes
	stop    context.CancelFunc
	wg      sync.WaitGroup // stream receivers

	// quietUntil is when a batch may next try to open a stream, after a
	// stream could not be opened or its oldest batch went unanswered for
	// Timeout (a clock.Instant; 0: now). Until then a batch that has no
	// open stream fails at once: the calls queued behind a peer that does
	// not answer wait at most about twice Timeout, not Timeout per batch.
	quietUntil atomic.Int64

	retireAt  clock.Instant // set under Pool.mu when the peer leaves the member list
	closeOnce sync.Once

	// Owned by the batcher's loop goroutine (flush).
	st     *stream    // the open Check stream; nil before the first batch
	nextID uint64     // id of the last batch sent
	out    checkBatch // the batch being sent, reused
}

func dial(cfg *Config, version *atomic.Uint64, rev *reverses, name, addr string) (*conn, error) {
	creds := insecure.NewCredentials()
	if cfg.TLS != nil {
		creds = credentials.NewTLS(clientTLS(cfg.TLS, name))
	}
	opts := append([]grpc.DialOption{grpc.WithTransportCredentials(creds)}, dialOptions()...)
	opts = append(opts, cfg.DialOptions...)
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, err
	}
	// Connect now, not at the first call: a member that has just joined
	// fetches keys' state from their previous owners on its first checks,
	// which wait for it.
	cc.Connect()
	ctx, stop := context.WithCancel(context.Background())
	c := &conn{cfg: cfg, version: version, rev: rev, name: name, addr: addr, cc: cc, rpc: peerv1.NewPeerClient(cc), ctx: ctx, stop: stop}
	c.b, err = batcher.New(cfg.Batch, c.flush, func(n int) { cfg.Metrics.abandoned.Add(float64(n)) })
	if err != nil {
		stop()
		cc.Close()
		return nil, err
	}
	return c, nil
}

// close fails the calls still waiting, ends the streams and the
// connection, and waits for the stream receivers. Safe to call twice.
func (c *conn) close() {
	c.closeOnce.Do(func() {
		c.b.Close()
		c.stop()
		c.cc.Close()
		c.wg.Wait()
	})
}

// check sends reqs to the peer, in batches of at most MaxBatch, writes the
// answers into out and returns the name of the node that decided.
func (c *conn) check(ctx context.Context, reqs []Request, out []Answer) (string, error) {
	var owner string
	var tc traceContext
	var traced bool
	if c.cfg.PropagateTrace {
		tc, traced = traceOf(ctx)
	}
	sc, _ := checkScratchPool.Get().(*checkScratch)
	if sc == nil {
		sc = new(checkScratch)
	}
	for off := 0; off < len(reqs); {
		n := min(len(reqs)-off, c.b.MaxBatch())
		in, dec := sc.take(n)
		for j := range in {
			r := &reqs[off+j]
			in[j] = wireCheck{key: r.Key, limit: toWireLimit(&r.Limit), cost: r.Cost, refund: r.Refund, lease: r.Lease, final: r.Final, sync: r.Sync, peek: r.Peek,
				trace: tc, traced: traced, reserveTTLNs: int64(r.ReserveTTL), adaptiveScope: r.AdaptiveScope}
			if r.Adaptive != nil {
				in[j].adaptive, in[j].hasAdaptive = *r.Adaptive, true
			}
		}
		call := c.b.Call(ctx, in, dec)
		if err := c.b.Do(call); err != nil {
			// call may still be in a batch that reads in and writes
			// dec: both are left to the collector, with the scratch.
			switch {
			case errors.Is(err, batcher.ErrClosed):
				err = errClosed
			case errors.Is(err, batcher.ErrFull):
				c.cfg.Metrics.busy.Add(float64(n))
				err = fmt.Errorf("peer %s: %w", c.name, ErrBusy)
			}
			return "", err
		}
		for j := range call.Out {
			out[off+j] = call.Out[j].toAnswer()
		}
		owner = call.From
		off += n
		if !c.b.Recycle(call) {
			return owner, nil // not taken back: in and dec are not reused either
		}
	}
	sc.give()
	return owner, nil
}

// checkScratch is the checks and decisions of a check call's batches,
// handed from call to call (checkScratchPool) once their answers are
// read: a forwarded check then allocates neither. A call whose Do failed
// may still be in a batch that reads its checks and writes its decisions,
// so its scratch is left to the collector.
type checkScratch struct {
	in  []wireCheck
	dec []wireDecision
}

var checkScratchPool sync.Pool // of *checkScratch

// take returns the scratch's checks and decisions, n of each, growing
// them first when they are shorter: the previous batch, answered, no
// longer uses them.
func (sc *checkScratch) take(n int) ([]wireCheck, []wireDecision) {
	if cap(sc.in) < n {
		sc.in = make([]wireCheck, n)
	}
	if cap(sc.dec) < n {
		sc.dec = make([]wireDecision, n)
	}
	return sc.in[:n], sc.dec[:n]
}

// maxCheckScratch is the most checks whose scratch goes back to the pool:
// a rare call of many checks does not leave large arrays in it.
const maxCheckScratch = 64

// give forgets what the last call's checks and decisions held (keys,
// owners, trace contexts), so that the pool keeps none of them alive, and
// puts the scratch back.
func (sc *checkScratch) give() {
	if cap(sc.in) > maxCheckScratch || cap(sc.dec) > maxCheckScratch {
		return
	}
	clear(sc.in[:cap(sc.in)])
	clear(sc.dec[:cap(sc.dec)])
	checkScratchPool.Put(sc)
}

type call = batcher.Call[wireCheck, wireDecision]

// batch is the calls one message on the stream carries. It holds a slot
// until it is answered or fails.
type batch struct {
	calls   []*call
	n       int           // checks in calls
	sent    clock.Instant // when it was added to the stream
	release func()
	c       *conn // whose batcher made it
}

// flush writes one batch to the peer: on the stream the peer opened to
// this node when it takes reverse batches (reverse.go), else on this
// node's own stream, opening one if there is none. It runs on the
// batcher's loop goroutine.
func (c *conn) flush(calls []*call, n int, release func()) {
	b := &batch{calls: calls, n: n, release: release, c: c}
	c.nextID++
	m := &c.out
	m.from, m.id, m.ringVersion, m.checks = c.cfg.Self, c.nextID, c.version.Load(), m.checks[:0]
	for _, cl := range calls {
		m.checks = append(m.checks, cl.In...)
	}
	c.cfg.Metrics.batches.Inc()
	c.cfg.Metrics.forwarded.Add(float64(n))
	c.cfg.Metrics.batchSize.Observe(float64(n))
	if c.sendReverse(m, b) {
		return
	}
	s := c.st
	if s == nil || !s.add(m.id, b) {
		if now := c.cfg.Clock.Now(); now.Before(clock.Instant(c.quietUntil.Load())) {
			c.finish(b, nil, fmt.Errorf("peer %s did not answer within %v moments ago", c.name, c.cfg.Timeout))
			return
		}
		var err error
		if s, err = c.open(); err != nil {
			c.quiet()
			c.finish(b, nil, err)
			return
		}
		c.st = s
		if testHookOpened != nil {
			testHookOpened(s)
		}
		if !s.add(m.id, b) {
			// Broken already: the peer drained it at once (it is
			// stopping) or it failed. b was not sent; it fails now.
			c.finish(b, nil, fmt.Errorf("peer %s ended a new stream before its first batch", c.name))
			return
		}
	}
	// SendMsg encodes m before it returns: the next batch may reuse it.
	// It carries the answer to a reverse batch that waits for a batch.
	s.sendMu.Lock()
	pend := s.pend
	s.pend = nil
	if pend != nil {
		m.reverse = &pend.out
	}
	err := s.cs.SendMsg(m)
	m.reverse = nil
	s.sendMu.Unlock()
	if pend != nil {
		receivedPool.Put(pend)
	}
	if err != nil {
		// The stream is done: its status comes out of RecvMsg, which the
		// cancel makes sure returns; the receiver fails b with it.
		s.cancel(nil)
	}
}

// sendReverse sends b, whose message is m, on the peer's reverse link, and
// reports whether it did: false when the peer has none, or the link did not
// take b (it closed), and b is to go on this node's own stream.
func (c *conn) sendReverse(m *checkBatch, b *batch) bool {
	l := c.rev.link(c.name)
	if l == nil || !l.add(m.id, b) {
		return false
	}
	err := l.send(m)
	if err == nil {
		c.cfg.Metrics.reverseBatches.Inc()
		return true
	}
	if l.take(m.id) == nil {
		return true // the link closed and failed b already
	}
	if errors.Is(err, errReverseClosed) {
		l.stop() // draining: the batches sent before are still answered
	} else {
		l.close(fmt.Errorf("peer %s: reverse batch: %w", c.name, err))
	}
	return false
}

// quiet makes batches without an open stream fail at once for Timeout.
func (c *conn) quiet() {
	c.quietUntil.Store(int64(c.cfg.Clock.Now().Add(c.cfg.Timeout)))
}

// testHookOpened, when set by a test, runs after a new stream is open and
// before the first batch is added to it.
var testHookOpened func(*stream)

// finish answers b's calls from ans, or fails them with err, and frees
// b's slot.
func (c *conn) finish(b *batch, ans *checkAnswer, err error) {
	defer b.release()
	if err == nil && ans.err != "" {
		err = status.Error(codes.InvalidArgument, fmt.Sprintf("peer %s refused the batch: %s", c.name, ans.err))
	}
	if err == nil && len(ans.decisions) != b.n {
		err = fmt.Errorf("peer %s answered %d decisions for %d checks", c.name, len(ans.decisions), b.n)
	}
	var owner string
	if err == nil {
		owner = intern(ans.owner, c.name)
	}
	off := 0
	for _, cl := range b.calls {
		if err == nil {
			copy(cl.Out, ans.decisions[off:off+len(cl.In)])
			for j := range cl.Out {
				cl.Out[j].detach()
			}
			cl.From = owner
		}
		off += len(cl.In)
		cl.Finish(err)
	}
}

// fetch asks the peer for key's state.
func (c *conn) fetch(ctx context.Context, key string, l *bucket.Limit) (State, bool, error) {
	resp, err := c.rpc.Fetch(ctx, &peerv1.FetchRequest{From: c.cfg.Self, Key: key, Limit: limitToProto(l)})
	if err != nil || !resp.GetFound() {
		return State{}, false, err
	}
	st := resp.GetState()
	sl, err := limitFromProto(st.GetLimit())
	if err != nil {
		return State{}, false, fmt.Errorf("peer %s: fetch %q: %w", c.name, key, err)
	}
	if st.GetUsed() < 0 {
		return State{}, false, fmt.Errorf("peer %s: fetch %q: negative used %d", c.name, key, st.GetUsed())
	}
	return State{Key: key, Limit: sl, Used: st.GetUsed(), Reservations: reservationsFromProto(st.GetReservations()), ResetAt: st.GetResetAt(),
		LeaseSet: st.GetLeaseSet(), Leases: leasesFromProto(st.GetLeases()), Adaptive: adaptiveStateFromProto(st.GetAdaptive()),
		Window: st.GetWindow()}, true, nil
}

// handoff pushes states to the peer in one call.
func (c *conn) handoff(ctx context.Context, states []State) error {
	req := &peerv1.HandoffRequest{From: c.cfg.Self, Buckets: make([]*peerv1.BucketState, len(states))}
	for i := range states {
		s := &states[i]
		req.Buckets[i] = &peerv1.BucketState{Key: s.Key, Limit: limitToProto(&s.Limit), Used: s.Used,
			Reservations: reservationsToProto(s.Reservations), ResetAt: s.ResetAt, LeaseSet: s.LeaseSet, Leases: leasesToProto(s.Leases),
			RingVersion: s.RingVersion, Adaptive: adaptiveStateToProto(s.Adaptive), Window: s.Window, Full: s.Full}
	}
	if _, err := c.rpc.Handoff(ctx, req); err != nil {
		return err
	}
	c.cfg.Metrics.handoffSent.Add(float64(len(states)))
	return nil
}

// replicate sends states to the peer in one call and returns how many it
// took. The call is encoded by hand (replicate.go), from states directly.
func (c *conn) replicate(ctx context.Context, version uint64, states []State) (int, error) {
	req := replicateBatch{from: c.cfg.Self, version: version, states: states}
	var resp replicateAck
	err := c.cc.Invoke(ctx, peerv1.Peer_Replicate_FullMethodName, &req, &resp,
		grpc.StaticMethod(), grpc.CallContentSubtype(codecName))
	if err != nil {
		return 0, err
	}
	return int(resp.accepted), nil
}

// reset tells the peer that this node reset key at resetAt.
func (c *conn) reset(ctx context.Context, key string, l *bucket.Limit, resetAt int64) (ResetAnswer, error) {
	req := &peerv1.PeerResetRequest{From: c.cfg.Self, Key: key, Limit: limitToProto(l), ResetAt: resetAt}
	if dl, ok := ctx.Deadline(); ok {
		req.Deadline = dl.UnixNano()
	}
	resp, err := c.rpc.Reset(ctx, req)
	if err != nil {
		return ResetAnswer{}, err
	}
	return ResetAnswer{LeaseDropped: resp.GetLeaseDropped(), Previous: resp.GetPreviousRemaining(),
		Owner: resp.GetOwner(), Unconfirmed: resp.GetUnconfirmed(), Redirect: resp.GetRedirect()}, nil
}
