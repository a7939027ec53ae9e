package peer

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/clock"
	peerv1 "github.com/ringlimit/ringlimit/proto/peerv1"
)

// Handler is what the peer service asks of the node it serves, by concern:
// deciding the batches other nodes forward (Decider) and keeping the key
// states they push, replicate and fetch (StateStore). Which callers it
// serves is ServerConfig.Known's and Verify's, and what it reports of the
// node ServerConfig.Stats' and Report's. Its methods may be called
// concurrently.
type Handler interface {
	Decider
	StateStore
}

// Decider decides the batches of checks other nodes forward.
type Decider interface {
	// Decide applies one batch of checks a peer sent, in order, on this
	// node's store, and writes one Answer per request into out; version is
	// the version of the sender's ring when it sent the batch. A request
	// this node's ring gives to another member, and that is not Final,
	// should be answered with Redirect set to that member and nothing
	// spent; one whose new key the store has no room for, with Full set
	// and nothing spent (the sender decides it in its failure mode, which
	// a Request does not carry). Every request is valid (key, limit and cost were checked).
	// Keys and from point into a buffer that is reused after Decide
	// returns.
	Decide(ctx context.Context, from string, version uint64, reqs []Request, out []Answer)
	// MayWait reports whether deciding a batch from the named peer may
	// block (for state from a previous owner, or for the sender to join
	// this node's ring): such a batch is decided on its own goroutine so
	// that it does not hold up the batches behind it on the stream.
	MayWait(from string) bool
}

// StateStore keeps the key states other nodes hand off, replicate to this
// node and fetch from it.
type StateStore interface {
	// Merge folds pushed bucket states into the store and returns how many
	// it took.
	Merge(from string, states []State) int
	// Replicate stores the states the owner from replicates to this node
	// (its successor). It returns how many it took, or an error when it
	// refuses the whole batch (from is not a current member). Every state
	// is valid (key and limit were checked). The keys point into a buffer
	// that is reused after Replicate returns: copy a key to keep it (from
	// may be kept).
	Replicate(from string, states []State) (int, error)
	// Lookup returns key's state, for the node from (a new owner) that
	// asks; l is the limit it names (a concurrency limit asks for the
	// key's lease set), nil when it named none that parses.
	Lookup(from, key string, l *bucket.Limit) (State, bool)
	// ResetFrom drops this node's copies of key (replica, stand-in copy,
	// hot-key lease) that from, the key's owner, reset at resetAt (its
	// clock), and records the tombstone; resetAt 0 asks this node, the
	// key's owner on from's ring, to reset the key itself and tell the
	// other members. Key and limit were checked.
	ResetFrom(ctx context.Context, from, key string, l bucket.Limit, resetAt int64) ResetAnswer
}

// StatsSource gives the key count and ring version of the Stats this node
// answers with (ServerConfig.Stats). Its methods may be called
// concurrently.
type StatsSource interface {
	// Keys returns how many keys this node holds.
	Keys() int64
	// RingVersion returns the version of this node's ring.
	RingVersion() uint64
}

// Server is the peer service: it decides the batches other nodes forward
// and takes their handoffs. It is safe for concurrent use.
type Server struct {
	peerv1.UnimplementedPeerServer
	self      string
	h         Handler
	clock     clock.Clock // ServerConfig.Clock
	m         *Metrics
	draining  chan struct{} // closed by Drain
	drainOnce sync.Once
	known     func(name string) bool // ServerConfig.Known; nil: no authentication
	tracer    trace.Tracer           // from ServerConfig.TracerProvider; nil: no spans
	report    func(*Stats)           // ServerConfig.Report; nil: Stats carries the Stats source's part only
	stats     StatsSource            // ServerConfig.Stats; nil: no keys, ring version 0
	settler   Settler                // ServerConfig.Settler; nil: Settle is unimplemented
	leaser    Leaser                 // ServerConfig.Leaser; nil: Acquire, Renew, Release are unimplemented
	reporter  Reporter               // ServerConfig.Reporter; nil: PeerReport is unimplemented
	rev       *reverses              // ServerConfig.Pool's reverse links; nil: none
	poolCfg   *Config                // ServerConfig.Pool's configuration; nil with rev
	// peerChecks counts the checks of the batches decided (Stats.PeerChecks).
	peerChecks atomic.Uint64

	// certs, ServerConfig.Verify, are the CAs client certificates are verified
	// against again after a change (recheck.go); nil: at the handshake
	// only. checked are those Recheck adopted last (nil: none yet).
	certs   Certs
	checked atomic.Pointer[checkedCAs]
	connMu  sync.Mutex                // guards conns
	conns   map[*guardedConn]struct{} // the connections served, with Credentials

	// What an interceptor is handed with a Replicate call, made once.
	replicateInfo grpc.UnaryServerInfo
	replicateNext grpc.UnaryHandler
}

