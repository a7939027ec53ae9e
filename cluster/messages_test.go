package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"go.uber.org/goleak"

	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
)

// notes is a Messages that keeps a set of lines: a broadcast is one line, the
// state is every line known. It records every call.
type notes struct {
	mu       sync.Mutex
	lines    map[string]bool
	received []string // every Receive, in order
	merged   []string // every MergeState, in order
	big      bool     // LocalState returns MaxStateLen+1 bytes
}

func newNotes(lines ...string) *notes {
	n := &notes{lines: map[string]bool{}}
	for _, l := range lines {
		n.lines[l] = true
	}
	return n
}

func (n *notes) Receive(msg []byte) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.received = append(n.received, string(msg))
	n.lines[string(msg)] = true
}

func (n *notes) LocalState() []byte {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.big {
		return make([]byte, MaxStateLen+1)
	}
	var all []string
	for l := range n.lines {
		all = append(all, l)
	}
	slices.Sort(all)
	return []byte(strings.Join(all, "\n"))
}

func (n *notes) MergeState(state []byte) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.merged = append(n.merged, string(state))
	for l := range strings.SplitSeq(string(state), "\n") {
		if l != "" {
			n.lines[l] = true
		}
	}
}

func (n *notes) has(line string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.lines[line]
}

// count is how many times Receive was given msg.
func (n *notes) count(msg string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	c := 0
	for _, r := range n.received {
		if r == msg {
			c++
		}
	}
	return c
}

func (n *notes) receivedAll() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.received)
}

func (n *notes) mergedAll() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.merged)
}

func withMessages(m Messages) nodeOpt { return func(c *Config) { c.Messages = m } }

// drained waits until no node has a broadcast left to gossip: every copy
// that will ever be sent has been sent (received is another matter: see
// the marker in TestBroadcastReachesEveryMemberOnce).
func drained(t *testing.T, nodes ...*testNode) {
	t.Helper()
	testkit.WaitFor(t, 10*time.Second, "broadcast queues drained", func() error {
		for _, n := range nodes {
			if q := n.queue.NumQueued(); q != 0 {
				return fmt.Errorf("%s: %d broadcasts queued", n.name, q)
			}
		}
		return nil
	})
}

