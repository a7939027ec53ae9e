package peer

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/ringlimit/ringlimit/clock"
)

// Pool keeps a connection to every other member and sends each its
// batches, handoffs, replicas and fetches. A member that leaves the list
// stays dialable for Grace, so that a new owner can still fetch from it.
// It is safe for concurrent use.
type Pool struct {
	cfg Config
	// version is the ring version given to the last SetMembers; every
	// batch carries the value it has when the batch is flushed.
	version atomic.Uint64
	// live is the members' connections by name, replaced whole under mu:
	// checks read it without a lock.
	live atomic.Pointer[map[string]*conn]

	mu      sync.Mutex
	conns   map[string]*conn // by member name; guarded by mu
	retired []*conn
	closed  bool
	// closedAll is closed when Close has closed every connection.
	closedAll chan struct{}
	// sweep closes the connections Renew retired; nil before the first
	// Renew.
	sweep clock.Timer
	// rev is the reverse links of the streams peers opened to this node's
	// Server (reverse.go).
	rev reverses
}

// NewPool validates cfg and returns a Pool with no members.
func NewPool(cfg Config) (*Pool, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	p := &Pool{cfg: cfg, conns: map[string]*conn{}, closedAll: make(chan struct{})}
	p.publishLocked()
	return p, nil
}

// SetMembers records version, the version of the ring the members form,
// dials the members (name → peer address) it has no connection to, and
// retires the connections of members no longer listed or whose address
// changed. Self is skipped. Every batch flushed from then on carries
// version. Retired connections are closed by the first SetMembers at least
// Grace after they retired.
func (p *Pool) SetMembers(version uint64, addrs map[string]string) {
	var stale []*conn
	defer func() { // close waits for the stream receivers: not under mu
		for _, c := range stale {
			c.close()
		}
	}()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.version.Store(version)
	now := p.cfg.Clock.Now()
	for name, c := range p.conns {
		if addr, ok := addrs[name]; !ok || addr != c.addr {
			delete(p.conns, name)
			c.retireAt = now.Add(p.cfg.Grace)
			p.retired = append(p.retired, c)
		}
	}
	for name, addr := range addrs {
		if name == p.cfg.Self || p.conns[name] != nil {
			continue
		}
		c, err := dial(&p.cfg, &p.version, &p.rev, name, addr)
		if err != nil {
			p.cfg.Logger.Error("peer not reachable", "peer", name, "addr", addr, "err", err)
			continue
		}
		p.conns[name] = c
	}
	stale = p.takeRetiredLocked(now)
	p.publishLocked()
}

// takeRetiredLocked removes from p.retired, and returns, the connections
// retired at or before now; the caller closes them outside mu.
func (p *Pool) takeRetiredLocked(now clock.Instant) []*conn {
	var stale []*conn
	kept := p.retired[:0]
	for _, c := range p.retired {
		if c.retireAt <= now {
			stale = append(stale, c)
		} else {
			kept = append(kept, c)
		}
	}
	p.retired = kept
	return stale
}

// publishLocked makes the current connections visible to lock-free readers.
func (p *Pool) publishLocked() {
	m := make(map[string]*conn, len(p.conns))
	for name, c := range p.conns {
		m[name] = c
	}
	p.live.Store(&m)
}

// conn returns the connection to name: a member's, or with retired set, a
// connection retired less than Grace ago.
func (p *Pool) conn(name string, retired bool) (*conn, error) {
	if c := (*p.live.Load())[name]; c != nil {
		return c, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if c := p.conns[name]; c != nil {
		return c, nil
	}
	if retired {
		for _, c := range p.retired {
			if c.name == name {
				return c, nil
			}
		}
	}
	return nil, fmt.Errorf("peer: no connection to %s", name)
}

// Addr returns the address of the member's connection, or "".
func (p *Pool) Addr(name string) string {
	if c, err := p.conn(name, false); err == nil {
		return c.addr
	}
	return ""
}

// Check sends reqs to the member name, batched with other callers' checks
// for it, writes one Answer per request into out (len(out) ≥ len(reqs))
// and returns the name of the node that decided. It fails when the member
// cannot be reached within Timeout or ctx ends first.
func (p *Pool) Check(ctx context.Context, name string, reqs []Request, out []Answer) (string, error) {
	c, err := p.conn(name, false)
	if err != nil {
		return "", err
	}
	return c.check(ctx, reqs, out)
}

// Handoff pushes states to the member name, within four times Timeout.
func (p *Pool) Handoff(ctx context.Context, name string, states []State) error {
	c, err := p.conn(name, false)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 4*p.cfg.Timeout)
	defer cancel()
	return c.handoff(ctx, states)
}

// Replicate sends states to the member name (this node's successor for
// their keys), within Timeout, and returns how many it took. It fails when
// name is not a current member, when the call fails, or when name refuses
// the batch (status FailedPrecondition: this node is not a member of its
// ring).
func (p *Pool) Replicate(ctx context.Context, name string, states []State) (int, error) {
	c, err := p.conn(name, false)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	n, err := c.replicate(ctx, p.version.Load(), states)
	if err != nil {
		p.cfg.Metrics.replicateErrors.Inc()
		return 0, err
	}
	p.cfg.Metrics.replicated.Add(float64(len(states)))
	return n, nil
}

// Keys asks every member how many keys it holds, in parallel, each within
// Timeout. Members that do not answer are missing from the map.
func (p *Pool) Keys(ctx context.Context) map[string]int64 {
	out := map[string]int64{}
	for name, st := range p.Stats(ctx) {
		out[name] = st.Keys
	}
	return out
}

// Stats asks every member for its Stats, in parallel, each within
// Timeout. Members that do not answer are missing from the map.
func (p *Pool) Stats(ctx context.Context) map[string]Stats {
	p.mu.Lock()
	conns := make([]*conn, 0, len(p.conns))
	for _, c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	out := map[string]Stats{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
			defer cancel()
			st, err := c.stats(ctx)
			if err != nil {
				return
			}
			mu.Lock()
			out[c.name] = st
			mu.Unlock()
		})
	}
	wg.Wait()
	return out
}

// Close closes every connection, failing the calls still waiting, and
// waits until the connections' stream receivers have returned or ctx ends;
// then it returns ctx's error (the connections go on closing in the
// background). Safe to call more than once, concurrently too: every call
// waits for the one closing.
func (p *Pool) Close(ctx context.Context) error {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		if p.sweep != nil {
			p.sweep.Stop()
		}
		conns := p.retired
		for _, c := range p.conns {
			conns = append(conns, c)
		}
		p.conns, p.retired = nil, nil
		p.publishLocked()
		go func() {
			defer close(p.closedAll)
			var wg sync.WaitGroup
			for _, c := range conns {
				wg.Go(c.close)
			}
			wg.Wait()
		}()
	}
	p.mu.Unlock()
	select {
	case <-p.closedAll:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("peer: closing the connections: %w", context.Cause(ctx))
	}
}