// ServerConfig configures a Server: everything it needs is given here, at
// construction.
type ServerConfig struct {
	// Self is this node's name, given with every answer. Required.
	Self string
	// Handler decides the batches and takes the handoffs, replicas and
	// fetches. Required.
	Handler Handler
	// Stats gives the key count and ring version of every Stats answer.
	// Nil: both are 0.
	Stats StatsSource
	// Clock times the wait for gossip to tell this node of a member that
	// called (AuthWait, with Known). Required: a node passes its one clock
	// to every package.
	Clock clock.Clock
	// Metrics receives the server's counters; a node gives its Pool and
	// its Server the same Metrics. Nil counts nothing.
	Metrics *Metrics
	// Known, when set, makes the server serve only calls that came over
	// TLS with a verified client certificate (serve it with credentials
	// from certfile.Set.ServerConfig(true)) whose names include the sender
	// the call names (a batch's, a handoff's, a replica's or a fetch's
	// from), and only when Known reports that sender a member: one this
	// node's gossip knows, in any state. A sender gossip has not told this
	// node of is waited for, up to AuthWait. Known is called concurrently.
	// Nil: no authentication.
	Known func(name string) bool
	// Verify, when set (with Known), makes the server check client
	// certificates against the CAs it holds when Recheck is called, not
	// only at the handshake (see Recheck, Sweep and Credentials). Nil: at
	// the handshake only.
	Verify Certs
	// TracerProvider, when set, makes the server decide each check that
	// carries a trace context inside a span "ringlimit.peer.check" of it,
	// child of that context. Nil: carried trace contexts are read and
	// ignored.
	TracerProvider trace.TracerProvider
	// Report, when set, makes every Stats answer carry what it fills in:
	// the counts of the API, the versions and the uptime, which the
	// Handler does not know. Name, Keys, RingVersion and PeerChecks are
	// filled before it is called. It is called concurrently and must not
	// block. Nil: Stats carries the Stats source's part only.
	Report func(*Stats)
	// Settler settles the reservations other nodes send (settle.go). Nil:
	// Settle answers Unimplemented.
	Settler Settler
	// Leaser decides the concurrency operations other nodes send
	// (concurrency.go). Nil: they answer Unimplemented.
	Leaser Leaser
	// Reporter observes reports other nodes send (report.go). Nil: PeerReport answers Unimplemented.
	Reporter Reporter
	// Pool, when set, is this node's Pool: the Server decides the reverse
	// batches that come in on the Pool's streams, and the Pool sends its
	// batches for a peer on the stream that peer opened here when the
	// peer asks for them (reverse.go). A Pool serves one Server. Nil: every
	// batch goes on the sender's own stream.
	Pool *Pool
}

// NewServer returns the peer service cfg describes.
func NewServer(cfg ServerConfig) (*Server, error) {
	switch {
	case cfg.Self == "":
		return nil, errors.New("peer: ServerConfig.Self must name this node")
	case cfg.Handler == nil:
		return nil, errors.New("peer: ServerConfig.Handler is required")
	case cfg.Clock == nil:
		return nil, errors.New("peer: ServerConfig.Clock is required")
	case cfg.Verify != nil && cfg.Known == nil:
		return nil, errors.New("peer: ServerConfig.Verify needs Known (authentication)")
	}
	m := cfg.Metrics
	if m == nil {
		m = newMetrics()
	}
	s := &Server{self: cfg.Self, h: cfg.Handler, clock: cfg.Clock, m: m, draining: make(chan struct{}),
		known: cfg.Known, certs: cfg.Verify, report: cfg.Report, stats: cfg.Stats, settler: cfg.Settler,
		leaser: cfg.Leaser, reporter: cfg.Reporter}
	if cfg.Pool != nil {
		s.rev, s.poolCfg = &cfg.Pool.rev, &cfg.Pool.cfg
		s.rev.server.Store(s)
	}
	if cfg.TracerProvider != nil {
		s.tracer = cfg.TracerProvider.Tracer("github.com/ringlimit/ringlimit/peer")
	}
	s.replicateInfo = grpc.UnaryServerInfo{Server: s, FullMethod: peerv1.Peer_Replicate_FullMethodName}
	s.replicateNext = s.replicateAny
	return s, nil
}

