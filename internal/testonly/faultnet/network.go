package faultnet

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// NetworkName is what Addr.Network returns.
const NetworkName = "faultnet"

// gossipPort is the port of every node's memberlist address (see Transport).
const gossipPort = 7946

// firstEphemeralPort is the first local port given to the dialing end of a
// connection, per node.
const firstEphemeralPort = 49152

// maxNodes bounds how many node names one Network can tell apart: each gets
// its own fake IP address 127.77.x.y.
const maxNodes = 1 << 16

var (
	// ErrReset is the error, wrapped in a *net.OpError, of every read and
	// write on a connection after Network.Reset broke it.
	ErrReset = errors.New("faultnet: connection reset")
	// ErrRefused is the error, wrapped in a *net.OpError, of a dial to an
	// address where nothing listens.
	ErrRefused = errors.New("faultnet: connection refused")
)

// Addr is a faultnet address: the node that owns it, and its host:port
// text. Listener and connection addresses are Addr values, so a server can
// tell which node a connection comes from (for gRPC, peer.FromContext(ctx)
// .Addr.(faultnet.Addr).Node).
type Addr struct {
	Node     string // the node that owns the address
	HostPort string // "node-1:1" for listeners, "127.77.0.1:7946" for memberlist
}

// Network returns "faultnet".
func (a Addr) Network() string { return NetworkName }

// String returns a.HostPort.
func (a Addr) String() string { return a.HostPort }

// LinkStats counts what crossed one directed link, from → to, since the
// Network was created. It is a plain value. Bytes and packets are counted
// before the receiver gets them, so once a test has received something it
// sees it counted; a packet being handed over when its Transport shuts down
// moves from Packets to PacketsDropped.
type LinkStats struct {
	Bytes          uint64 // stream bytes read by the receiving end
	BytesDropped   uint64 // stream bytes discarded unread (Reset, receiver closed, Network.Close)
	Packets        uint64 // packets handed to the receiving Transport's PacketCh
	PacketsDropped uint64 // packets lost: cut link, Drop, no receiver, receiver's queue full or shut down
}

// Network is an in-memory network of named nodes whose links can be cut,
// delayed and made lossy while traffic flows (see the package
// documentation for the semantics).
//
// Create it with New and stop it with Close. Node names are strings made of
// letters, digits, '.', '_' and '-' ("node-1") that do not read as an IP
// address; a node exists as soon as a name is used.
//
// Concurrency: every method is safe for concurrent use, including fault
// changes while connections and packets are in flight.
type Network struct {
	done chan struct{} // closed by Close

	mu         sync.Mutex // guards the fields below; never held while taking a pipe's or a listener's mutex
	closed     bool
	changed    signal               // notified after every change of a link's fault state
	nodes      map[string]*nodeInfo // by name
	byIP       map[string]string    // fake IP → node name
	links      map[linkKey]*linkState
	cuts       map[linkKey]bool // explicit one-way cuts
	isolated   map[string]bool
	endpoints  map[string]endpoint   // stream endpoints by canonical host:port
	transports map[string]*Transport // live transports by node name
	pairs      map[*pair]struct{}    // open connections

	wg sync.WaitGroup // the Transports' delivery goroutines
}

type nodeInfo struct {
	ip        string
	nextPort  int
	ephemeral int
}

type linkKey struct{ from, to string }

// linkState is the fault state and the counters of one directed link. The
// effective fields are written under Network.mu and read without it.
type linkState struct {
	cut   atomic.Bool   // effective: explicit cut or either end isolated
	delay atomic.Int64  // time.Duration
	drop  atomic.Uint64 // math.Float64bits of the loss probability

	bytes          atomic.Uint64
	bytesDropped   atomic.Uint64
	packets        atomic.Uint64
	packetsDropped atomic.Uint64
}

func (l *linkState) delayed() time.Duration { return time.Duration(l.delay.Load()) }

// lose draws whether one packet is lost to Drop.
func (l *linkState) lose() bool {
	p := math.Float64frombits(l.drop.Load())
	return p > 0 && rand.Float64() < p
}

