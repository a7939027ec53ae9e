package forward

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/clock"
	"github.com/ringlimit/ringlimit/internal/discard"
	"github.com/ringlimit/ringlimit/internal/peerdefault"
)

// Config configures a Router. Zero durations and counts mean the defaults
// of DefaultConfig.
type Config struct {
	// Self is this node's name on the ring. Required.
	Self string
	// SelfAddr is this node's address for clients, reported with its
	// decisions so that clients can send a key's checks straight to its
	// owner. Optional.
	SelfAddr string
	// Store holds the buckets of the keys this node owns. Required. Unless
	// replication is off, New turns on its tracking of changed keys
	// (bucket.Store.SetTrack), which replication reads.
	Store *bucket.Store
	// NewRing builds the ring over a member list. Required (cmd/node
	// passes the ring package's constructor).
	NewRing func(members []string) (Owners, error)
	// Peers reaches the other members. Required. The Router does not close
	// it: its owner does, after the Router.
	Peers Peers
	// Clock gives the time of each check and drives every wait. Required:
	// a node passes its one clock to every package.
	Clock clock.Clock
	// PeerTimeout bounds how long a check waits for its owner's state or
	// a new member, in the handoff's fetch (a quarter of it) and while a
	// node that just joined waits for its ring (half of it). Default 500ms
	// (peerdefault.Timeout, the peer transport's default Timeout too).
	PeerTimeout time.Duration
	// Grace is how long after a ring change an owner that has no state for a
	// key asks the key's previous owner first, and how long a node keeps the
	// state of a key it has handed off (answering stale peers from it)
	// before deleting it. Default 3s (peerdefault.Grace, the peer
	// transport's default Grace too).
	Grace time.Duration
	// LocalKeys bounds the store of degraded-mode (Local) buckets and of the
	// pre-limiter's windows. Default 65536.
	LocalKeys int
	// Lease configures token leases.
	Lease LeaseConfig
	// Replication configures the copies of each key on its successors.
	Replication ReplicationConfig
	// ClusterSize, when not 0, is the number of members the quorum is
	// counted against: a node that sees fewer than a majority of it up does
	// not take over the keys of members it cannot see. 0 counts the members
	// it last knew (up and down; members that left are not counted).
	ClusterSize int
	// Joining is set on a node that joins an existing cluster (it was
	// given seeds): until the first SetMembers it knows no owner, so it is
	// in a minority with no ring and answers every check in its failure
	// mode; `local` gives it its share of ClusterSize members, or half of
	// the limit when ClusterSize is 0 (it has at least one other member).
	// False: until the first SetMembers this node owns every key.
	Joining bool
	// Settler sends settles to the owners of their keys (peer.Pool). Nil:
	// a settle of a key another member owns fails as unavailable.
	Settler Settler
	// MaxReservations bounds the reservation records this node holds (its
	// own keys' and its replicas'; in bytes too: bucket.MaxReservationBytes).
	// A reserving check its owner has no
	// room to record is answered as a new key with no room: in its failure
	// mode, with no reservation. Default bucket.DefaultMaxReservations
	// (65,536).
	MaxReservations int
	// Leaser sends concurrency acquires, renews and releases to the owners
	// of their keys (peer.Pool). Nil: those of keys another member owns
	// are answered as for an unreachable owner.
	Leaser LeaseSender
	// MaxLeases bounds the concurrency leases this node holds (its own
	// keys' and its replicas'; in bytes too: bucket.MaxLeaseBytes). An
	// acquire its owner has no room for is answered as for an unreachable
	// owner, in its failure mode. Default bucket.DefaultMaxLeases (65,536).
	MaxLeases int
	// OnRelease, when set, is told of every release the owner of a key
	// applies, with the outcome and latency its holder reported: the input
	// of an adaptive limit. It is called on the releasing goroutine after
	// the answer is decided and must not block.
	OnRelease func(key string, l bucket.Limit, o Outcome, latency time.Duration)
	// Logger receives membership and handoff events. Nil discards them.
	Logger *slog.Logger
	// Registerer receives the router's metrics. Nil registers none.
	Registerer prometheus.Registerer
	// TracerProvider, when set, makes a span "ringlimit.forward" (see
	// trace.go) around each wait for an owner's answer whose context holds
	// a span. Nil: no spans, and nothing read from the context.
	TracerProvider trace.TracerProvider
}

