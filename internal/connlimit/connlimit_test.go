package connlimit_test

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/internal/connlimit"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
)

// rig is a capped listener on 127.0.0.1:0 whose accepted connections
// arrive on accepted, with a fake clock.
type rig struct {
	t        *testing.T
	l        *connlimit.Listener
	clock    *testkit.Clock
	accepted chan net.Conn
}

func newRig(t *testing.T, max int, grace, keep time.Duration) *rig {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, clock: testkit.NewClock(1), accepted: make(chan net.Conn, 64)}
	r.l = connlimit.New(ln, connlimit.Config{Max: max, Grace: grace, KeepGrace: keep, Clock: r.clock})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := r.l.Accept()
			if err != nil {
				return
			}
			r.accepted <- c
		}
	}()
	t.Cleanup(func() {
		r.l.Close()
		<-done
		close(r.accepted)
		for c := range r.accepted {
			c.Close()
		}
	})
	return r
}

// dial connects a client and returns it with the server's side of it, or
// a nil server side when the listener refused it.
func (r *rig) dial() (client net.Conn, server net.Conn) {
	r.t.Helper()
	before := r.l.Stats()
	c, err := net.Dial("tcp", r.l.Addr().String())
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { c.Close() })
	testkit.WaitFor(r.t, 5*time.Second, "the listener to take the connection", func() error {
		if s := r.l.Stats(); s.Accepted+s.Refused == before.Accepted+before.Refused {
			return errors.New("not accepted yet")
		}
		return nil
	})
	if r.l.Stats().Refused > before.Refused {
		return c, nil
	}
	return c, <-r.accepted
}

// wantClosed asserts that the server closed client's connection.
func wantClosed(t *testing.T, what string, client net.Conn) {
	t.Helper()
	client.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := client.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("%s: read = %v, want EOF (closed by the server)", what, err)
	}
}

// wantOpen asserts that client's connection is still served: a byte sent
// by the server arrives.
func wantOpen(t *testing.T, what string, client, server net.Conn) {
	t.Helper()
	if _, err := server.Write([]byte{1}); err != nil {
		t.Fatalf("%s: server write: %v", what, err)
	}
	client.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := client.Read(make([]byte, 1)); err != nil {
		t.Fatalf("%s: read = %v, want the server's byte", what, err)
	}
}

func wantStats(t *testing.T, step string, l *connlimit.Listener, want connlimit.Stats) {
	t.Helper()
	if got := l.Stats(); got != want {
		t.Fatalf("%s: Stats() = %+v, want %+v", step, got, want)
	}
}

