// Package batcher gathers concurrent calls bound for one destination into
// batches: one loop takes a slot (at most MaxInFlight batches are out at
// once), then every call waiting in the queue, up to MaxBatch items, and
// hands them to the flush function together. While every slot is busy,
// calls pile up and leave together in the next batch, so a hot destination
// costs one message per batch, not one per call.
//
// A call whose caller gave up (its context ended) while it waited in the
// queue is never sent: it fails with the context's error and the flush
// function never sees it, so the destination spends nothing for a request
// that has already failed.
//
// The peer transport between nodes and the Go client both batch through
// it.
package batcher

import (
	"context"
	"errors"
	"runtime"
	"sync"

	"github.com/ringlimit/ringlimit/internal/deadline"
)

// ErrClosed fails the calls still queued, or queued after, Close.
var ErrClosed = errors.New("batcher: closed")

// ErrFull fails a call that finds Queue calls already waiting, when the
// batcher was configured with NoWait.
var ErrFull = errors.New("batcher: queue full")

// Call is one caller's items and, once Done is closed, their results. The
// flush function writes Out (len(In) results) or fails the call; the
// caller reads them after Do returns.
type Call[Q, R any] struct {
	In  []Q
	Out []R
	// From is set by the flush function: who answered (the deciding node).
	From string

	ctx  context.Context
	err  error
	done chan struct{} // Finish's signal: room for one, so that a call can be used again
	// answered is set by Do once it has taken Finish's signal: nothing
	// else touches the call then, and Recycle may hand it out again.
	answered bool
}

// Finish completes c with err (nil when Out is filled). The flush function
// calls it exactly once for every call it was given, and does not touch
// the call after.
func (c *Call[Q, R]) Finish(err error) {
	c.err = err
	c.done <- struct{}{}
}

