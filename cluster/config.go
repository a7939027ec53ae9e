package cluster

import (
	"context"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringlimit/ringlimit/clock"
)

// Config configures one member of the cluster. Build it from DefaultLANConfig
// or DefaultLocalConfig and set Name, BindAddr, PeerAddr and Seeds; New
// validates it (see Validate). New copies the Config: changing it afterwards
// has no effect.
//
// Zero durations and multipliers mean "the DefaultLANConfig value", so a
// Config that only sets the required fields gets memberlist's conservative LAN
// timings. Negative values are errors.
//
// # Failure detection and its trade-off
//
// memberlist (SWIM) detects a crashed member in three steps: some survivor
// probes it (each member probes one other member per ProbeInterval, round
// robin), the probe fails (no direct ack within ProbeTimeout, no indirect ack
// and no TCP answer before the end of the ProbeInterval), the member is then
// suspect for
//
//	SuspicionTimeout = SuspicionMult × max(1, log10(N)) × ProbeInterval
//
// (N = members known, dead ones included until they are forgotten) and then
// declared dead, which gossip spreads within a few GossipIntervals. When N ≥
// SuspicionMult, memberlist expects SuspicionMult-2 other members to confirm
// the suspicion; without those confirmations the timeout starts at
// SuspicionMaxTimeoutMult × SuspicionTimeout and only shrinks to
// SuspicionTimeout as confirmations arrive. So, roughly:
//
//	detection ≈ (wait for a probe: up to a few ProbeIntervals) + ProbeInterval
//	            + SuspicionTimeout (…× SuspicionMaxTimeoutMult without confirmations)
//	            + a few GossipIntervals
//
// Shorter timings detect a crash sooner, which shortens the window in which
// keys are routed to a dead owner, but they also raise the rate of false
// suspicion: a member that stalls for longer than the suspicion timeout (GC
// pause, CPU starvation, a saturated network, a laptop going to sleep) is
// declared dead, its keys move, and it must refute and rejoin, which moves
// them back (each move resets the moved buckets to full). Faster timings also
// cost more probe and gossip traffic. Because the suspicion timeout grows
// with log10(N), a large cluster detects more slowly than a small one with the
// same settings.
//
// Every Config keeps memberlist's Lifeguard extensions, which make such false
// suspicion rarer without slowing the detection of a real crash: a member
// whose own probes fail or go unanswered (it is the slow one) probes less
// often, up to 8 × ProbeInterval (local health awareness); the suspect
// message rides the next probe, so a suspected member that runs again
// refutes at once; and the suspicion timeout shortens as confirmations
// arrive. What none of them covers is a member that cannot run at all for
// longer than probe timeout + suspicion timeout: choose the timings for the
// longest stall the members' machines may see (members that share one
// process with a heavy load, as in-process tests do, need LAN timings).
type Config struct {
	// Name identifies this member and must be unique in the cluster.
	// Required. A member restarted with the same Name takes its old place
	// at once, from the same gossip address or a new one: each process
	// gossips under Name and an instance tag (Name@<16 hex digits>, shown
	// in memberlist's log lines), the later instance stands for the name,
	// and the earlier one is declared dead by the usual probes. Two live
	// processes with one Name are a misconfiguration (logged at error
	// level); the later one stands for it.
	Name string

	// BindAddr is the host:port that gossip listens on, for both TCP and UDP
	// (the same port for both). The host must be an IP literal ("0.0.0.0" for
	// every interface). Port 0 picks a free port; LocalAddr reports it.
	// Required, unless Transport is set (then it is ignored).
	BindAddr string

	// AdvertiseAddr is the host:port other members use to reach this one,
	// when it differs from BindAddr (NAT, containers). The host must be an IP
	// literal; port 0 means the bound port. Empty: derived from BindAddr (for
	// 0.0.0.0, memberlist picks a private address of this machine). With port
	// 0 in BindAddr, the advertised port is always the picked port
	// (memberlist overrides it).
	AdvertiseAddr string

	// PeerAddr is the host:port where this member serves the peer gRPC API.
	// It is advertised to the other members in the gossip metadata (at most
	// MaxAddrLen bytes), so it must be dialable by them: a concrete host
	// and a non-zero port, not 0.0.0.0. Required.
	PeerAddr string

	// APIAddr is the host:port of this member's public gRPC API, where
	// clients send checks. It is advertised beside PeerAddr, for the
	// members' status pages and for clients that route by owner. Optional;
	// when set, the same rules as PeerAddr apply.
	APIAddr string

	// HTTPAddr is the host:port of this member's public HTTP API,
	// advertised beside APIAddr under the same rules. Optional.
	HTTPAddr string

	// Seeds are host:port gossip addresses of members to join ("--join"),
	// or DNS SRV names (_service._proto.name, no port: each target's
	// addresses with the target's port, e.g. a Kubernetes headless
	// Service's _gossip._tcp.ringlimit-headless.default.svc.cluster.local).
	// Empty for the first member. Names are resolved at every attempt
	// (and every re-join round, see RejoinInterval) to all their addresses,
	// each of which is contacted, so members that appear behind a name
	// later are found. This member's own address is ignored if listed.
	Seeds []string

	// JoinRetryInterval is the pause between two attempts to join when no
	// seed could be reached. New never fails or blocks because of
	// unreachable seeds: it keeps retrying in the background, logging at
	// warn level, until one seed answers or Close is called. Zero: 1s.
	JoinRetryInterval time.Duration

	// RejoinInterval is the pause between two re-join rounds, which start
	// once the first join succeeded (at once for a member without seeds)
	// and go on until Leave or Close. memberlist stops talking to members
	// it declared dead, so without these rounds the two sides of a healed
	// partition would never meet again. Each round contacts the seeds and
	// the members declared dead (not left) within DepartedRetention,
	// except those currently alive or suspect; a healthy cluster whose
	// seeds are all alive makes no call. A contacted member that was
	// declared dead learns it, refutes, and is alive again on both sides
	// within a round or two. Lower heals sooner and costs a TCP connection
	// per unreachable target per round; failures are logged at debug
	// level. Zero: 2s (DefaultLocalConfig: 1s).
	RejoinInterval time.Duration

	// ProbeInterval is the time between two failure-detection probes sent by
	// this member (to one other member each). Lower detects crashes sooner
	// and costs more traffic. Zero: 1s (LAN).
	ProbeInterval time.Duration

	// ProbeTimeout is how long a direct probe waits for an ack before asking
	// other members to probe indirectly. Set it around the 99th percentile
	// of the round-trip time; must be below ProbeInterval. Zero: 500ms (LAN).
	ProbeTimeout time.Duration

	// SuspicionMult scales how long a member stays suspect before it is
	// declared dead: SuspicionMult × max(1, log10(N)) × ProbeInterval. Higher
	// gives a slow member more time to refute, and delays the detection of a
	// real crash. Zero: 4 (LAN).
	SuspicionMult int

	// SuspicionMaxTimeoutMult bounds the suspicion timeout when the expected
	// confirmations from other members do not arrive (a member with network
	// trouble of its own, or a cluster where most members are gone):
	// SuspicionMaxTimeoutMult × the suspicion timeout. Zero: 6 (LAN).
	SuspicionMaxTimeoutMult int

	// GossipInterval is the time between two rounds of gossip (membership
	// news sent to 3 random members). Lower spreads joins, leaves and deaths
	// faster and costs more packets. Zero: 200ms (LAN).
	GossipInterval time.Duration

	// GossipToTheDeadTime is how long after a member is declared dead gossip
	// is still sent to it, so that a member wrongly declared dead hears it
	// and refutes; it is also how long memberlist remembers the dead member
	// before forgetting its name. Zero: 30s (LAN).
	GossipToTheDeadTime time.Duration

	// PushPullInterval is the time between two full state exchanges with a
	// random member over TCP (anti-entropy: it repairs whatever gossip missed
	// and lets a member wrongly declared dead learn it and refute). Lower
	// heals faster and costs more. Zero: 30s (LAN).
	PushPullInterval time.Duration

	// TCPTimeout bounds each TCP operation: dialling a seed, a full state
	// exchange. One join attempt to an address that drops packets takes up
	// to this long, and Close may wait for it. Zero: 10s (LAN).
	TCPTimeout time.Duration

	// DeadNodeReclaimTime is memberlist's setting of that name: how long
	// after an instance died its memberlist name may be taken from another
	// address. Restarts do not need it (each process gossips under a new
	// instance name, see Name); it only matters to a process that rejoins
	// from a new address without restarting. Zero: never, until memberlist
	// forgets the dead instance (GossipToTheDeadTime).
	DeadNodeReclaimTime time.Duration

	// DepartedRetention is how long a dead or left member stays listed in
	// Members (and in what the Listener is told) after it departed; a dead
	// member is re-joined (see RejoinInterval) for that long. Zero: 10
	// minutes.
	DepartedRetention time.Duration

	// Keys is the gossip keyring: when not empty, all gossip (UDP packets
	// and TCP streams) is encrypted with AES-GCM under the first key, the
	// primary, and incoming gossip is decrypted with whichever key fits;
	// unencrypted gossip is refused, and so is gossip under a key not listed.
	// Each key is 16, 24 or 32 bytes (AES-128, -192, -256; NewKey makes 32).
	// The keys are copied. A running Cluster's keyring is changed with
	// AddKey, UseKey, RemoveKey and SetKeys (see the package documentation
	// for rotating a key). Empty: no encryption, and the keyring cannot be
	// set later; anyone who can reach the gossip port can join.
	Keys [][]byte

	// Label is this cluster's name on the wire: every gossip packet and
	// stream carries it, and gossip with another label (or none) is refused,
	// so that two clusters on one network never merge, even with one key.
	// With Keys it is also authenticated. At most MaxLabelLen (255)
	// bytes; it is sent in clear. Empty: no label (and gossip with a
	// label is refused).
	Label string

	// Listener is told every member known (what Members returns, with each
	// member's State) after every change. Nil: no notifications (Members
	// and Alive still work).
	Listener Listener

	// Messages, when not nil, is cluster-wide state that rides the gossip:
	// broadcasts (Cluster.Broadcast, delivered to Messages.Receive) and
	// push/pull syncs (Messages.LocalState, Messages.MergeState). Its methods
	// are called from memberlist's goroutines, possibly before New returns.
	// Nil: this member still passes on the others' broadcasts, and sends and
	// merges no state.
	Messages Messages

	// Transport, when not nil, carries this member's gossip instead of
	// memberlist's UDP and TCP sockets; BindAddr and AdvertiseAddr are then
	// ignored, and the member's address is the transport's
	// FinalAdvertiseAddr. It is meant for tests (an in-memory network that
	// can cut links). The Cluster owns it: memberlist shuts it down on
	// Close. Nil: memberlist's network transport bound to BindAddr.
	Transport memberlist.NodeAwareTransport

	// Clock is this package's time source: when members changed state (for
	// DepartedRetention) and the pause between join attempts and re-join
	// rounds. memberlist's
	// own timers (probes, gossip, suspicion) run on the runtime's clock.
	// Required: a node passes its one clock to every package.
	Clock clock.Clock

	// Logger receives this package's logs and memberlist's own log lines
	// (at their level: memberlist's [DEBUG] at debug, [ERR] at error).
	// memberlist's warnings and errors (one per refused gossip packet) are
	// logged at most 10 at once and 5 a second, and counted by kind in
	// ringlimit_gossip_errors_total (log.go). Nil: discard.
	Logger *slog.Logger

	// Resolver resolves the seeds' hostnames and SRV names. Nil:
	// net.DefaultResolver (the system's resolver configuration).
	Resolver Resolver

	// Registerer receives memberlist's own metrics (memberlist_gossip,
	// memberlist_msg_alive, memberlist_msg_suspect, memberlist_probeNode,
	// memberlist_health_score, ...: see metrics.go for how they get there
	// from go-metrics' global sink, and which exist from the start). Nil:
	// memberlist's metrics go nowhere.
	Registerer prometheus.Registerer
}

