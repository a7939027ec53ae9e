package cluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	gometrics "github.com/hashicorp/go-metrics"
	"github.com/hashicorp/memberlist"

	"github.com/ringlimit/ringlimit/clock"
	"github.com/ringlimit/ringlimit/internal/discard"
)

// ErrClosed is returned by Leave after Close.
var ErrClosed = errors.New("cluster: closed")

// Cluster is this process's membership in a ringlimit cluster: it gossips
// with the other members, detects failures, advertises Config.PeerAddr,
// reports changes to Config.Listener, and carries Config.Messages
// (Broadcast, push/pull state) to and from the other members.
//
// Lifecycle: New starts it (and joins the seeds in the background); Leave
// announces a graceful departure; Close leaves if needed and stops
// everything. In between it keeps re-joining its seeds and the members it
// saw die, so that the two sides of a healed partition become one cluster
// again. A Cluster cannot rejoin after Leave: create a new one.
//
// Concurrency: all methods are safe for concurrent use.
type Cluster struct {
	cfg       Config // with defaults; read-only after New
	log       *slog.Logger
	clock     clock.Clock
	ml        *memberlist.Memberlist
	localAddr string
	mlName    string // this process's memberlist name: Config.Name and an instance tag

	keyring *memberlist.Keyring // nil without Config.Keys; memberlist reads it
	keyMu   sync.Mutex          // serialises keyring changes (keyring.go)

	// Broadcasts (messages.go).
	queue    *memberlist.TransmitLimitedQueue
	seen     *seenSet
	origin   uint64        // random; with seq, identifies our broadcasts
	seq      atomic.Uint64 // last sequence number used
	isClosed atomic.Bool   // memberlist is shut down: Broadcast is a no-op

	leaving atomic.Bool // advertised in our metadata; read by NodeMeta
	joined  atomic.Bool // the first join succeeded (or there were no seeds)
	// joining is true while an attempt at the first join is in flight: the
	// members the seed knows arrive one by one, and the Listener is told
	// them all at once when the attempt returns.
	joining atomic.Bool

	mu      sync.Mutex // guards members; never held while calling out
	members map[string]*record

	kick chan struct{} // capacity 1: "the member list may have changed"

	life      sync.Mutex // serialises Leave and Close; guards left, closed
	left      bool       // Leave was started
	closed    bool       // memberlist is shut down
	closeOnce sync.Once
	closeErr  error

	unroute func()     // stops routing memberlist's metrics to Config.Registerer; nil without it
	mlLog   *logWriter // memberlist's log lines, limited and counted

	stopJoin context.CancelFunc
	joinDone chan struct{}
	// joinNow wakes the join loop before the first join when another
	// member joined this one (capacity 1).
	joinNow    chan struct{}
	stopEvents chan struct{}
	eventsDone chan struct{}
}

// record is what we know about one member.
type record struct {
	m       Member
	tag     string        // instance tag of its memberlist name ("" when none)
	leaving bool          // its metadata announced a graceful leave
	since   clock.Instant // last change of m.State
}

