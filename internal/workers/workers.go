// Package workers runs short tasks on goroutines that it keeps between
// them. A goroutine started for each task begins with a small stack, and a
// task that encodes or decodes a protobuf message grows it, copying it at
// every doubling, every time: on the Go client's batches and on a node's
// Batches stream messages that copying was 4% to 7% of the CPU. A pool's
// goroutines keep the stacks they grew.
package workers

import "sync"

// Pool runs tasks on at most Max goroutines: an idle one takes the next
// task, a new one is started while there are fewer than Max, and past
// that Go waits for one to be idle. Its goroutines stay until Stop.
type Pool struct {
	max   int
	tasks chan func()
	quit  chan struct{}
	wg    sync.WaitGroup

	mu      sync.Mutex // guards started and stopped
	started int
	stopped bool
}

// New returns a pool of at most n goroutines (at least 1).
func New(n int) *Pool {
	return &Pool{max: max(n, 1), tasks: make(chan func()), quit: make(chan struct{})}
}

// Go runs f on one of the pool's goroutines. A pool that is stopping or
// stopped runs f on a goroutine of its own, which Stop does not wait for.
func (p *Pool) Go(f func()) {
	select {
	case p.tasks <- f: // an idle goroutine took it
		return
	default:
	}
	p.mu.Lock()
	switch {
	case p.stopped:
		p.mu.Unlock()
		go f()
		return
	case p.started < p.max:
		p.started++
		p.wg.Add(1)
		p.mu.Unlock()
		go p.work(f)
		return
	}
	p.mu.Unlock()
	select {
	case p.tasks <- f:
	case <-p.quit:
		go f()
	}
}

func (p *Pool) work(f func()) {
	defer p.wg.Done()
	for {
		f()
		select {
		case f = <-p.tasks:
		case <-p.quit:
			return
		}
	}
}

// Stop ends the pool's goroutines, each once its task has returned, and
// waits for them.
func (p *Pool) Stop() {
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		p.wg.Wait()
		return
	}
	p.stopped = true
	p.mu.Unlock()
	close(p.quit)
	p.wg.Wait()
}