// Resolver is the part of *net.Resolver that resolving seeds needs.
type Resolver interface {
	LookupHost(ctx context.Context, host string) ([]string, error)
	LookupSRV(ctx context.Context, service, proto, name string) (string, []*net.SRV, error)
}

// DefaultLANConfig returns memberlist's LAN timings (memberlist.DefaultLANConfig:
// 1s probes, 500ms probe timeout, suspicion 4 × log10(N) probe intervals) and
// binds gossip to 0.0.0.0:7946. Name, PeerAddr and Clock must still be set.
// A crash is detected in roughly 5 to 10 seconds in a small cluster.
func DefaultLANConfig() Config {
	ml := memberlist.DefaultLANConfig()
	return Config{
		BindAddr:                net.JoinHostPort(ml.BindAddr, strconv.Itoa(ml.BindPort)),
		JoinRetryInterval:       time.Second,
		RejoinInterval:          2 * time.Second,
		ProbeInterval:           ml.ProbeInterval,
		ProbeTimeout:            ml.ProbeTimeout,
		SuspicionMult:           ml.SuspicionMult,
		SuspicionMaxTimeoutMult: ml.SuspicionMaxTimeoutMult,
		GossipInterval:          ml.GossipInterval,
		GossipToTheDeadTime:     ml.GossipToTheDeadTime,
		PushPullInterval:        ml.PushPullInterval,
		TCPTimeout:              ml.TCPTimeout,
		DeadNodeReclaimTime:     ml.DeadNodeReclaimTime,
		DepartedRetention:       10 * time.Minute,
	}
}