// TestBroadcastReachesEveryMemberOnce: three members on 127.0.0.1:0. A
// broadcast from a (one short message, one of MaxBroadcastLen bytes) reaches
// b and c exactly once each, however many copies gossip carries, and never
// comes back to a. A member that joins after the broadcasts were gossiped
// (no copy left in any queue) gets them in the push/pull sync of its join.
func TestBroadcastReachesEveryMemberOnce(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // registered first: runs after the nodes close
	na, nb, nc := newNotes(), newNotes(), newNotes()
	a := startNode(t, "a", withMessages(na))
	b := startNode(t, "b", withMessages(nb), withSeeds(a.LocalAddr()))
	c := startNode(t, "c", withMessages(nc), withSeeds(a.LocalAddr()))
	testkit.WaitFor(t, 10*time.Second, "cluster converges", func() error { return expectAlive([]*testNode{a, b, c}, a, b, c) })

	short := "override 1"
	long := strings.Repeat("x", MaxBroadcastLen)
	na.Receive([]byte(short)) // a's own state, as a Messages would record what it sends
	a.Broadcast([]byte(short))
	a.Broadcast([]byte(long))
	testkit.WaitFor(t, 10*time.Second, "both broadcasts at b and c", func() error {
		for _, n := range []struct {
			name  string
			notes *notes
		}{{"b", nb}, {"c", nc}} {
			if n.notes.count(short) == 0 || n.notes.count(long) == 0 {
				return fmt.Errorf("%s received %d messages", n.name, len(n.notes.receivedAll()))
			}
		}
		return nil
	})
	drained(t, a, b, c)
	// A marker broadcast after every copy of the two was sent: once b and
	// c have it, a copy sent before it has arrived too (loopback delivers
	// in order), so they had their chance to receive one twice.
	const marker = "marker"
	a.Broadcast([]byte(marker))
	testkit.WaitFor(t, 10*time.Second, "the marker at b and c", func() error {
		if nb.count(marker) == 0 || nc.count(marker) == 0 {
			return errors.New("not yet")
		}
		return nil
	})
	drained(t, a, b, c)
	for _, n := range []struct {
		name  string
		notes *notes
	}{{"b", nb}, {"c", nc}} {
		got := n.notes.receivedAll()
		slices.Sort(got)
		if want := []string{marker, short, long}; !slices.Equal(got, want) {
			t.Errorf("%s: Receive called with %d messages (%v...), want the two broadcasts once each", n.name, len(got), summarize(got))
		}
	}
	if got := na.receivedAll(); !slices.Equal(got, []string{short}) { // the test's own call above
		t.Errorf("a: its own broadcasts came back: %v", summarize(got))
	}

	// A late member: nothing left to gossip, so only push/pull can tell it.
	nd := newNotes()
	d := startNode(t, "d", withMessages(nd), withSeeds(b.LocalAddr()))
	testkit.WaitFor(t, 10*time.Second, "d joined", func() error { return expectAlive([]*testNode{a, b, c, d}, a, b, c, d) })
	testkit.WaitFor(t, 5*time.Second, "d has the broadcasts", func() error {
		if !nd.has(short) || !nd.has(long) {
			return fmt.Errorf("d merged %d states", len(nd.mergedAll()))
		}
		return nil
	})
	if got := nd.receivedAll(); len(got) != 0 {
		t.Errorf("d: received %d broadcasts, want none (they were gossiped before it joined)", len(got))
	}
	if merged := nd.mergedAll(); !slices.ContainsFunc(merged, func(s string) bool {
		return strings.Contains(s, short) && strings.Contains(s, long)
	}) {
		t.Errorf("d: no merged state carries both messages: %d states", len(merged))
	}
	// And the seed b merged d's (empty) state: nothing sent, nothing merged.
	if got := nb.mergedAll(); slices.Contains(got, "") {
		t.Errorf("b: MergeState called with an empty state")
	}

	for _, n := range []*testNode{d, c, b, a} {
		if err := n.Close(ctxTimeout(t, 5*time.Second)); err != nil {
			t.Errorf("Close(%s): %v", n.name, err)
		}
	}
	// After Close, Broadcast is a no-op.
	a.Broadcast([]byte("late"))
	if q := a.queue.NumQueued(); q != 0 {
		t.Errorf("a: %d broadcasts queued after Close", q)
	}
}

func summarize(msgs []string) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		if len(m) > 16 {
			m = fmt.Sprintf("%s…(%d bytes)", m[:16], len(m))
		}
		out[i] = m
	}
	return out
}