// signal wakes every goroutine waiting on it. The zero value is ready. It is
// guarded by its owner's mutex.
type signal struct{ ch chan struct{} }

func (s *signal) wait() <-chan struct{} {
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.ch
}

func (s *signal) notify() {
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
}

// New returns an empty Network with every link up. Close it when done.
func New() *Network {
	return &Network{
		done:       make(chan struct{}),
		nodes:      make(map[string]*nodeInfo),
		byIP:       make(map[string]string),
		links:      make(map[linkKey]*linkState),
		cuts:       make(map[linkKey]bool),
		isolated:   make(map[string]bool),
		endpoints:  make(map[string]endpoint),
		transports: make(map[string]*Transport),
		pairs:      make(map[*pair]struct{}),
	}
}

// Close stops the Network: listeners and Transports shut down, every
// connection is closed, blocked calls return net.ErrClosed (wrapped), and
// every goroutine of the package has returned when Close returns. Later
// calls that create things fail; fault setters still work but matter no
// more. Close is idempotent.
func (n *Network) Close() {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return
	}
	n.closed = true
	close(n.done)
	var eps []endpoint
	for _, ep := range n.endpoints {
		eps = append(eps, ep)
	}
	pairs := make([]*pair, 0, len(n.pairs))
	for p := range n.pairs {
		pairs = append(pairs, p)
	}
	clear(n.pairs)
	n.mu.Unlock()

	for _, ep := range eps {
		ep.shut()
	}
	for _, p := range pairs {
		p.ends[0].Close()
		p.ends[1].Close()
	}
	n.wg.Wait()
}

// checkNode validates a node name.
func checkNode(name string) error {
	if name == "" || len(name) > 64 {
		return fmt.Errorf("faultnet: node name %q must have 1 to 64 characters", name)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Errorf("faultnet: node name %q may only have letters, digits, '.', '_' and '-'", name)
		}
	}
	if net.ParseIP(name) != nil {
		return fmt.Errorf("faultnet: node name %q reads as an IP address", name)
	}
	return nil
}

// node returns what the Network knows of a node, giving it a fake IP the
// first time. Callers hold n.mu and have validated the name.
func (n *Network) node(name string) (*nodeInfo, error) {
	if ni := n.nodes[name]; ni != nil {
		return ni, nil
	}
	i := len(n.nodes) + 1
	if i >= maxNodes {
		return nil, fmt.Errorf("faultnet: more than %d nodes", maxNodes-1)
	}
	ip := net.IPv4(127, 77, byte(i>>8), byte(i)).String()
	ni := &nodeInfo{ip: ip, nextPort: 1, ephemeral: firstEphemeralPort}
	n.nodes[name] = ni
	n.byIP[ip] = name
	return ni, nil
}

// resolve turns a dialed or sent-to address into the node that owns its
// host and the canonical key of the address. A host that is a node name
// needs no prior use; an IP host must be a node's fake IP. Callers hold n.mu.
func (n *Network) resolve(addr string) (node, key string, err error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return "", "", fmt.Errorf("faultnet: %w", err)
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return "", "", fmt.Errorf("faultnet: port %q of %q is not a number in [0, 65535]", portStr, addr)
	}
	if ip := net.ParseIP(host); ip != nil {
		name, ok := n.byIP[ip.String()]
		if !ok {
			return "", "", fmt.Errorf("faultnet: no route to host %s (not a node's address)", host)
		}
		return name, net.JoinHostPort(ip.String(), strconv.Itoa(int(port))), nil
	}
	if err := checkNode(host); err != nil {
		return "", "", err
	}
	if _, err := n.node(host); err != nil {
		return "", "", err
	}
	return host, net.JoinHostPort(host, strconv.Itoa(int(port))), nil
}

// opError wraps err the way the net package does.
func opError(op string, src, dst net.Addr, err error) error {
	return &net.OpError{Op: op, Net: NetworkName, Source: src, Addr: dst, Err: err}
}
