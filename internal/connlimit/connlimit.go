package connlimit

import (
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringlimit/ringlimit/clock"
)

// Config says how many connections a Listener holds.
type Config struct {
	// Max is the most connections open at once. Zero or negative: no cap
	// (connections are still counted).
	Max int

	// Grace is the least time a connection must have read nothing before
	// it may be evicted for a new one. Zero: DefaultGrace.
	Grace time.Duration

	// KeepGrace is the least time a connection that has read a request
	// (any byte) must have read nothing more before it may be evicted: a
	// client's keep-alive connection is not closed in favour of a flood of
	// new ones that have not proven anything yet. Zero: DefaultKeepGrace.
	KeepGrace time.Duration

	// Clock is the time source of reads and evictions. Required: a node
	// passes its one clock to every package (New panics without one).
	Clock clock.Clock
}

// DefaultGrace is Config.Grace when zero: a client that connects sends its
// first bytes (TLS hello, HTTP/2 preface, a request) well within it.
const DefaultGrace = time.Second

// DefaultKeepGrace is Config.KeepGrace when zero.
const DefaultKeepGrace = 10 * time.Second

// Stats are a Listener's counts since it was made.
type Stats struct {
	Open     int    // connections accepted and not closed yet
	Accepted uint64 // connections handed to the server
	Evicted  uint64 // connections closed to make room for a new one
	Refused  uint64 // new connections closed at once: full, none idle enough
}

// Listener is a net.Listener with a cap on open connections. It is safe
// for concurrent use: Accept, Close, Stats and the connections' methods
// may be called from any goroutine.
type Listener struct {
	net.Listener
	max   int
	grace time.Duration
	keep  time.Duration // Config.KeepGrace
	clock clock.Clock

	mu    sync.Mutex // guards conns and the counts below
	conns map[*Conn]struct{}
	stats Stats
}

// New wraps ln. A nil cfg.Clock is a programming error, like a nil ln:
// New panics at once ("connlimit: Config.Clock is required") rather than at
// the first Accept.
func New(ln net.Listener, cfg Config) *Listener {
	if cfg.Clock == nil {
		panic("connlimit: Config.Clock is required")
	}
	if cfg.Grace <= 0 {
		cfg.Grace = DefaultGrace
	}
	if cfg.KeepGrace <= 0 {
		cfg.KeepGrace = DefaultKeepGrace
	}
	return &Listener{Listener: ln, max: cfg.Max, grace: cfg.Grace, keep: cfg.KeepGrace, clock: cfg.Clock, conns: map[*Conn]struct{}{}}
}

// Accept waits for a connection there is room for, evicting the idlest
// one when the listener is full (see the package comment).
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if w := l.admit(c); w != nil {
			return w, nil
		}
	}
}

// admit counts c in, making room when full; it returns nil when c was
// refused (and closed).
func (l *Listener) admit(c net.Conn) *Conn {
	now := l.clock.Now()
	w := &Conn{Conn: c, l: l}
	w.lastRead.Store(int64(now))
	l.mu.Lock()
	var victim *Conn
	if l.max > 0 && len(l.conns) >= l.max {
		if victim = l.idlestLocked(now); victim == nil {
			l.stats.Refused++
			l.mu.Unlock()
			c.Close()
			return nil
		}
		l.removeLocked(victim)
		l.stats.Evicted++
	}
	l.conns[w] = struct{}{}
	l.stats.Accepted++
	l.mu.Unlock()
	if victim != nil {
		victim.Conn.Close() // counted out above: its own Close only closes
	}
	return w
}

// idlestLocked returns the connection to evict at now, or nil when none
// has been idle for the grace (the keep grace, for one that has read). One
// that never read a byte goes first.
func (l *Listener) idlestLocked(now clock.Instant) *Conn {
	var best *Conn
	var bestRead clock.Instant
	bestSilent := false
	for c := range l.conns {
		last := clock.Instant(c.lastRead.Load())
		silent := !c.read.Load()
		if idle := now.Sub(last); idle < l.grace || !silent && idle < l.keep {
			continue
		}
		switch {
		case best == nil,
			silent && !bestSilent,
			silent == bestSilent && last.Before(bestRead):
			best, bestRead, bestSilent = c, last, silent
		}
	}
	return best
}

func (l *Listener) removeLocked(c *Conn) { delete(l.conns, c) }

// Stats returns the counts now.
func (l *Listener) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.stats
	s.Open = len(l.conns)
	return s
}

// Conn is a connection accepted by a Listener: a net.Conn that records
// when it last read.
type Conn struct {
	net.Conn
	l        *Listener
	lastRead atomic.Int64 // clock.Instant of the last read of at least a byte (accepted before)
	read     atomic.Bool  // it has read at least a byte
	once     sync.Once
}

// Read reads from the connection, noting the time when it got bytes.
func (c *Conn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.lastRead.Store(int64(c.l.clock.Now()))
		if !c.read.Load() {
			c.read.Store(true)
		}
	}
	return n, err
}

// Close closes the connection and counts it out of its Listener.
func (c *Conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.mu.Lock()
		c.l.removeLocked(c)
		c.l.mu.Unlock()
	})
	return err
}
