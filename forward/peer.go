package forward

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ringlimit/ringlimit/bucket"
	peerv1 "github.com/ringlimit/ringlimit/proto/peerv1"
)

var errPeerClosed = errors.New("peer connection closed")

// peer is the connection to one other node and the batcher in front of it.
// A single loop goroutine takes a connection slot (MaxInFlight), then
// gathers every call waiting in the queue, up to MaxBatch checks, into one
// RPC: while all slots are busy, calls pile up and leave together.
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
}

// call is one request's checks for this peer, waiting for their decisions.
type call struct {
	checks []*peerv1.Check
	res    []*peerv1.Decision
	owner  string
	err    error
	done   chan struct{}
}

func newPeer(r *Router, name, addr string) (*peer, error) {
	opts := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, r.cfg.DialOptions...)
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
	c := &call{checks: make([]*peerv1.Check, len(idx)), done: make(chan struct{})}
	wire := make([]peerv1.Check, len(idx)) // one allocation for the chunk
	limits := make([]peerv1.Limit, len(idx))
	var asked []int // indexes (into idx) of the checks that ask for a lease
	for j, i := range idx {
		ch := &checks[i]
		limits[j] = limitToWire(&ch.Limit)
		wire[j] = peerv1.Check{Key: ch.Key, Limit: &limits[j], Cost: ch.Cost, Refund: ch.Refund}
		if ch.Lease && !ch.Refund {
			if _, busy := p.r.leases.pending.LoadOrStore(ch.Key, struct{}{}); !busy {
				wire[j].Lease = p.r.leaseSize(ch, p.r.view.Load().ring.Len())
				asked = append(asked, j)
			}
		}
		c.checks[j] = &wire[j]
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
		if d := c.res[j]; d.GetLeaseGranted() > 0 {
			p.r.install(&checks[idx[j]], d.GetLeaseGranted(), time.Duration(d.GetLeaseTtlMs())*time.Millisecond, p.r.cfg.Clock.Now())
		}
	}
	for j, i := range idx {
		d := c.res[j]
		out[i] = Result{
			Decision: bucket.Decision{
				Allowed:    d.GetAllowed(),
				Limit:      checks[i].Limit.Count(),
				Remaining:  d.GetRemaining(),
				RetryAfter: time.Duration(d.GetRetryAfterMs()) * time.Millisecond,
				ResetAfter: time.Duration(d.GetResetAfterMs()) * time.Millisecond,
				Delay:      time.Duration(d.GetDelayMs()) * time.Millisecond,
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
		if first == nil {
			select {
			case first = <-p.queue:
			case <-p.done:
				<-p.slots
				p.drain()
				return
			}
		}
		batch := []*call{first}
		n := len(first.checks)
	gather:
		for n < p.r.cfg.MaxBatch {
			select {
			case c := <-p.queue:
				if n+len(c.checks) > p.r.cfg.MaxBatch {
					carry = c
					break gather
				}
				batch = append(batch, c)
				n += len(c.checks)
			default:
				break gather
			}
		}
		go p.send(batch, n)
	}
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

func (p *peer) send(batch []*call, n int) {
	defer func() { <-p.slots }()
	req := &peerv1.CheckRequest{From: p.r.cfg.Self, Checks: make([]*peerv1.Check, 0, n)}
	for _, c := range batch {
		req.Checks = append(req.Checks, c.checks...)
	}
	ctx, cancel := context.WithTimeout(p.r.ctx, p.r.cfg.PeerTimeout)
	resp, err := p.client.Check(ctx, req)
	cancel()
	p.r.m.rpcs.Inc()
	p.r.m.forwarded.Add(float64(n))
	p.r.m.batchSize.Observe(float64(n))
	if err == nil && len(resp.GetDecisions()) != n {
		err = fmt.Errorf("peer %s answered %d decisions for %d checks", p.name, len(resp.GetDecisions()), n)
	}
	off := 0
	for _, c := range batch {
		if err != nil {
			c.err = err
		} else {
			c.res = resp.Decisions[off : off+len(c.checks)]
			c.owner = resp.GetOwner()
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
	if w.GetAlgorithm() > 255 {
		return bucket.Limit{}, fmt.Errorf("algorithm %d", w.GetAlgorithm())
	}
	return bucket.NewLimit(bucket.Algorithm(w.GetAlgorithm()), w.GetLimit(), time.Duration(w.GetPerNs()), w.GetBurst())
}