// DefaultLocalConfig returns DefaultLANConfig tuned for members on one
// machine (loopback, tests, a laptop), binding 127.0.0.1 on a free port.
//
// It is tuned so that every survivor drops a crashed member from Alive
// within 2 seconds in a small cluster:
//
//	probe wait  ≤ 2-3 × 200ms   (round robin over the other members)
//	probe fails    1 × 200ms   (ProbeTimeout 100ms, then indirect + TCP until the interval ends)
//	suspect        4 × 200ms   (SuspicionMult 4; log10(N) ≤ 1 up to 10 members)
//	gossip      ≈ 50ms
//
// which is about 1.1s on average and under 1.7s at worst for 3 members
// (measured on loopback with -race: 1.13 to 1.36s; 1.15 to 1.55s with 4 to 8
// members). From 4 members on, memberlist waits for 2 confirmations of the
// suspicion, and without them the suspicion lasts up to
// SuspicionMaxTimeoutMult × 800ms; that multiplier is 2 (LAN: 6) so that a
// cluster that lost the confirming members still decides in about 2.5s. The price: a member that stalls for about a
// second (long GC pause, starved CPU, debugger breakpoint) can be declared
// dead and has to refute, so do not use these timings across a real network.
// GossipToTheDeadTime (2s) and PushPullInterval (5s) are shortened so that a
// wrongly-declared-dead member is corrected and a dead name forgotten quickly;
// TCPTimeout is 1s because loopback answers at once; RejoinInterval is 1s,
// so a healed partition re-forms within a few seconds.
func DefaultLocalConfig() Config {
	c := DefaultLANConfig()
	c.BindAddr = "127.0.0.1:0"
	c.JoinRetryInterval = 250 * time.Millisecond
	c.RejoinInterval = time.Second
	c.ProbeInterval = 200 * time.Millisecond
	c.ProbeTimeout = 100 * time.Millisecond
	c.SuspicionMult = 4
	c.SuspicionMaxTimeoutMult = 2
	c.GossipInterval = 50 * time.Millisecond
	c.GossipToTheDeadTime = 2 * time.Second
	c.PushPullInterval = 5 * time.Second
	c.TCPTimeout = time.Second
	return c
}

