package forward

import (
	"context"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/clock"
	"github.com/ringlimit/ringlimit/internal/peermsg"
)

// replicateChunk is the most states one Replicate call carries.
const replicateChunk = 1024

// A Replicate call is never larger than a peer accepts (a negative uint
// constant does not compile).
const _ = uint(peermsg.MaxReplicateStates - replicateChunk)

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
//
// The bound in tokens (ReplicationConfig.MaxLoss): the store counts, per
// key, the tokens admitted that no acknowledged round carries. Past half of
// MaxLoss a check starts a round at once; past MaxLoss (and for every
// replication: sync check) the router holds the answer: it asks await for a
// round that begins after the check's spend, and answers once that round is
// acknowledged. A round is acknowledged (bucket.Store.Acked) when every
// successor took every copy it carried.
// Rounds are numbered; one runs at a time, so a round's copy of a key holds
// every spend made before it began, and the checks held meanwhile share the
// next round (the replica round trip is paid once per round, not per check).
type replicator struct {
	cfg   ReplicationConfig
	self  string
	store *bucket.Store
	peers ReplicaSender
	view  func() *view
	clock clock.Clock
	log   *slog.Logger
	m     *metrics
	// resv is the node's reservation table: each copy of a key carries its
	// records (reserve.go); dirtyKeys are keys whose records changed while
	// the key itself holds nothing to send.
	resv      *bucket.Reservations
	dirtyKeys dirtyKeys
	// slots is the node's concurrency lease table: the sets of the keys
	// marked in leaseKeys travel in the next round (concurrency_repl.go).
	slots     *bucket.Leases
	leaseKeys leaseMarks
	// adapt is the node's adaptive controllers: a round carries those
	// that changed since the last one (adaptive_repl.go).
	adapt *adaptiveTable

	mu      sync.Mutex // one round at a time
	box     *outbox    // flush's, reused from round to round (under mu)
	resync  chan struct{}
	lastLag atomic.Int64 // of the last round, ns

	kick     chan struct{} // a held answer asks for a round now
	lastHold atomic.Int64  // when an answer was last held (clock.Instant), 0: never
	started  atomic.Uint64 // rounds begun (the number of the last one)
	roundMu  sync.Mutex    // guards the three fields below
	done     uint64        // the last round acknowledged (or given up)
	failed   uint64        // the last round some of whose copies were not acknowledged
	ended    chan struct{} // closed, and replaced, when a round ends
}

func newReplicator(cfg ReplicationConfig, self string, store *bucket.Store, peers ReplicaSender, view func() *view,
	c clock.Clock, log *slog.Logger, m *metrics) *replicator {
	store.SetTrack(!cfg.Off)
	return &replicator{cfg: cfg, self: self, store: store, peers: peers, view: view, clock: c, log: log, m: m,
		resync: make(chan struct{}, 1), kick: make(chan struct{}, 1), ended: make(chan struct{})}
}

// hold says what a check that left its key with unacked tokens no
// acknowledged round carries (bucket.Store.TakeUnsent) needs before it is
// answered: past MaxLoss (or for a sync check that spent), a round begun
// after it (it reports true: the caller awaits); past half of MaxLoss, a
// round started now, without waiting for it. On a ring of one there is no
// successor: a sync check is answered at once and counted unconfirmed.
func (p *replicator) hold(v *view, unacked int64, sync bool) bool {
	if !p.on() || unacked <= 0 {
		return false
	}
	bounded := p.cfg.MaxLoss > 0
	if !sync && (!bounded || unacked <= p.cfg.MaxLoss/2) {
		return false
	}
	if v.ring == nil || v.ring.Len() < 2 {
		if sync {
			p.m.unconfirmed.Inc()
		}
		return false
	}
	if sync || unacked > p.cfg.MaxLoss {
		return true
	}
	select {
	case p.kick <- struct{}{}:
	default: // a round is asked for already
	}
	return false
}

// await returns once a round that began after it was called has ended,
// starting one at once if none is running; it reports whether that round's
// successors acknowledged every copy. It gives up, unconfirmed, when ctx
// ends or stop is closed (the router is closing).
func (p *replicator) await(ctx context.Context, stop <-chan struct{}) bool {
	p.m.replicationWaits.Inc()
	p.lastHold.Store(int64(p.clock.Now()))
	want := p.started.Load() + 1
	select {
	case p.kick <- struct{}{}:
	default: // a round is asked for already
	}
	for {
		p.roundMu.Lock()
		done, failed, ended := p.done, p.failed, p.ended
		p.roundMu.Unlock()
		if done >= want {
			if failed >= want {
				p.m.unconfirmed.Inc()
				return false
			}
			return true
		}
		select {
		case <-ended:
		case <-ctx.Done():
			p.m.unconfirmed.Inc()
			return false
		case <-stop:
			p.m.unconfirmed.Inc()
			return false
		}
	}
}