// New validates cfg, binds the gossip listeners, and returns at once: joining
// the seeds happens in the background and is retried every
// cfg.JoinRetryInterval until one seed answers (see Config.Seeds); then the
// seeds and the dead members are re-joined every cfg.RejoinInterval (see
// Config.RejoinInterval). The returned Cluster must be closed with Close.
func New(cfg Config) (*Cluster, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	logger := discard.Logger(cfg.Logger)
	c := &Cluster{
		cfg:        cfg,
		log:        logger,
		clock:      cfg.Clock,
		seen:       newSeenSet(),
		origin:     rand.Uint64(),
		members:    make(map[string]*record),
		kick:       make(chan struct{}, 1),
		joinDone:   make(chan struct{}),
		joinNow:    make(chan struct{}, 1),
		stopEvents: make(chan struct{}),
		eventsDone: make(chan struct{}),
		mlName:     instanceName(cfg.Name, time.Now()),
	}
	c.queue = &memberlist.TransmitLimitedQueue{
		NumNodes:       c.numOnRing,
		RetransmitMult: memberlist.DefaultLANConfig().RetransmitMult,
	}

	if len(cfg.Keys) > 0 {
		kr, err := newKeyring(cfg.Keys)
		if err != nil {
			return nil, fmt.Errorf("cluster: Keys: %w", err)
		}
		c.keyring = kr
	}

	if cfg.Transport != nil {
		ip, port, err := cfg.Transport.FinalAdvertiseAddr("", 0)
		if err != nil {
			return nil, fmt.Errorf("cluster: address of Transport: %w", err)
		}
		c.cfg.BindAddr = net.JoinHostPort(ip.String(), strconv.Itoa(port))
		c.cfg.AdvertiseAddr = ""
	}
	c.mlLog = newLogWriter(c.log, c.suspected, c.clock)
	mc := c.memberlistConfig()
	if cfg.Registerer != nil {
		for _, col := range c.mlLog.collectors() {
			if err := cfg.Registerer.Register(col); err != nil {
				return nil, fmt.Errorf("cluster: memberlist log metrics: %w", err)
			}
		}
		label, unroute, err := newMetricsRoute(cfg.Registerer)
		if err != nil {
			return nil, fmt.Errorf("cluster: memberlist metrics: %w", err)
		}
		c.unroute = unroute
		mc.MetricLabels = []gometrics.Label{label}
	}
	ml, err := memberlist.Create(mc)
	if err != nil {
		if c.unroute != nil {
			c.unroute()
		}
		return nil, fmt.Errorf("cluster: start memberlist on %s: %w", c.cfg.BindAddr, err)
	}
	c.ml = ml
	c.localAddr = ml.LocalNode().Address()

	seeds := c.otherSeeds()
	c.joined.Store(len(seeds) == 0)
	go c.eventLoop()

	ctx, cancel := context.WithCancel(context.Background())
	c.stopJoin = cancel
	go c.joinLoop(ctx, len(seeds) > 0)
	c.log.Info("cluster: started", "name", cfg.Name, "instance", c.mlName, "gossip", c.localAddr, "grpc", cfg.PeerAddr, "seeds", seeds)
	return c, nil
}

func (c *Cluster) memberlistConfig() *memberlist.Config {
	cfg := c.cfg
	mc := memberlist.DefaultLANConfig()
	mc.Name = c.mlName
	ip, port, _ := splitIPPort(cfg.BindAddr) // validated
	mc.BindAddr = ip.String()
	mc.BindPort = port
	mc.AdvertiseAddr = ""
	mc.AdvertisePort = port
	if cfg.AdvertiseAddr != "" {
		aip, aport, _ := splitIPPort(cfg.AdvertiseAddr) // validated
		mc.AdvertiseAddr = aip.String()
		if aport != 0 {
			mc.AdvertisePort = aport
		}
	}
	mc.ProbeInterval = cfg.ProbeInterval
	mc.ProbeTimeout = cfg.ProbeTimeout
	mc.SuspicionMult = cfg.SuspicionMult
	mc.SuspicionMaxTimeoutMult = cfg.SuspicionMaxTimeoutMult
	mc.GossipInterval = cfg.GossipInterval
	mc.GossipToTheDeadTime = cfg.GossipToTheDeadTime
	mc.PushPullInterval = cfg.PushPullInterval
	mc.TCPTimeout = cfg.TCPTimeout
	mc.DeadNodeReclaimTime = cfg.DeadNodeReclaimTime
	if cfg.Transport != nil {
		mc.Transport = cfg.Transport
	}
	mc.Label = cfg.Label
	// Encryption is all or nothing: memberlist's defaults (verify incoming
	// and outgoing) refuse plaintext once a keyring is set.
	mc.Keyring = c.keyring
	mc.GossipVerifyIncoming = c.keyring != nil
	mc.GossipVerifyOutgoing = c.keyring != nil

	d := &delegate{c: c}
	mc.Delegate = d
	mc.Events = d
	mc.Alive = d
	mc.Ping = d
	mc.Logger = newMemberlistLogger(c.mlLog)
	return mc
}

