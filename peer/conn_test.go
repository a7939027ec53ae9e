package peer

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
)

// A check on a connection that closed under it (its member left the ring,
// or the pool closed, while the caller held it) must not wait for an answer
// that will never come. Before the fix in the batcher it did, about every
// other time, until its ctx ended: the queue send and the batcher's done
// were both ready, and a call queued after the loop's last drain was never
// answered.
func TestCheckOnClosedConnDoesNotHang(t *testing.T) {
	p, err := NewPool(Config{Self: "A", Clock: testkit.NewClock(0)})
	if err != nil {
		t.Fatal(err)
	}
	p.SetMembers(1, map[string]string{"B": testkit.DeadAddr(t)})
	c, err := p.conn("B", false)
	if err != nil {
		t.Fatal(err)
	}
	p.Close(context.Background())
	for i := range 20 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		start := time.Now()
		_, err := c.check(ctx, []Request{{Key: "k", Limit: hourly(10), Cost: 1}}, make([]Answer, 1))
		cancel()
		if !errors.Is(err, errClosed) || time.Since(start) > time.Second {
			t.Fatalf("check %d on a closed connection: %v after %v, want %v at once", i, err, time.Since(start), errClosed)
		}
	}
}

// Close waits for the connections to close, but not past its context: a
// connection whose stream receiver has not returned holds Close until the
// deadline, which Close then reports; a later Close waits again and
// returns nil once every connection closed.
func TestPoolCloseHonoursDeadline(t *testing.T) {
	p, err := NewPool(Config{Self: "A", Clock: testkit.NewClock(0)})
	if err != nil {
		t.Fatal(err)
	}
	p.SetMembers(1, map[string]string{"B": testkit.DeadAddr(t)})
	c, err := p.conn("B", false)
	if err != nil {
		t.Fatal(err)
	}
	c.wg.Add(1) // a stream receiver that has not returned yet
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := p.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close with a receiver still running = %v, want %v", err, context.DeadlineExceeded)
	}
	if _, err := p.Check(context.Background(), "B", []Request{{Key: "k", Limit: hourly(10), Cost: 1}}, make([]Answer, 1)); err == nil {
		t.Error("a check through a closed pool succeeded")
	}
	c.wg.Done()
	ctx2, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel2()
	for i := range 2 {
		if err := p.Close(ctx2); err != nil {
			t.Fatalf("Close #%d after the receiver returned: %v", i+2, err)
		}
	}
}

// A Pool has no clock of its own: NewPool refuses a Config without one.
func TestNewPoolRequiresClock(t *testing.T) {
	const want = "peer: Config.Clock is required"
	cfg := Config{Self: "A"}
	if err := cfg.Validate(); err == nil || err.Error() != want {
		t.Errorf("Validate() = %v, want %q", err, want)
	}
	if p, err := NewPool(cfg); err == nil || err.Error() != want {
		if p != nil {
			p.Close(context.Background())
		}
		t.Errorf("NewPool() = %v, want %q", err, want)
	}
}

// NewServer takes everything at construction and refuses what it cannot
// serve, naming the field.
func TestNewServerConfig(t *testing.T) {
	h, clk := &nopHandler{}, testkit.NewClock(0)
	for _, tc := range []struct {
		name string
		cfg  ServerConfig
		want string
	}{
		{"no self", ServerConfig{Handler: h, Clock: clk}, "peer: ServerConfig.Self must name this node"},
		{"no handler", ServerConfig{Self: "A", Clock: clk}, "peer: ServerConfig.Handler is required"},
		{"no clock", ServerConfig{Self: "A", Handler: h}, "peer: ServerConfig.Clock is required"},
		{"verify without known", ServerConfig{Self: "A", Handler: h, Clock: clk, Verify: fixedCerts{}}, "peer: ServerConfig.Verify needs Known (authentication)"},
	} {
		if s, err := NewServer(tc.cfg); s != nil || err == nil || err.Error() != tc.want {
			t.Errorf("%s: NewServer = %v, %v; want nil, %q", tc.name, s, err, tc.want)
		}
	}
	known := func(string) bool { return true }
	var reported bool
	s, err := NewServer(ServerConfig{Self: "A", Handler: h, Clock: clk, Known: known, Verify: fixedCerts{},
		Report: func(st *Stats) { reported, st.Version = true, "v9" }})
	if err != nil {
		t.Fatal(err)
	}
	if s.known == nil || s.certs == nil {
		t.Error("NewServer dropped Known or Verify")
	}
	if st := s.LocalStats(); !reported || st.Version != "v9" || st.Name != "A" {
		t.Errorf("LocalStats() = %+v (report called: %v), want Version v9 from Report, Name A", st, reported)
	}
}

// nopHandler decides nothing; for servers that serve no call.
type nopHandler struct{}

func (nopHandler) Decide(context.Context, string, uint64, []Request, []Answer) {}
func (nopHandler) MayWait(string) bool                                         { return false }
func (nopHandler) Merge(string, []State) int                                   { return 0 }
func (nopHandler) Replicate(string, []State) (int, error)                      { return 0, nil }
func (nopHandler) Lookup(string, string, *bucket.Limit) (State, bool)          { return State{}, false }
func (nopHandler) ResetFrom(context.Context, string, string, bucket.Limit, int64) ResetAnswer {
	return ResetAnswer{}
}
func (nopHandler) Keys() int64         { return 0 }
func (nopHandler) RingVersion() uint64 { return 0 }

// fixedCerts is a Certs that holds nothing; for a config that is never
// served over TLS.
type fixedCerts struct{}

func (fixedCerts) Certificate() *tls.Certificate { return nil }
func (fixedCerts) Roots() *x509.CertPool         { return nil }
func (fixedCerts) Generation() uint64            { return 0 }
