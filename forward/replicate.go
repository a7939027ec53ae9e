package forward

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/clock"
	"github.com/ringlimit/ringlimit/peer"
)

// replicateChunk is the most states one Replicate call carries.
const replicateChunk = 1024

// replicator keeps a copy of the state of every key this node owns on the
// key's successors (the members that own it if this node dies): each
// change marks the key, and every Interval, or as soon as MaxPending keys
// are marked, the marked keys' states are sent to their successors, as
// absolute spend, in batches. A crash therefore loses at most the changes
// of one Interval (or MaxPending keys) plus one round trip. Marking costs
// a map insert under one of 16 locks; nothing is sent for a key that did
// not change.
type replicator struct {
	cfg   ReplicationConfig
	self  string
	store *bucket.Store
	peers Peers
	view  func() *view
	clock clock.Clock
	log   *slog.Logger
	m     *metrics

	shards  [16]markShard
	pending atomic.Int64 // keys marked and not yet taken by a flush
	first   atomic.Int64 // when the oldest pending mark was made
	kick    chan struct{}
	resync  chan struct{}
	lastLag atomic.Int64 // of the last flush, ns
	sent    atomic.Int64 // states acknowledged by successors
}

type markShard struct {
	mu   sync.Mutex
	keys map[string]struct{}
}

func newReplicator(cfg ReplicationConfig, self string, store *bucket.Store, peers Peers, view func() *view,
	c clock.Clock, log *slog.Logger, m *metrics) *replicator {
	p := &replicator{cfg: cfg, self: self, store: store, peers: peers, view: view, clock: c, log: log, m: m,
		kick: make(chan struct{}, 1), resync: make(chan struct{}, 1)}
	for i := range p.shards {
		p.shards[i].keys = map[string]struct{}{}
	}
	return p
}

// on reports whether keys are replicated at all.
func (p *replicator) on() bool { return p != nil && !p.cfg.Off }

// mark records that key changed at now.
func (p *replicator) mark(key string, now clock.Instant) {
	if !p.on() {
		return
	}
	sh := &p.shards[xxhash.Sum64String(key)&15]
	sh.mu.Lock()
	_, ok := sh.keys[key]
	if !ok {
		sh.keys[strings.Clone(key)] = struct{}{} // key may point into a reused buffer
	}
	sh.mu.Unlock()
	if ok {
		return
	}
	n := p.pending.Add(1)
	if n == 1 {
		p.first.Store(int64(now))
	}
	if n == int64(p.cfg.MaxPending) {
		select {
		case p.kick <- struct{}{}:
		default:
		}
	}
}

// ringChanged makes the next round send every key this node owns: a new
// successor holds none of them yet.
func (p *replicator) ringChanged() {
	if !p.on() {
		return
	}
	select {
	case p.resync <- struct{}{}:
	default:
	}
}

func (p *replicator) loop(ctx context.Context) {
	if !p.on() {
		return
	}
	tick := p.clock.NewTicker(p.cfg.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.resync:
			p.markOwned()
			p.flush(ctx)
		case <-p.kick:
			p.flush(ctx)
		case <-tick.C():
			if p.pending.Load() > 0 {
				p.flush(ctx)
			}
		}
	}
}

// markOwned marks every key this node owns.
func (p *replicator) markOwned() {
	v := p.view()
	now := p.clock.Now()
	p.store.Range(now, func(batch []bucket.Snapshot) bool {
		for i := range batch {
			if ownerIn(v.ring, p.self, batch[i].Key) == p.self {
				p.mark(batch[i].Key, now)
			}
		}
		return true
	})
}

// take empties the marked set and returns its keys and when the oldest
// was marked.
func (p *replicator) take() ([]string, clock.Instant) {
	first := clock.Instant(p.first.Load())
	var keys []string
	for i := range p.shards {
		sh := &p.shards[i]
		sh.mu.Lock()
		if len(sh.keys) > 0 {
			for k := range sh.keys {
				keys = append(keys, k)
			}
			sh.keys = make(map[string]struct{}, len(sh.keys))
		}
		sh.mu.Unlock()
	}
	p.pending.Add(-int64(len(keys)))
	return keys, first
}

// flush sends the marked keys' states to their successors, one goroutine
// per successor, and waits for them.
func (p *replicator) flush(ctx context.Context) {
	keys, first := p.take()
	if len(keys) == 0 {
		return
	}
	v := p.view()
	if v.ring == nil || v.ring.Len() < 2 {
		return
	}
	now := p.clock.Now()
	out := map[string][]peer.State{}
	succs := make([]string, 0, p.cfg.Factor)
	for _, k := range keys {
		if ownerIn(v.ring, p.self, k) != p.self {
			continue // no longer ours: the handoff moves it
		}
		l, used, ok := p.store.Used(k, now)
		if !ok {
			continue
		}
		succs = v.ring.AppendSuccessors(succs[:0], k, p.cfg.Factor)
		for _, s := range succs {
			if s != p.self && !v.isDown(s) {
				out[s] = append(out[s], peer.State{Key: k, Limit: l, Used: used})
			}
		}
	}
	var wg sync.WaitGroup
	for succ, states := range out {
		wg.Go(func() { p.send(ctx, succ, states) })
	}
	wg.Wait()
	lag := p.clock.Now().Sub(first)
	p.lastLag.Store(int64(lag))
	p.m.replicationLag.Observe(lag.Seconds())
}

// send replicates states to succ in chunks; on failure it marks them again
// (the next round retries) unless the successor is gone or this node is
// stopping.
func (p *replicator) send(ctx context.Context, succ string, states []peer.State) {
	for off := 0; off < len(states); off += replicateChunk {
		chunk := states[off:min(off+replicateChunk, len(states))]
		n, err := p.peers.Replicate(ctx, succ, chunk)
		if err == nil {
			p.sent.Add(int64(n))
			continue
		}
		p.m.replicationErrors.Inc()
		p.log.Debug("replication failed", "to", succ, "keys", len(chunk), "err", err)
		if ctx.Err() != nil || !p.view().has(succ) {
			return
		}
		now := p.clock.Now()
		for _, s := range states[off:] {
			p.mark(s.Key, now)
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
