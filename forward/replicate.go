package forward

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/clock"
	"github.com/ringlimit/ringlimit/peer"
)

// replicateChunk is the most states one Replicate call carries.
const replicateChunk = 1024

// A Replicate call is never larger than a peer accepts (a negative uint
// constant does not compile).
const _ = uint(peer.MaxReplicateStates - replicateChunk)

// replicator keeps a copy of the state of every key this node owns on the
// key's successors (the members that own it if this node dies). The store
// marks each key whose spend changes (bucket.StoreConfig.Track: one bit
// test under the lock the change already holds), and every Interval, or as
// soon as MaxPending keys are marked, the marked keys' states are sent to
// their successors, as absolute spend, in batches. A crash therefore loses
// at most the changes of one Interval (or MaxPending keys) plus one round
// trip. After a ring change every key this node owns is sent once: a new
// successor holds none of them. A key that is full when its round comes is
// not sent: every earlier state of it, refilled to now, is full too (it
// spent no more since), so the successor's replica is already right.
type replicator struct {
	cfg   ReplicationConfig
	self  string
	store *bucket.Store
	peers Peers
	view  func() *view
	clock clock.Clock
	log   *slog.Logger
	m     *metrics

	mu      sync.Mutex // one round at a time
	resync  chan struct{}
	lastLag atomic.Int64 // of the last round, ns
}

func newReplicator(cfg ReplicationConfig, self string, store *bucket.Store, peers Peers, view func() *view,
	c clock.Clock, log *slog.Logger, m *metrics) *replicator {
	store.SetTrack(!cfg.Off)
	return &replicator{cfg: cfg, self: self, store: store, peers: peers, view: view, clock: c, log: log, m: m,
		resync: make(chan struct{}, 1)}
}

// on reports whether keys are replicated at all.
func (p *replicator) on() bool { return p != nil && !p.cfg.Off }

// ringChanged makes the next round send every key this node owns.
func (p *replicator) ringChanged() {
	if !p.on() {
		return
	}
	select {
	case p.resync <- struct{}{}:
	default:
	}
}

// loop runs a round every Interval, and sooner when MaxPending keys are
// marked (looked at four times an Interval).
func (p *replicator) loop(ctx context.Context) {
	if !p.on() {
		return
	}
	tick := p.clock.NewTicker(max(p.cfg.Interval/4, time.Millisecond))
	defer tick.Stop()
	last := p.clock.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.resync:
			p.sendOwned(ctx)
			last = p.clock.Now()
		case <-tick.C():
			now := p.clock.Now()
			if n := p.store.Pending(); n >= int64(p.cfg.MaxPending) || (n > 0 && now.Sub(last) >= p.cfg.Interval) {
				p.flush(ctx)
				last = now
			}
		}
	}
}

// sendOwned sends the state of every key this node owns.
func (p *replicator) sendOwned(ctx context.Context) {
	p.mu.Lock()
	defer p.mu.Unlock()
	v := p.view()
	now := p.clock.Now()
	out := map[string][]peer.State{}
	p.store.Range(now, func(batch []bucket.Snapshot) bool {
		p.add(v, out, batch)
		return ctx.Err() == nil
	})
	p.send(ctx, out)
}

// flush sends the marked keys' states to their successors and waits for
// their acknowledgements.
func (p *replicator) flush(ctx context.Context) {
	p.mu.Lock()
	defer p.mu.Unlock()
	v := p.view()
	out := map[string][]peer.State{}
	// A key full again needs no replica: the successor's, refilled, is full.
	first := p.store.Changed(p.clock.Now(), true, func(batch []bucket.Snapshot) { p.add(v, out, batch) })
	if len(out) == 0 {
		return
	}
	p.send(ctx, out)
	if first != 0 { // 0: marked while the previous round drained the store
		lag := p.clock.Now().Sub(first)
		p.lastLag.Store(int64(lag))
		p.m.replicationLag.Observe(lag.Seconds())
	}
}

// add appends the states of the keys this node owns to out, by successor.
func (p *replicator) add(v *view, out map[string][]peer.State, batch []bucket.Snapshot) {
	if v.ring == nil || v.ring.Len() < 2 {
		return
	}
	var buf [4]string
	for i := range batch {
		s := &batch[i]
		if s.Used == 0 || ownerIn(v.ring, p.self, s.Key) != p.self {
			continue // full (so is the replica), or not ours: a copy the handoff moves
		}
		for _, succ := range v.ring.AppendSuccessors(buf[:0], s.Key, p.cfg.Factor) {
			if succ != p.self && !v.isDown(succ) {
				out[succ] = append(out[succ], peer.State{Key: s.Key, Limit: s.Limit, Used: s.Used})
			}
		}
	}
}

// send replicates out, one goroutine per successor.
func (p *replicator) send(ctx context.Context, out map[string][]peer.State) {
	var wg sync.WaitGroup
	for succ, states := range out {
		wg.Go(func() { p.sendTo(ctx, succ, states) })
	}
	wg.Wait()
}

// sendTo replicates states to succ in chunks; on failure it marks them
// again (the next round retries) unless the successor is gone or this node
// is stopping.
func (p *replicator) sendTo(ctx context.Context, succ string, states []peer.State) {
	for off := 0; off < len(states); off += replicateChunk {
		chunk := states[off:min(off+replicateChunk, len(states))]
		if _, err := p.peers.Replicate(ctx, succ, chunk); err == nil {
			continue
		} else {
			p.m.replicationErrors.Inc()
			p.log.Debug("replication failed", "to", succ, "keys", len(chunk), "err", err)
		}
		if ctx.Err() != nil || !p.view().has(succ) {
			return
		}
		now := p.clock.Now()
		for _, s := range states[off:] {
			p.store.Mark(s.Key, now)
		}
		return
	}
}

// lag is how long the last round's oldest change waited until its
// successors acknowledged it.
func (p *replicator) lag() time.Duration {
	if !p.on() {
		return 0
	}
	return time.Duration(p.lastLag.Load())
}

// pending is how many changed keys wait for the next round.
func (p *replicator) pending() int64 {
	if !p.on() {
		return 0
	}
	return p.store.Pending()
}