// Members returns every member this member knows, sorted by name: alive and
// suspect ones, and those that died or left within Config.DepartedRetention
// (with their state). This member is included. After Close it keeps
// reporting the last view (this member as left).
func (c *Cluster) Members() []Member {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pruneLocked(c.clock.Now())
	return c.listLocked(func(State) bool { return true })
}

// Alive returns the members that belong on the hash ring (alive and
// suspect), sorted by name. This member is included until it leaves.
func (c *Cluster) Alive() []Member {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.listLocked(State.onRing)
}

func (c *Cluster) listLocked(keep func(State) bool) []Member {
	out := make([]Member, 0, len(c.members))
	for _, r := range c.pickLocked() {
		if keep(r.m.State) {
			out = append(out, r.m)
		}
	}
	slices.SortFunc(out, func(a, b Member) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// pruneLocked forgets members that departed more than DepartedRetention ago,
// and departed instances of a member whose later instance is on the ring
// (nothing stands for them any more, and their address is not re-joined).
// It reports whether it forgot any.
func (c *Cluster) pruneLocked(now clock.Instant) bool {
	pruned := false
	pick := c.pickLocked()
	for key, r := range c.members {
		if r.m.State.onRing() {
			continue
		}
		if p := pick[r.m.Name]; now.Sub(r.since) > c.cfg.DepartedRetention || (p != r && p.m.State.onRing()) {
			delete(c.members, key)
			pruned = true
		}
	}
	return pruned
}

// Joined reports whether this member has joined a cluster: one of its seeds
// answered, another member joined it first, every seed is this member, or
// it has no seeds (it starts a cluster). It stays true after Leave.
func (c *Cluster) Joined() bool { return c.joined.Load() }

// LocalAddr returns the gossip address other members reach this one at
// (host:port, with the real port when BindAddr asked for port 0). Seeds of
// other members can point here.
func (c *Cluster) LocalAddr() string { return c.localAddr }

// Close leaves the cluster if Leave was not called (bounded by ctx), stops
// the join and re-join loop, shuts memberlist down and stops the Listener
// goroutine. It waits for its goroutines until ctx is done; it returns an
// error when the leave was not confirmed or a goroutine did not stop in time
// (a join attempt or re-join round in progress can take up to
// Config.TCPTimeout, a listener call as long as the listener takes). Close is idempotent: later calls return the first
// call's result.
func (c *Cluster) Close(ctx context.Context) error {
	c.closeOnce.Do(func() { c.closeErr = c.close(ctx) })
	return c.closeErr
}

func (c *Cluster) close(ctx context.Context) error {
	var errs []error
	c.stopJoin()
	if err := waitDone(ctx, c.joinDone); err != nil {
		errs = append(errs, fmt.Errorf("cluster: join attempt still running: %w", err))
	}

	c.life.Lock()
	if err := c.leaveLocked(ctx); err != nil {
		errs = append(errs, err)
	}
	if err := c.ml.Shutdown(); err != nil {
		errs = append(errs, fmt.Errorf("cluster: shut down memberlist: %w", err))
	}
	c.closed = true
	c.isClosed.Store(true)
	c.life.Unlock()
	if c.unroute != nil {
		c.unroute()
	}

	close(c.stopEvents)
	if err := waitDone(ctx, c.eventsDone); err != nil {
		errs = append(errs, fmt.Errorf("cluster: listener still running: %w", err))
	}
	c.log.Info("cluster: closed", "name", c.cfg.Name)
	return errors.Join(errs...)
}

func waitDone(ctx context.Context, done <-chan struct{}) error {
	select {
	case <-done:
		return nil
	default:
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