// read makes server read the byte client writes, at the rig's clock.
func read(t *testing.T, client, server net.Conn) {
	t.Helper()
	if _, err := client.Write([]byte{7}); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(server, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
}

func TestCapRefusesWhenNoneIdle(t *testing.T) {
	r := newRig(t, 2, time.Second, 5*time.Second)
	c1, s1 := r.dial()
	c2, s2 := r.dial()
	wantStats(t, "two of two", r.l, connlimit.Stats{Open: 2, Accepted: 2})
	r.clock.Advance(999 * time.Millisecond) // idle, but not for the grace
	c3, s3 := r.dial()
	if s3 != nil {
		t.Fatal("third connection accepted at the cap with none idle for the grace")
	}
	wantClosed(t, "refused", c3)
	wantStats(t, "refused", r.l, connlimit.Stats{Open: 2, Accepted: 2, Refused: 1})
	wantOpen(t, "first", c1, s1)
	wantOpen(t, "second", c2, s2)

	// A closed connection makes room, counted once however often closed.
	s1.Close()
	s1.Close()
	wantStats(t, "one closed twice", r.l, connlimit.Stats{Open: 1, Accepted: 2, Refused: 1})
	_, s4 := r.dial()
	if s4 == nil {
		t.Fatal("connection refused below the cap")
	}
	wantStats(t, "room made", r.l, connlimit.Stats{Open: 2, Accepted: 3, Refused: 1})
}

func TestEvictsIdlest(t *testing.T) {
	r := newRig(t, 3, time.Second, 5*time.Second)
	c1, s1 := r.dial()
	read(t, c1, s1) // at 0s
	r.clock.Advance(time.Second)
	c2, s2 := r.dial()
	read(t, c2, s2) // at 1s
	r.clock.Advance(time.Second)
	c3, s3 := r.dial() // silent since 2s
	r.clock.Advance(5 * time.Second)

	// c3 never read a byte: it goes first, though c1 and c2 have been
	// idle longer.
	c4, s4 := r.dial()
	if s4 == nil {
		t.Fatal("new connection refused with idle ones to evict")
	}
	wantClosed(t, "silent c3", c3)
	wantStats(t, "silent evicted", r.l, connlimit.Stats{Open: 3, Accepted: 4, Evicted: 1})
	if err := s3.Close(); err == nil {
		t.Error("closing the evicted connection again: nil error, want the already-closed one")
	}
	wantStats(t, "evicted closed by its server", r.l, connlimit.Stats{Open: 3, Accepted: 4, Evicted: 1})

	// c4 has not read yet either, but is not idle for the grace: of the
	// others c1's last read is the oldest.
	read(t, c4, s4)
	_, s5 := r.dial()
	if s5 == nil {
		t.Fatal("refused")
	}
	wantClosed(t, "c1, read longest ago", c1)
	wantOpen(t, "c2", c2, s2)
	wantOpen(t, "c4", c4, s4)
	wantStats(t, "idlest evicted", r.l, connlimit.Stats{Open: 3, Accepted: 5, Evicted: 2})

	// c2 read 6s ago, c4 just now, c5 is silent but new: c2 goes.
	_, s6 := r.dial()
	if s6 == nil {
		t.Fatal("refused")
	}
	wantClosed(t, "c2", c2)
	wantStats(t, "third eviction", r.l, connlimit.Stats{Open: 3, Accepted: 6, Evicted: 3})

	// Now only c4, c5, c6, none idle for the grace: refused.
	c7, s7 := r.dial()
	if s7 != nil {
		t.Fatal("accepted with nothing idle for the grace")
	}
	wantClosed(t, "c7", c7)
	wantOpen(t, "c4 after refusal", c4, s4)
	wantStats(t, "refusal", r.l, connlimit.Stats{Open: 3, Accepted: 6, Evicted: 3, Refused: 1})
}

func TestNoCapCounts(t *testing.T) {
	r := newRig(t, 0, 0, 0)
	var servers []net.Conn
	for range 20 {
		_, s := r.dial()
		if s == nil {
			t.Fatal("refused without a cap")
		}
		servers = append(servers, s)
	}
	wantStats(t, "20 open", r.l, connlimit.Stats{Open: 20, Accepted: 20})
	for _, s := range servers {
		s.Close()
	}
	wantStats(t, "all closed", r.l, connlimit.Stats{Accepted: 20})
}

// A connection that has read is kept for the keep grace: a flood of new
// connections does not close a client's keep-alive connection that
// waits between requests.
func TestKeepsReaderForKeepGrace(t *testing.T) {
	r := newRig(t, 1, time.Second, 5*time.Second)
	c1, s1 := r.dial()
	read(t, c1, s1) // at 0s
	r.clock.Advance(4999 * time.Millisecond)
	c2, s2 := r.dial()
	if s2 != nil {
		t.Fatal("a reader idle less than the keep grace was evicted")
	}
	wantClosed(t, "refused c2", c2)
	wantOpen(t, "c1 kept", c1, s1)
	wantStats(t, "kept", r.l, connlimit.Stats{Open: 1, Accepted: 1, Refused: 1})
	r.clock.Advance(time.Millisecond)
	_, s3 := r.dial()
	if s3 == nil {
		t.Fatal("a reader idle for the keep grace was not evicted")
	}
	wantClosed(t, "c1 after the keep grace", c1)
	wantStats(t, "evicted", r.l, connlimit.Stats{Open: 1, Accepted: 2, Evicted: 1, Refused: 1})
}

// A Listener has no clock of its own: New panics at once on a Config
// without one, naming the field, rather than at the first Accept.
func TestNewRequiresClock(t *testing.T) {
	defer func() {
		if r := recover(); r != "connlimit: Config.Clock is required" {
			t.Errorf("New without a Clock: recovered %v, want the panic naming Config.Clock", r)
		}
	}()
	connlimit.New(nil, connlimit.Config{Max: 1})
	t.Error("New without a Clock returned")
}
