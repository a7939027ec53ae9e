package peer

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/metadata"

	"github.com/ringlimit/ringlimit/clock"
)

// A node pair's checks share one Check stream. Of two nodes, the one whose
// name sorts first opens its stream to the other with the metadata
// reverseKey: "1" (when its Pool serves a Server). The other node then
// sends its own batches for the opener on that stream, as reverse batches
// in server-to-client messages, and the opener answers them in
// client-to-server messages. A side that decided a batch while none of
// its own for the same peer is in flight on the stream (its batcher's slot
// is free, so its next batch may go at once) holds the answer for a few
// scheduling rounds (answerYields), so that the batch carries it: one
// message, one write and one read where there were two of each on two
// connections. Otherwise the answer goes at once.
//
// A node that does not know reverse batches never opens a stream with the
// metadata and never sends them; one that receives a stream without it
// sends its batches on its own stream, as before.

// reverseKey is the metadata with which a stream's opener takes reverse
// batches on it.
const reverseKey = "ringlimit-reverse"

// answerYields is at most how many times a goroutine that decided a batch
// lets the goroutines ready to run go first, while a batch of its own may
// go, before it sends the answer alone: the batcher waits up to three
// rounds (Config.Batch.Yields) before it sends a batch, which then carries
// the answer.
const answerYields = 4

// reverseMaxChecks is the most checks a side may have in flight on one
// stream (Batch.MaxBatch × Batch.MaxInFlight) for its Pool to ask for, or
// send, reverse batches: 512 checks of the longest keys (bucket.MaxKeyLen)
// come to about 560 KiB, below the stream's flow-control window
// (StreamWindow). Each side reads the stream on a goroutine that also
// answers the other side's batches, and blocks on a write only when the
// other side has a window's worth of its writes unread; while what a side
// has in flight stays below the window, that cannot happen both ways at
// once.
const reverseMaxChecks = 512

// takesReverse reports whether cfg's batches are small enough for reverse
// batches (reverseMaxChecks).
func takesReverse(cfg *Config) bool {
	return cfg.Batch.MaxBatch*cfg.Batch.MaxInFlight <= reverseMaxChecks
}

// errReverseClosed refuses a reverse batch on a link that stopped taking
// them; the batch goes on the sender's own stream.
var errReverseClosed = errors.New("peer: the stream no longer takes reverse batches")

// reverses is a Pool's reverse links by peer name, and the peer service
// that decides the reverse batches that come in on the Pool's own streams.
type reverses struct {
	server atomic.Pointer[Server] // nil until a Server is made with the Pool

	mu    sync.Mutex
	links map[string]*reverseLink
}

// link returns the live reverse link to the named peer, or nil.
func (r *reverses) link(name string) *reverseLink {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.links[name]
}

// put makes l the link to l.peer, in place of any other.
func (r *reverses) put(l *reverseLink) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.links == nil {
		r.links = map[string]*reverseLink{}
	}
	r.links[l.peer] = l
}

// drop forgets l if it is still the link to its peer.
func (r *reverses) drop(l *reverseLink) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.links[l.peer] == l {
		delete(r.links, l.peer)
	}
}

// reverseLink is a Check stream a peer opened to this node, as this node
// uses it for its own batches to that peer. send writes a batch on it,
// with the answer to the peer's last batch when one is waiting.
type reverseLink struct {
	peer string
	cfg  *Config // the Pool's: Clock and Timeout
	send func(m *checkBatch) error

	mu       sync.Mutex
	closed   bool // no more batches: the stream ended, or a batch went unanswered
	inflight map[uint64]*batch
	watch    clock.Timer // fires when the oldest batch in flight may be overdue
	armed    bool
}

func newReverseLink(cfg *Config, peer string, send func(*checkBatch) error) *reverseLink {
	l := &reverseLink{peer: peer, cfg: cfg, send: send, inflight: map[uint64]*batch{}}
	l.watch = cfg.Clock.AfterFunc(cfg.Timeout, l.overdue)
	l.watch.Stop()
	return l
}

// add registers b as in flight under id. It reports false once the link
// is closed.
func (l *reverseLink) add(id uint64, b *batch) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	b.sent = l.cfg.Clock.Now()
	l.inflight[id] = b
	if !l.armed {
		l.armed = true
		l.watch.Reset(l.cfg.Timeout)
	}
	return true
}

// take removes the batch in flight under id and returns it, or nil.
func (l *reverseLink) take(id uint64) *batch {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.inflight[id]
	delete(l.inflight, id)
	return b
}

// stop takes no more batches; those in flight are still answered.
func (l *reverseLink) stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
}

// close takes no more batches and fails those in flight with err.
func (l *reverseLink) close(err error) {
	l.mu.Lock()
	l.closed = true
	failed := l.inflight
	l.inflight = map[uint64]*batch{}
	l.watch.Stop()
	l.mu.Unlock()
	for _, b := range failed {
		b.c.finish(b, nil, err)
	}
}

// overdue closes the link if its oldest batch has waited Timeout for its
// answer; otherwise it sets the watch for when that batch would be. The
// batches after it go on this node's own stream, as a batch that finds no
// open stream after a peer did not answer does: at once, failed, for
// Timeout (conn.quiet).
func (l *reverseLink) overdue() {
	l.mu.Lock()
	if len(l.inflight) == 0 {
		l.armed = false
		l.mu.Unlock()
		return
	}
	oldest, left := oldestIn(l.inflight, l.cfg)
	if left > 0 {
		l.watch.Reset(left)
		l.mu.Unlock()
		return
	}
	l.mu.Unlock()
	oldest.c.quiet()
	l.close(fmt.Errorf("peer %s: no answer within %v", l.peer, l.cfg.Timeout))
}

// answer hands a reverse batch's answer, raw, to its batch.
func (l *reverseLink) answer(raw []byte, ans *checkAnswer) error {
	if err := ans.parse(raw); err != nil {
		return err
	}
	b := l.take(ans.id)
	if b == nil {
		return fmt.Errorf("peer %s answered reverse batch %d, which is not in flight", l.peer, ans.id)
	}
	b.c.finish(b, ans, nil)
	return nil
}

// reverseAsked reports whether the stream of ctx was opened with
// reverseKey: "1".
func reverseAsked(ctx context.Context) bool {
	md, _ := metadata.FromIncomingContext(ctx)
	v := md.Get(reverseKey)
	return len(v) == 1 && v[0] == "1"
}

// batchMayGo reports whether a batch of this node's for the link's peer
// may go now: none is in flight on the link, where it would hold the
// batcher's slot (Batch.MaxInFlight, 1 by default).
func (l *reverseLink) batchMayGo() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.inflight) == 0 && !l.closed
}

// yieldForAnswer lets the goroutines ready to run go first, up to
// answerYields times, until taken reports that a batch took the answer.
func yieldForAnswer(taken func() bool) {
	for range answerYields {
		runtime.Gosched()
		if taken() {
			return
		}
	}
}