// Register registers the service on r. Serve it on a listener only other
// nodes reach. Replicate is decoded by hand (replicate.go) for calls on
// content-subtype "ringlimit-peer", as nodes make them; a generated client
// on the default content-subtype takes the generated path. Its requests are
// reused after the call: a unary interceptor on r must not keep one.
func (s *Server) Register(r grpc.ServiceRegistrar) { r.RegisterService(serviceDesc(), s) }

// Drain asks every peer with a Check stream open to this node to end it:
// the peer sends nothing more on it, the batches in flight are answered,
// and the peer closes it, so that a graceful stop of the gRPC server need
// not wait for streams that would otherwise stay open. Safe to call more
// than once.
func (s *Server) Drain() { s.drainOnce.Do(func() { close(s.draining) }) }

// statesFromProto returns the valid states of bs; invalid ones (bad key or
// limit, negative used) are left out.
func statesFromProto(bs []*peerv1.BucketState) []State {
	states := make([]State, 0, len(bs))
	for _, b := range bs {
		l, err := limitFromProto(b.GetLimit())
		if err != nil || bucket.CheckKey(b.GetKey()) != nil || b.GetUsed() < 0 {
			continue
		}
		states = append(states, State{Key: b.GetKey(), Limit: l, Used: b.GetUsed(), Reservations: reservationsFromProto(b.GetReservations()), ResetAt: b.GetResetAt(),
			LeaseSet: b.GetLeaseSet(), Leases: leasesFromProto(b.GetLeases()), RingVersion: b.GetRingVersion(), Adaptive: adaptiveStateFromProto(b.GetAdaptive()),
			Window: b.GetWindow(), Full: b.GetFull()})
	}
	return states
}

// Handoff merges pushed bucket state. A call with more than
// MaxHandoffStates states is refused whole (InvalidArgument).
func (s *Server) Handoff(ctx context.Context, req *peerv1.HandoffRequest) (*peerv1.HandoffResponse, error) {
	if n := len(req.GetBuckets()); n > MaxHandoffStates {
		s.m.refused.Inc()
		return nil, status.Errorf(codes.InvalidArgument, "peer: handoff of %d states, the most is %d", n, MaxHandoffStates)
	}
	if err := s.authorize(ctx, req.GetFrom()); err != nil {
		return nil, err
	}
	states := statesFromProto(req.GetBuckets())
	s.m.invalidStates.Add(float64(len(req.GetBuckets()) - len(states)))
	merged := s.h.Merge(req.GetFrom(), states)
	s.m.handoffReceived.Add(float64(merged))
	return &peerv1.HandoffResponse{Merged: int64(merged)}, nil
}

// Replicate stores the states an owner keeps on this node, its successor.
// A call with more than MaxReplicateStates states is refused whole
// (InvalidArgument); a refusal by the handler answers FailedPrecondition.
// Register serves
// calls read by hand without it (Server.replicate); it takes those of
// generated clients on content-subtype "proto".
func (s *Server) Replicate(ctx context.Context, req *peerv1.ReplicateRequest) (*peerv1.ReplicateResponse, error) {
	if err := s.checkReplicate(len(req.GetBuckets())); err != nil {
		return nil, err
	}
	if err := s.authorize(ctx, req.GetFrom()); err != nil {
		return nil, err
	}
	states := statesFromProto(req.GetBuckets())
	s.m.invalidStates.Add(float64(len(req.GetBuckets()) - len(states)))
	n, err := s.h.Replicate(req.GetFrom(), states)
	if err != nil {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	s.m.replicas.Add(float64(n))
	return &peerv1.ReplicateResponse{Accepted: int64(n)}, nil
}

// checkReplicate refuses a Replicate call of n states when n is over
// MaxReplicateStates.
func (s *Server) checkReplicate(n int) error {
	if n > MaxReplicateStates {
		s.m.refused.Inc()
		return status.Errorf(codes.InvalidArgument, "peer: replicate of %d states, the most is %d", n, MaxReplicateStates)
	}
	return nil
}
