package cluster

import (
	"net"
	"slices"
	"strconv"

	"github.com/hashicorp/memberlist"
)

// eventLoop delivers the member list (Members) to the Listener, one call at
// a time, whenever it changed. Until the first join it delivers nothing: a
// member given seeds that has not reached one is not a cluster of its own,
// and its Listener must not route every key to it. While an attempt at the
// first join is in flight it waits for the attempt's end, which kicks it
// again: a member that joins is told at once every member its seed knew,
// never some of them (its ring would give their keys to members that hold
// none of their state).
func (c *Cluster) eventLoop() {
	defer close(c.eventsDone)
	var last []Member
	delivered := false
	for {
		select {
		case <-c.stopEvents:
			return
		case <-c.kick:
		}
		if c.joining.Load() || !c.joined.Load() {
			continue
		}
		members := c.Members()
		if delivered && slices.Equal(members, last) {
			continue
		}
		last, delivered = members, true
		if c.cfg.Listener != nil {
			c.cfg.Listener.MembersChanged(slices.Clone(members))
		}
	}
}

// changed wakes eventLoop without ever blocking (memberlist calls us with
// its locks held).
func (c *Cluster) changed() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// upsert records that member n is alive with metadata m.
func (c *Cluster) upsert(n *memberlist.Node, m meta) {
	name, tag := splitInstance(n.Name)
	c.mu.Lock()
	r, ok := c.members[n.Name]
	if !ok {
		r = &record{tag: tag}
		c.members[n.Name] = r
	}
	back := ok && r.m.State == StateDead
	if r.m.State != StateAlive {
		r.since = c.clock.Now()
	}
	r.m = Member{
		Name:       name,
		PeerAddr:   m.peerAddr,
		APIAddr:    m.apiAddr,
		HTTPAddr:   m.httpAddr,
		GossipAddr: net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port))),
		State:      StateAlive,
	}
	r.leaving = m.leaving
	addr := r.m.GossipAddr
	c.mu.Unlock()
	if back {
		c.log.Info("cluster: member is back after being declared dead", "member", name, "gossip", addr)
	}
	if !ok && name == c.cfg.Name && n.Name != c.mlName {
		c.log.Error("cluster: another process gossips under this member's name; the later one stands for it", "member", name,
			"instance", n.Name, "gossip", addr, "this_instance", c.mlName)
	} else if !ok && tag != "" {
		c.log.Info("cluster: member instance joined", "member", name, "instance", n.Name, "gossip", addr)
	}
	if name != c.cfg.Name && !c.joined.Load() && !c.joining.Load() {
		select { // another member joined this one: no need to wait for the next attempt
		case c.joinNow <- struct{}{}:
		default:
		}
	}
	c.changed()
}

// setState moves the member instance of memberlist name mlName from one of
// the states in from to state to.
func (c *Cluster) setState(mlName string, to State, from ...State) {
	c.mu.Lock()
	r, ok := c.members[mlName]
	moved := ok && slices.Contains(from, r.m.State)
	if moved {
		r.m.State = to
		r.since = c.clock.Now()
	}
	c.mu.Unlock()
	if moved {
		c.changed()
	}
}

// departed records that the member instance of memberlist name mlName died
// or left: left if its metadata announced a graceful leave, dead otherwise.
func (c *Cluster) departed(mlName string) {
	c.mu.Lock()
	r, ok := c.members[mlName]
	var state State
	if ok {
		state = StateDead
		if r.leaving {
			state = StateLeft
		}
		r.m.State = state
		r.since = c.clock.Now()
		c.pruneLocked(r.since)
	}
	c.mu.Unlock()
	if ok {
		c.log.Info("cluster: member departed", "member", r.m.Name, "instance", mlName, "state", state)
		c.changed()
	}
}

// suspected is called when this member's own probe of the instance named
// mlName failed.
func (c *Cluster) suspected(mlName string) {
	c.setState(mlName, StateSuspect, StateAlive)
}
