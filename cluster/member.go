package cluster

// State is a member's state as this member sees it.
type State string

const (
	// StateAlive: the member answers probes.
	StateAlive State = "alive"
	// StateSuspect: this member's own latest probe of it failed; unless it
	// refutes, it will be declared dead after the suspicion timeout. A
	// suspect member stays in Alive (it still owns its keys). Best effort:
	// memberlist v0.7.0 raises no event for suspicion, so this is derived
	// from this member's own probes; a suspicion learned only from gossip
	// shows as alive, and a suspect member becomes alive again on the next
	// probe it answers.
	StateSuspect State = "suspect"
	// StateDead: the member stopped answering and was declared failed.
	StateDead State = "dead"
	// StateLeft: the member left gracefully (Leave or Close).
	StateLeft State = "left"
)

// onRing reports whether a member in state s belongs on the hash ring.
func (s State) onRing() bool { return s == StateAlive || s == StateSuspect }

// Member is one member of the cluster as this member sees it. It is a plain
// value; the slices returned by Members, Alive and passed to Listener are
// fresh copies that the caller may keep and modify.
type Member struct {
	Name       string // unique name (Config.Name)
	PeerAddr   string // peer gRPC address, host:port, from the member's metadata
	APIAddr    string // public gRPC address, host:port, from the member's metadata ("" if not advertised)
	HTTPAddr   string // public HTTP address, host:port, from the member's metadata ("" if not advertised)
	GossipAddr string // gossip address, host:port
	State      State
}

// Listener is told every member this member knows, each with its State:
// alive and suspect members, and those that died or left within
// Config.DepartedRetention — exactly what Cluster.Members returns, sorted by
// name, this member included (as StateLeft once it left). It is called after
// every change of that list (a member added, changing state or metadata, or
// forgotten once DepartedRetention has passed), starting when this member
// has joined (see Cluster.Joined): right after New when it has no seeds,
// otherwise with every member it knows once a seed answered or another
// member joined it. A member that has not joined is told nothing. The
// members that belong on the hash ring are the alive and suspect ones; a
// dead member (not left) may come back, a left one is gone for good.
//
// Concurrency: MembersChanged is called from a single goroutine owned by the
// Cluster, one call at a time, in the order the changes happened. Bursts are
// coalesced: a listener that falls behind is next given the latest list, not
// every intermediate one. Calls never come from memberlist's goroutines, so a
// slow listener never delays failure detection, but it delays later
// notifications and Close; it must not block for long and must not call
// Close (Members, Alive and LocalAddr are fine). The slice is the listener's
// to keep.
type Listener interface {
	MembersChanged(members []Member)
}

// ListenerFunc adapts a function to Listener.
type ListenerFunc func(members []Member)

// MembersChanged calls f(members).
func (f ListenerFunc) MembersChanged(members []Member) { f(members) }
