package faultnet

import (
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
)

// chunk is bytes written at once, readable from at (zero: at once).
type chunk struct {
	b  []byte
	at time.Time
}

// pipe is one direction of a connection: written at one end, read at the
// other, across one directed link.
type pipe struct {
	net  *Network
	link *linkState

	mu      sync.Mutex // guards the fields below
	chunks  []chunk    // in order
	size    int        // bytes in chunks, ≤ StreamBuffer
	wake    signal     // notified on any change below
	wclosed bool       // the writing end closed: EOF after the chunks, from finAt
	finAt   time.Time
	rclosed bool // the reading end closed
	broken  bool // Reset
}

func (p *pipe) read(b []byte, dl *deadline) (int, error) {
	for {
		expired := dl.wait()
		var changed <-chan struct{}
		if p.link.cut.Load() {
			changed = p.net.changes() // taken before the check below, so no heal is missed
		}
		p.mu.Lock()
		switch {
		case p.broken:
			p.mu.Unlock()
			return 0, ErrReset
		case p.rclosed || isDone(p.net.done):
			p.mu.Unlock()
			return 0, net.ErrClosed
		case isDone(expired):
			p.mu.Unlock()
			return 0, os.ErrDeadlineExceeded
		case len(b) == 0:
			p.mu.Unlock()
			return 0, nil
		}
		var due time.Duration // > 0: the head becomes readable then
		if !p.link.cut.Load() {
			now := time.Now()
			n := 0
			for n < len(b) && len(p.chunks) > 0 {
				c := &p.chunks[0]
				if c.at.After(now) {
					due = c.at.Sub(now)
					break
				}
				k := copy(b[n:], c.b)
				n += k
				if c.b = c.b[k:]; len(c.b) == 0 {
					p.chunks[0] = chunk{}
					p.chunks = p.chunks[1:]
				}
			}
			if n > 0 {
				p.size -= n
				p.link.bytes.Add(uint64(n))
				p.wake.notify()
				p.mu.Unlock()
				return n, nil
			}
			if len(p.chunks) == 0 && p.wclosed {
				if !p.finAt.After(now) {
					p.mu.Unlock()
					return 0, io.EOF
				}
				due = p.finAt.Sub(now)
			}
		} else if changed == nil {
			// Cut between the two loads above: go round to take changes().
			p.mu.Unlock()
			continue
		}
		wake := p.wake.wait()
		p.mu.Unlock()

		var timer *time.Timer
		var fire <-chan time.Time
		if due > 0 {
			timer = time.NewTimer(due)
			fire = timer.C
		}
		select {
		case <-wake:
		case <-changed:
		case <-fire:
		case <-expired:
		case <-p.net.done:
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

func (p *pipe) write(b []byte, dl *deadline) (int, error) {
	written := 0
	for {
		expired := dl.wait()
		p.mu.Lock()
		switch {
		case p.broken:
			p.mu.Unlock()
			return written, ErrReset
		case p.wclosed || isDone(p.net.done):
			p.mu.Unlock()
			return written, net.ErrClosed
		case p.rclosed:
			p.mu.Unlock()
			return written, syscall.EPIPE
		case isDone(expired):
			p.mu.Unlock()
			return written, os.ErrDeadlineExceeded
		case len(b) == 0:
			p.mu.Unlock()
			return written, nil
		}
		if space := StreamBuffer - p.size; space > 0 {
			k := min(space, len(b))
			var at time.Time
			if d := p.link.delayed(); d > 0 {
				at = time.Now().Add(d)
			}
			if last := len(p.chunks) - 1; last >= 0 && !at.After(p.chunks[last].at) {
				// Readable no sooner than the chunk before it anyway.
				p.chunks[last].b = append(p.chunks[last].b, b[:k]...)
			} else {
				p.chunks = append(p.chunks, chunk{b: append([]byte(nil), b[:k]...), at: at})
			}
			p.size += k
			written += k
			b = b[k:]
			p.wake.notify()
			p.mu.Unlock()
			if len(b) == 0 {
				return written, nil // all queued: what the peer does next is not this write's business
			}
			continue
		}
		wake := p.wake.wait()
		p.mu.Unlock()
		select {
		case <-wake:
		case <-expired:
		case <-p.net.done:
		}
	}
}

// closeWrite is the writer's FIN: EOF once the chunks are read.
func (p *pipe) closeWrite() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.wclosed {
		p.wclosed = true
		if d := p.link.delayed(); d > 0 {
			p.finAt = time.Now().Add(d)
		}
		p.wake.notify()
	}
}

// closeRead is the reader's close: unread bytes are discarded.
func (p *pipe) closeRead() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rclosed = true
	p.discard()
}

func (p *pipe) reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.broken = true
	p.discard()
}

// discard drops the unread bytes. Callers hold p.mu.
func (p *pipe) discard() {
	p.link.bytesDropped.Add(uint64(p.size))
	p.chunks, p.size = nil, 0
	p.wake.notify()
}

// deadline is a read or write deadline: a channel closed when it passes.
//
// Concurrency: safe for concurrent use.
type deadline struct {
	mu    sync.Mutex // guards the fields below
	ch    chan struct{}
	timer *time.Timer
	gen   uint64 // bumped by set, so that a stale timer closes nothing
}

// wait returns a channel that is closed once the deadline has passed.
func (d *deadline) wait() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ch == nil {
		d.ch = make(chan struct{})
	}
	return d.ch
}

// set moves the deadline to t; the zero t means none.
func (d *deadline) set(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.gen++
	if d.timer != nil {
		d.timer.Stop()
		d.timer = nil
	}
	if d.ch == nil || isDone(d.ch) {
		d.ch = make(chan struct{})
	}
	if t.IsZero() {
		return
	}
	wait := time.Until(t)
	if wait <= 0 {
		close(d.ch)
		return
	}
	gen, ch := d.gen, d.ch
	d.timer = time.AfterFunc(wait, func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.gen == gen {
			close(ch)
		}
	})
}

func isDone(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
