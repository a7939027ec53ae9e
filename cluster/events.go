package cluster

import (
	"net"
	"slices"
	"strconv"

	"github.com/hashicorp/memberlist"
)

// eventLoop delivers the member list (Members) to the Listener, one call at
// a time, whenever it changed.
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
	c.mu.Lock()
	r, ok := c.members[n.Name]
	if !ok {
		r = &record{}
		c.members[n.Name] = r
	}
	back := ok && r.m.State == StateDead
	if r.m.State != StateAlive {
		r.since = c.clock.Now()
	}
	r.m = Member{
		Name:       n.Name,
		PeerAddr:   m.peerAddr,
		APIAddr:    m.apiAddr,
		GossipAddr: net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port))),
		State:      StateAlive,
	}
	r.leaving = m.leaving
	addr := r.m.GossipAddr
	c.mu.Unlock()
	if back {
		c.log.Info("cluster: member is back after being declared dead", "member", n.Name, "gossip", addr)
	}
	c.changed()
}

// setState moves member name from one of the states in from to state to.
func (c *Cluster) setState(name string, to State, from ...State) {
	c.mu.Lock()
	r, ok := c.members[name]
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

// departed records that member name died or left: left if its metadata
// announced a graceful leave, dead otherwise.
func (c *Cluster) departed(name string) {
	c.mu.Lock()
	r, ok := c.members[name]
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
		c.log.Info("cluster: member departed", "member", name, "state", state)
		c.changed()
	}
}

// suspected is called when this member's own probe of name failed.
func (c *Cluster) suspected(name string) {
	c.setState(name, StateSuspect, StateAlive)
}
