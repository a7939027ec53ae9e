package peer

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/grpc"

	"github.com/ringlimit/ringlimit/clock"
	"github.com/ringlimit/ringlimit/internal/batcher"
	"github.com/ringlimit/ringlimit/internal/discard"
	"github.com/ringlimit/ringlimit/internal/peerdefault"
)

// StreamWindow and ConnWindow are the HTTP/2 flow-control windows of the
// connections between nodes, per stream and per connection, in bytes. Fixed
// windows turn off grpc-go's bandwidth-delay estimation, which sends a ping
// (and gets an ack) on every round trip of a busy connection: frames that
// cost about 6% of the machine's CPU per check with one unary call per check
// on 3 nodes. A node serves its public gRPC API with the same windows. The
// stream window holds the largest batch: 512 checks, about 40 KB with short
// keys and 550 KB with keys of the longest (1,024 bytes).
const (
	StreamWindow = 1 << 20
	ConnWindow   = 2 << 20
)

// Config configures the client side of the peer transport: a Pool and the
// connections it keeps to the other nodes. Zero values mean the defaults.
type Config struct {
	// Self is this node's name, sent with every batch so that the receiver
	// knows who asks. Required.
	Self string
	// Timeout is the deadline of every peer call and how long a batch may
	// wait for its answer; a stream whose oldest batch waited this long is
	// broken and its batches fail. Default 500ms (peerdefault.Timeout, the
	// router's default PeerTimeout too).
	Timeout time.Duration
	// Batch sizes the batcher in front of each peer: MaxBatch checks per
	// batch (default 512, at most MaxCheckBatch) and MaxInFlight batches
	// in flight per peer (default 1: one batch in flight per peer made the
	// batches about half as large again as two did, 3.1 against 2.2 checks
	// on 10,000 uniform keys through every node, for less CPU per check).
	// Queue is how many calls may wait for a slot (default 4 × MaxBatch ×
	// MaxInFlight, 2,048 with the defaults: four full batches' worth when
	// every call is a single check; at least 1,024); a call that finds it full fails at once with ErrBusy, so a
	// peer that stopped answering holds at most Queue callers until
	// Timeout. Yields is how many times the batcher of a busy peer lets
	// the goroutines ready to run queue their checks before it sends a
	// batch (default 3; negative: none): 3.7 to 3.8 checks a batch instead
	// of 3.1 in the same workload. NoWait is always set.
	Batch batcher.Config
	// Grace is how long a peer that left the member list stays dialable
	// (a new owner may still fetch state from it). Default 3s
	// (peerdefault.Grace, the router's default Grace too).
	Grace time.Duration
	// TLS, when set, is this node's certificate and the CAs it trusts: every
	// connection presents the certificate and accepts only a server whose
	// certificate chains to the CAs and names the member dialled (mutual
	// TLS; the other side's Server must authenticate, with
	// ServerConfig.Known). Nil: connections in clear.
	TLS Certs
	// DialOptions are added to every peer connection after the defaults
	// (transport credentials from TLS, fixed flow-control windows,
	// keepalive pings every KeepaliveTime, MaxMessageBytes received, and
	// a dialer of its own: TCP straight to the member's address, whatever
	// HTTPS_PROXY or HTTP_PROXY say, since members reach each other on
	// the addresses they gossip). A grpc.WithContextDialer here replaces
	// that dialer, e.g. to reach members through a proxy.
	DialOptions []grpc.DialOption
	// Clock times deadlines and retirement. Required: a node passes its one
	// clock to every package.
	Clock clock.Clock
	// Logger receives connection events. Nil discards them.
	Logger *slog.Logger
	// Metrics receives the transport's counters. Nil counts nothing.
	Metrics *Metrics
	// PropagateTrace sends with each check the W3C trace context of the
	// context it was sent with, when that holds a sampled span (25 bytes
	// more per check), for the owner's span (ServerConfig.TracerProvider). False: no check
	// carries one, and the bytes sent are those of a node without tracing.
	PropagateTrace bool
}

// minQueue is the least default Queue, for a small MaxBatch.
const minQueue = 1024

// DefaultConfig returns a Config with every default filled in but Self and
// Clock.
func DefaultConfig() Config {
	b := batcher.DefaultConfig()
	b.Yields = 3
	return Config{Timeout: peerdefault.Timeout, Batch: b, Grace: peerdefault.Grace}
}

// Validate reports the first bad field by name. It changes nothing.
func (c *Config) Validate() error {
	switch {
	case c.Self == "":
		return errors.New("peer: Self must name this node")
	case c.Timeout < 0:
		return errors.New("peer: Timeout must not be negative")
	case c.Grace < 0:
		return errors.New("peer: Grace must not be negative")
	case c.Clock == nil:
		return errors.New("peer: Config.Clock is required")
	case c.Batch.MaxBatch > MaxCheckBatch:
		return fmt.Errorf("peer: Batch.MaxBatch must be at most %d (MaxCheckBatch), got %d", MaxCheckBatch, c.Batch.MaxBatch)
	}
	b := c.Batch
	b.Yields = max(b.Yields, 0) // negative: none, which the batcher spells 0
	return b.Validate()
}

// withDefaults returns c with zero fields set to their defaults.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Timeout == 0 {
		c.Timeout = d.Timeout
	}
	if c.Batch.MaxBatch == 0 {
		c.Batch.MaxBatch = d.Batch.MaxBatch
	}
	if c.Batch.MaxInFlight == 0 {
		c.Batch.MaxInFlight = d.Batch.MaxInFlight
	}
	if c.Batch.Queue == 0 {
		c.Batch.Queue = max(4*c.Batch.MaxBatch*c.Batch.MaxInFlight, minQueue)
	}
	switch {
	case c.Batch.Yields == 0:
		c.Batch.Yields = d.Batch.Yields
	case c.Batch.Yields < 0:
		c.Batch.Yields = 0
	}
	c.Batch.NoWait = true
	if c.Grace == 0 {
		c.Grace = d.Grace
	}
	c.Logger = discard.Logger(c.Logger)
	if c.Metrics == nil {
		c.Metrics = newMetrics()
	}
	return c
}