// Config sizes a Batcher. Zero values mean the defaults.
type Config struct {
	// MaxBatch is the most items one batch carries. A call with more items
	// than this travels alone. Default 512.
	MaxBatch int
	// MaxInFlight is the most batches out at once. Default 1.
	MaxInFlight int
	// Queue is how many calls may wait for a batch before Do blocks (or,
	// with NoWait, fails with ErrFull). Default 4096.
	Queue int
	// Yields is how many times the loop, holding a batch's first call,
	// lets the goroutines ready to run go first (runtime.Gosched) before
	// it gathers the rest, when the destination is busy (the previous
	// batch carried more than one call, or calls are already waiting):
	// calls that those goroutines are about to queue then leave in this
	// batch instead of the next, for the same cost a batch has. An idle
	// destination's batch leaves at once, since a yield is not free: it
	// may wake another thread. 0 (the default): never yield.
	Yields int
	// NoWait makes Do fail at once with ErrFull when Queue calls are
	// already waiting, instead of waiting for room: a destination that
	// stopped answering then costs its callers nothing more than the
	// calls already queued. False (the zero value) waits.
	NoWait bool
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config { return Config{MaxBatch: 512, MaxInFlight: 1, Queue: 4096} }

// Validate reports the first field out of range, naming it. Zero fields
// are valid (they mean the default).
func (c Config) Validate() error {
	switch {
	case c.MaxBatch < 0:
		return errors.New("batcher: MaxBatch must not be negative")
	case c.MaxInFlight < 0:
		return errors.New("batcher: MaxInFlight must not be negative")
	case c.Queue < 0:
		return errors.New("batcher: Queue must not be negative")
	case c.Yields < 0:
		return errors.New("batcher: Yields must not be negative")
	}
	return nil
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.MaxBatch == 0 {
		c.MaxBatch = d.MaxBatch
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = d.MaxInFlight
	}
	if c.Queue == 0 {
		c.Queue = d.Queue
	}
	return c
}

// Flush sends one batch: calls holds n items in all. It must Finish every
// call and call Release exactly once when the batch no longer holds its
// slot, either before it returns or later from another goroutine. It runs
// on the batcher's loop goroutine: a Flush that blocks holds up the next
// batch.
type Flush[Q, R any] func(calls []*Call[Q, R], n int, release func())

// Batcher batches calls to one destination. It is safe for concurrent use.
type Batcher[Q, R any] struct {
	cfg       Config
	flush     Flush[Q, R]
	abandoned func(items int)
	queue     chan *Call[Q, R]
	slots     chan struct{}
	done      chan struct{}
	closeOnce sync.Once
	stopped   chan struct{} // closed when the loop has returned
	calls     sync.Pool     // of *Call[Q, R] that Recycle took back
}

// New validates cfg and starts the batcher's loop. abandoned, when not
// nil, is told how many items a call held whose caller gave up before it
// was sent. Close stops it.
func New[Q, R any](cfg Config, flush Flush[Q, R], abandoned func(items int)) (*Batcher[Q, R], error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if flush == nil {
		return nil, errors.New("batcher: flush is required")
	}
	cfg = cfg.withDefaults()
	b := &Batcher[Q, R]{cfg: cfg, flush: flush, abandoned: abandoned,
		queue: make(chan *Call[Q, R], cfg.Queue), slots: make(chan struct{}, cfg.MaxInFlight),
		done: make(chan struct{}), stopped: make(chan struct{})}
	go b.loop()
	return b, nil
}

// MaxBatch returns the most items a batch carries.
func (b *Batcher[Q, R]) MaxBatch() int { return b.cfg.MaxBatch }

// Queued returns how many calls wait for a batch.
func (b *Batcher[Q, R]) Queued() int { return len(b.queue) }

// NewCall returns a call for in whose results go to out (len(out) ≥
// len(in)).
func NewCall[Q, R any](ctx context.Context, in []Q, out []R) *Call[Q, R] {
	return &Call[Q, R]{ctx: ctx, In: in, Out: out, done: make(chan struct{}, 1)}
}

// Call is NewCall, with a call Recycle took back when there is one.
func (b *Batcher[Q, R]) Call(ctx context.Context, in []Q, out []R) *Call[Q, R] {
	c, _ := b.calls.Get().(*Call[Q, R])
	if c == nil {
		return NewCall(ctx, in, out)
	}
	c.ctx, c.In, c.Out = ctx, in, out
	return c
}

// Recycle takes c back for a later Call once its caller has read its
// results, if Do saw it answered, and reports whether it did. A call Do
// left before its answer (its context ended, or the batcher closed) may
// still be in a batch, and is left to the collector: so are its In and Out,
// which the flush function may still read and write.
func (b *Batcher[Q, R]) Recycle(c *Call[Q, R]) bool {
	if !c.answered {
		return false
	}
	*c = Call[Q, R]{done: c.done}
	b.calls.Put(c)
	return true
}

// Do queues c and waits until it is answered, its context ends, or the
// batcher closes. It returns c's error. With NoWait, a call that finds the
// queue full fails with ErrFull at once and is never sent.
func (b *Batcher[Q, R]) Do(c *Call[Q, R]) error {
	if b.cfg.NoWait {
		select {
		case <-b.done:
			return ErrClosed
		default:
		}
		select {
		case b.queue <- c:
		default:
			return ErrFull
		}
	} else {
		select {
		case b.queue <- c:
		case <-b.done:
			return ErrClosed
		case <-c.ctx.Done():
			return c.ctx.Err()
		}
	}
	select {
	case <-c.done:
	case <-b.done: // closed after c was queued: nobody may answer it
		select {
		case <-c.done:
		default:
			return ErrClosed
		}
	case <-c.ctx.Done():
		return c.ctx.Err()
	}
	c.answered = true
	return c.err
}

// Close stops the loop, fails the calls still queued with ErrClosed and
// waits for the loop to return. Batches already flushed are the flush
// function's to finish. Safe to call more than once.
func (b *Batcher[Q, R]) Close() {
	b.closeOnce.Do(func() { close(b.done) })
	<-b.stopped
}

func (b *Batcher[Q, R]) loop() {
	defer close(b.stopped)
	var carry *Call[Q, R] // a call that did not fit in the previous batch
	last := 0             // calls in the previous batch
	for {
		select {
		case b.slots <- struct{}{}:
		case <-b.done:
			if carry != nil {
				carry.Finish(ErrClosed)
			}
			b.drain()
			return
		}
		first := carry
		carry = nil
		for first == nil || b.gaveUp(first) {
			select {
			case first = <-b.queue:
			case <-b.done:
				<-b.slots
				b.drain()
				return
			}
		}
		calls, n := []*Call[Q, R]{first}, len(first.In)
		if last > 1 || len(b.queue) > 0 {
			for i := 0; i < b.cfg.Yields && n+len(b.queue) < b.cfg.MaxBatch; i++ {
				runtime.Gosched()
			}
		}
	gather:
		for n < b.cfg.MaxBatch {
			select {
			case c := <-b.queue:
				if b.gaveUp(c) {
					continue
				}
				if n+len(c.In) > b.cfg.MaxBatch {
					carry = c
					break gather
				}
				calls = append(calls, c)
				n += len(c.In)
			default:
				break gather
			}
		}
		last = len(calls)
		var once sync.Once
		b.flush(calls, n, func() { once.Do(func() { <-b.slots }) })
	}
}

// gaveUp reports whether c's caller gave up while c waited, and if so
// fails c without sending it.
func (b *Batcher[Q, R]) gaveUp(c *Call[Q, R]) bool {
	err := deadline.Err(c.ctx)
	if err == nil {
		return false
	}
	if b.abandoned != nil {
		b.abandoned(len(c.In))
	}
	c.Finish(err)
	return true
}

func (b *Batcher[Q, R]) drain() {
	for {
		select {
		case c := <-b.queue:
			c.Finish(ErrClosed)
		default:
			return
		}
	}
}