// TestBroadcastLimits: a message one byte over MaxBroadcastLen is refused
// with an error log and queues nothing; one of exactly MaxBroadcastLen is
// queued. Frames that are not ours (short, another version) are dropped
// with a warning and not delivered; a copy of a frame already seen is not
// delivered again. A state over MaxStateLen is not sent.
func TestBroadcastLimits(t *testing.T) {
	t.Parallel()
	msgs := newNotes()
	a := startNode(t, "a", withMessages(msgs))

	a.Broadcast(make([]byte, MaxBroadcastLen+1))
	if q, logged := a.queue.NumQueued(), a.log.count("cluster: broadcast not sent: too long"); q != 0 || logged != 1 {
		t.Errorf("Broadcast of %d bytes: %d queued, %d error lines; want 0 and 1", MaxBroadcastLen+1, q, logged)
	}
	a.Broadcast(make([]byte, MaxBroadcastLen))
	if q := a.queue.NumQueued(); q != 1 {
		t.Errorf("Broadcast of %d bytes: %d queued, want 1", MaxBroadcastLen, q)
	}

	frame := func(version byte, origin, seq uint64, msg string) []byte {
		b := binary.BigEndian.AppendUint64([]byte{version}, origin)
		b = binary.BigEndian.AppendUint64(b, seq)
		return append(b, msg...)
	}
	a.receive([]byte{frameVersion, 1, 2})
	a.receive(frame(frameVersion+1, 7, 1, "from the future"))
	a.receive(frame(frameVersion, 7, 1, "hello"))
	a.receive(frame(frameVersion, 7, 1, "hello"))
	a.receive(frame(frameVersion, 7, 2, "hello"))
	a.receive(frame(frameVersion, a.origin, a.seq.Load(), "our own"))
	a.receive(append(frame(frameVersion, 7, 3, ""), make([]byte, MaxBroadcastLen+1)...))
	if got := msgs.receivedAll(); !slices.Equal(got, []string{"hello", "hello"}) {
		t.Errorf("delivered %v, want hello twice (two ids)", summarize(got))
	}
	if n := a.log.count("cluster: ignoring a broadcast that is not ours"); n != 2 {
		t.Errorf("%d warnings about foreign frames, want 2", n)
	}
	if n := a.log.count("cluster: ignoring an oversized broadcast"); n != 1 {
		t.Errorf("%d warnings about an oversized frame, want 1", n)
	}
	// The two new ones are passed on (a has no peers: they wait in the queue).
	if q := a.queue.NumQueued(); q != 3 {
		t.Errorf("%d queued, want 3 (ours and the two relayed)", q)
	}

	msgs.mu.Lock()
	msgs.big = true
	msgs.mu.Unlock()
	if s := a.localState(); s != nil {
		t.Errorf("localState of %d bytes sent", len(s))
	}
	if n := a.log.count("cluster: state not sent in push/pull: too long"); n != 1 {
		t.Errorf("%d errors about the state's size, want 1", n)
	}
}

// TestMaxBroadcastLenFits: the worst case (encryption, longest label) still
// fits a maximal broadcast in one gossip packet.
func TestMaxBroadcastLenFits(t *testing.T) {
	const (
		compoundHeader = 2  // memberlist net.go compoundHeaderOverhead
		compoundEntry  = 2  // compoundOverhead
		userMsg        = 1  // userMsgOverhead
		encryption     = 45 // encryptOverhead, version 0 (the larger)
	)
	label := 2 + memberlist.LabelMaxSize
	need := MaxBroadcastLen + frameHeaderLen + compoundHeader + compoundEntry + userMsg + encryption + label
	if udp := memberlist.DefaultLANConfig().UDPBufferSize; need > udp {
		t.Errorf("a maximal broadcast needs %d bytes of a %d-byte packet", need, udp)
	}
}

// TestDepartedRetentionOnConfigClock: how long a departed member stays in
// Members is measured on Config.Clock.
func TestDepartedRetentionOnConfigClock(t *testing.T) {
	t.Parallel()
	clk := testkit.NewClock(0)
	withClock := func(c *Config) { c.Clock = clk; c.DepartedRetention = time.Minute }
	a := startNode(t, "a", withClock)
	b := startNode(t, "b", withClock, withSeeds(a.LocalAddr()))
	testkit.WaitFor(t, 10*time.Second, "cluster converges", func() error { return expectAlive([]*testNode{a, b}, a, b) })
	if err := b.Close(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 5*time.Second, "a sees b left", func() error { return expectDeparted([]*testNode{a}, "b", StateLeft) })
	clk.Advance(time.Minute)
	if err := expectDeparted([]*testNode{a}, "b", StateLeft); err != nil {
		t.Errorf("after exactly DepartedRetention: %v", err)
	}
	clk.Advance(time.Nanosecond)
	if slices.ContainsFunc(a.Members(), func(m Member) bool { return m.Name == "b" }) {
		t.Errorf("a: b still in Members() %v after DepartedRetention on the config clock", a.Members())
	}
}