// settle returns once every round begun before it was called has ended,
// or ctx has ended. A round reads the view after it begins, so the rounds
// begun later route by the view current when settle was called, or a
// newer one. A handoff pass calls it before its first push: a round begun
// under an earlier ring, while this node still owned a key, may be
// carrying the key's replica to the member the key now belongs to, and
// that replica, arriving after the push, would charge the member's copy
// again with the spend the push carried (Router.Replicate charges what
// the owner spent since the last replica it took).
func (p *replicator) settle(ctx context.Context) {
	want := p.started.Load()
	for {
		p.roundMu.Lock()
		done, ended := p.done, p.ended
		p.roundMu.Unlock()
		if done >= want {
			return
		}
		select {
		case <-ended:
		case <-ctx.Done():
			return
		}
	}
}

// holdWindow is how long after a held answer the peer service decides
// each batch on its own goroutine (see Router.MayWait).
const holdWindow = time.Second

// holding reports whether an answer was held within holdWindow of now.
func (p *replicator) holding(now clock.Instant) bool {
	last := p.lastHold.Load()
	return last != 0 && now.Sub(clock.Instant(last)) < holdWindow
}

// begin numbers a new round; the caller holds p.mu.
func (p *replicator) begin() uint64 { return p.started.Add(1) }

// end records that round n ended, acknowledged whole or not, and wakes the
// answers waiting for it.
func (p *replicator) end(n uint64, ok bool) {
	p.roundMu.Lock()
	p.done = n
	if !ok {
		p.failed = n
	}
	close(p.ended)
	p.ended = make(chan struct{})
	p.roundMu.Unlock()
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

// loop runs a round every Interval, sooner when MaxPending keys are marked
// (looked at four times an Interval), and at once when an answer waits for
// one.
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
		case <-p.kick:
			// Let the answers about to mark their keys do so first: they
			// ride this round rather than the next (on the acquire
			// benchmark this cut Replicate calls by a third).
			for range 4 {
				runtime.Gosched()
			}
			p.flush(ctx)
			last = p.clock.Now()
		case <-tick.C():
			now := p.clock.Now()
			if n := p.store.Pending(); n >= int64(p.cfg.MaxPending) || ((n > 0 || p.adapt.pending()) && now.Sub(last) >= p.cfg.Interval) || p.leaseKeys.any() {
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
	n := p.begin()
	v := p.view()
	now := p.clock.Now()
	out := newOutbox()
	out.all = true
	p.store.Range(now, func(batch []bucket.Snapshot) bool {
		p.add(v, out, batch)
		return ctx.Err() == nil
	})
	p.addLeases(v, out, true)
	p.addAdaptive(v, out, true)
	// Range leaves the keys marked: the next flush sends them again, and
	// ends the rounds their held answers wait for.
	ok := p.send(ctx, out) && out.whole() && ctx.Err() == nil
	if ok { // every key's state now, so every round handed out before
		p.store.Acked(p.store.Round())
	}
	p.end(n, ok)
}

// flush sends the marked keys' states to their successors and waits for
// their acknowledgements. A copy that is not acknowledged gives its key's
// tokens back to the store (Mark), so that the round can be acknowledged
// for all the others.
func (p *replicator) flush(ctx context.Context) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.begin()
	v := p.view()
	out := p.reusedOutbox()
	defer out.recycle()
	// A key full again needs no replica: the successor's, refilled, is full.
	first := p.store.Changed(p.clock.Now(), true, func(batch []bucket.Snapshot) { p.add(v, out, batch) })
	p.addDirty(v, out)
	p.addLeases(v, out, false)
	p.addAdaptive(v, out, false)
	round := p.store.Round()
	now := p.clock.Now()
	for _, s := range out.orphans { // after Changed: it would hand them out again
		p.store.Mark(s.Key, now, s.Unacked)
	}
	ok := p.send(ctx, out) && out.whole()
	if !out.alone { // alone, nothing was copied: the tokens stay counted
		p.store.Acked(round)
	}
	p.end(n, ok)
	if out.empty() {
		return
	}
	if first != 0 { // 0: marked while the previous round drained the store
		lag := p.clock.Now().Sub(first)
		p.lastLag.Store(int64(lag))
		p.m.replicationLag.Observe(lag.Seconds())
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
