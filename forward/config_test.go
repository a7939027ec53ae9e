package forward

import (
	"testing"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
	"github.com/ringlimit/ringlimit/peer"
)

// The router waits for an owner as long as a peer call may take, and keeps
// a handed-off key's state as long as the pool keeps the old owner
// dialable: the two packages' defaults must agree.
func TestDefaultsAgreeWithPeer(t *testing.T) {
	f, p := DefaultConfig(), peer.DefaultConfig()
	if f.PeerTimeout != p.Timeout {
		t.Errorf("forward PeerTimeout %v, peer Timeout %v: they must agree", f.PeerTimeout, p.Timeout)
	}
	if f.Grace != p.Grace {
		t.Errorf("forward Grace %v, peer Grace %v: they must agree", f.Grace, p.Grace)
	}
	// Zero fields take the same defaults in New.
	if w := (Config{}).withDefaults(); w.PeerTimeout != p.Timeout || w.Grace != p.Grace {
		t.Errorf("zero PeerTimeout and Grace become %v and %v, want %v and %v", w.PeerTimeout, w.Grace, p.Timeout, p.Grace)
	}
}

// A router has no clock of its own: New refuses a Config without one, by
// the field's name, and changes nothing.
func TestNewRequiresClock(t *testing.T) {
	store, err := bucket.NewStore(bucket.StoreConfig{MaxKeys: 16, Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	pool, err := peer.NewPool(peer.Config{Self: "A", Clock: testkit.NewClock(0)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close(t.Context()) })
	cfg := Config{Self: "A", Store: store, NewRing: newRing, Peers: pool}
	const want = "forward: Config.Clock is required"
	if err := cfg.Validate(); err == nil || err.Error() != want {
		t.Errorf("Validate() = %v, want %q", err, want)
	}
	if r, err := New(cfg); err == nil || err.Error() != want {
		if r != nil {
			r.Close(t.Context())
		}
		t.Errorf("New() = %v, want %q", err, want)
	}
	if cfg.Clock != nil || cfg.Logger != nil {
		t.Errorf("New changed the caller's Config: %+v", cfg)
	}
	cfg.Clock = testkit.NewClock(0)
	r, err := New(cfg)
	if err != nil {
		t.Fatalf("New with a Clock: %v", err)
	}
	if err := r.Close(t.Context()); err != nil {
		t.Errorf("Close: %v", err)
	}
}