// LeaseConfig configures token leases (see lease.go).
type LeaseConfig struct {
	// TTL is how long a lease lasts. Default 100ms.
	TTL time.Duration
	// Max bounds the tokens of one lease. Default 1000.
	Max int64
}

// ReplicationConfig configures how an owner keeps its keys' state on the
// members that take them over when it dies (see replicate.go).
type ReplicationConfig struct {
	// Factor is how many successors hold a copy of each key. Default 1.
	Factor int
	// Off turns replication off (Factor is then ignored).
	Off bool
	// Interval bounds how long a change waits before it is sent. Default
	// 20ms.
	Interval time.Duration
	// MaxPending sends the changes at once when this many keys have
	// changed, before Interval ends. Default 256.
	MaxPending int
	// MaxLoss bounds, in tokens, what a crash of the owner can lose of one
	// key: at no instant has a key admitted more than MaxLoss tokens that
	// its successors have not acknowledged, whatever the check rate. A
	// check that brings a key's unacknowledged tokens above MaxLoss/2
	// starts a round at once (and is answered at once); one that brings
	// them above MaxLoss is answered when a round begun after it is
	// acknowledged. Default 10; negative: no bound in tokens (Interval and
	// MaxPending only). A check with Sync always waits, whatever MaxLoss.
	MaxLoss int64
	// MaxMemory bounds, in bytes, the states this node keeps for each
	// other member (replicas of its keys, what it shares with it after
	// fetches and pushes), apart from the node's own Store: see
	// bucket.StoreConfig.MaxMemory. Default: the Store's MaxMemory, so
	// that a successor can hold its owner's whole store.
	MaxMemory int64
}

// DefaultConfig returns the defaults; Self, Store, NewRing, Peers and
// Clock are left for the caller.
func DefaultConfig() Config {
	return Config{PeerTimeout: peerdefault.Timeout, Grace: peerdefault.Grace, LocalKeys: 1 << 16,
		Lease:       LeaseConfig{TTL: 100 * time.Millisecond, Max: 1000},
		Replication: ReplicationConfig{Factor: 1, Interval: 20 * time.Millisecond, MaxPending: 256, MaxLoss: 10}}
}

// Validate reports the first missing or invalid field by name. It changes
// nothing: New fills the defaults in a copy.
func (c *Config) Validate() error {
	switch {
	case c.Self == "":
		return errors.New("forward: Self must name this node")
	case c.Store == nil:
		return errors.New("forward: Store is required")
	case c.NewRing == nil:
		return errors.New("forward: NewRing is required")
	case c.Peers == nil:
		return errors.New("forward: Peers is required")
	case c.Clock == nil:
		return errors.New("forward: Config.Clock is required")
	}
	for _, f := range []struct {
		name string
		bad  bool
	}{
		{"PeerTimeout", c.PeerTimeout < 0},
		{"Grace", c.Grace < 0},
		{"LocalKeys", c.LocalKeys < 0},
		{"Lease.TTL", c.Lease.TTL < 0},
		{"Lease.Max", c.Lease.Max < 0},
		{"Replication.Factor", c.Replication.Factor < 0},
		{"Replication.Interval", c.Replication.Interval < 0},
		{"Replication.MaxPending", c.Replication.MaxPending < 0},
		{"Replication.MaxMemory", c.Replication.MaxMemory < 0},
		{"ClusterSize", c.ClusterSize < 0},
		{"MaxLeases", c.MaxLeases < 0},
	} {
		if f.bad {
			return fmt.Errorf("forward: %s must not be negative", f.name)
		}
	}
	return nil
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.PeerTimeout == 0 {
		c.PeerTimeout = d.PeerTimeout
	}
	if c.Grace == 0 {
		c.Grace = d.Grace
	}
	if c.LocalKeys == 0 {
		c.LocalKeys = d.LocalKeys
	}
	if c.Lease.TTL == 0 {
		c.Lease.TTL = d.Lease.TTL
	}
	if c.Lease.Max == 0 {
		c.Lease.Max = d.Lease.Max
	}
	if c.Replication.Factor == 0 {
		c.Replication.Factor = d.Replication.Factor
	}
	if c.Replication.Interval == 0 {
		c.Replication.Interval = d.Replication.Interval
	}
	if c.Replication.MaxPending == 0 {
		c.Replication.MaxPending = d.Replication.MaxPending
	}
	if c.Replication.MaxLoss == 0 {
		c.Replication.MaxLoss = d.Replication.MaxLoss
	}
	c.Logger = discard.Logger(c.Logger)
	return c
}