// withDefaults returns a copy of c whose zero durations and multipliers are
// replaced by the DefaultLANConfig values.
func (c *Config) withDefaults() Config {
	d := DefaultLANConfig()
	out := *c
	out.Seeds = append([]string(nil), c.Seeds...)
	if c.Keys != nil {
		out.Keys = cloneKeys(c.Keys)
	}
	setDur := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	setDur(&out.JoinRetryInterval, d.JoinRetryInterval)
	setDur(&out.RejoinInterval, d.RejoinInterval)
	setDur(&out.ProbeInterval, d.ProbeInterval)
	setDur(&out.ProbeTimeout, d.ProbeTimeout)
	setDur(&out.GossipInterval, d.GossipInterval)
	setDur(&out.GossipToTheDeadTime, d.GossipToTheDeadTime)
	setDur(&out.PushPullInterval, d.PushPullInterval)
	setDur(&out.TCPTimeout, d.TCPTimeout)
	setDur(&out.DepartedRetention, d.DepartedRetention)
	if out.Resolver == nil {
		out.Resolver = net.DefaultResolver
	}
	if out.SuspicionMult == 0 {
		out.SuspicionMult = d.SuspicionMult
	}
	if out.SuspicionMaxTimeoutMult == 0 {
		out.SuspicionMaxTimeoutMult = d.SuspicionMaxTimeoutMult
	}
	return out
}
