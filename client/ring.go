package client

import (
	"context"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/ringlimit/ringlimit/proto/ringlimitv1"
)

// ringHintSpacing is the shortest time between two asks for the ring: an
// answer naming another version asks at once, unless the last ask was
// more recent than this.
const ringHintSpacing = 100 * time.Millisecond

// ringView is the cluster's ring as the client last read it (the gRPC
// Ring call), kept by one loop: it asks every Config.RingRefresh, and
// when an answer names another version.
type ringView struct {
	table            atomic.Pointer[ringTable] // nil: unknown; route as without a ring
	kick             chan struct{}             // an answer named another version
	done             chan struct{}             // closed when the loop has returned
	fetches, changes atomic.Int64
}

// ringTable is one version of the ring: for each partition, the index (in
// the client's nodes) of its owner, and of its successor or -1.
type ringTable struct {
	version      uint64
	owners, succ []int
}

// successor returns partition p's successor, or -1.
func (t *ringTable) successor(p int) int {
	if t.succ == nil {
		return -1
	}
	return t.succ[p]
}

func (r *ringView) start(c *Client) {
	r.kick = make(chan struct{}, 1)
	r.done = make(chan struct{})
	go r.loop(c)
}

// wait returns once the loop has (the client's context is cancelled).
func (r *ringView) wait() {
	if r.done != nil {
		<-r.done
	}
}

// hint tells the loop that a node answered with ring version v: another
// version than the table's is read again.
func (r *ringView) hint(v uint64) {
	if v == 0 || r.kick == nil {
		return
	}
	if t := r.table.Load(); t != nil && t.version == v {
		return
	}
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

func (r *ringView) loop(c *Client) {
	defer close(r.done)
	// Real time, not Config.Clock: how often the ring is read is the
	// transport's business, and a fake clock must not stop it.
	tick := time.NewTicker(c.cfg.RingRefresh)
	defer tick.Stop()
	for {
		if !r.fetch(c) {
			return // the cluster does not serve its ring to this client
		}
		spacing := time.NewTimer(ringHintSpacing)
		select {
		case <-c.ctx.Done():
			spacing.Stop()
			return
		case <-spacing.C:
		}
		select {
		case <-c.ctx.Done():
			return
		case <-r.kick:
		case <-tick.C:
		}
	}
}

// fetch asks the nodes in turn for the ring until one answers, and keeps
// a new version. It returns false when a node answered that it will not
// serve the ring (a node without the call, or one that keeps its members
// private from this client): the client then routes as without a ring.
func (r *ringView) fetch(c *Client) bool {
	ctx := c.ctx
	if c.cfg.AdminToken != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+c.cfg.AdminToken)
	}
	var known uint64
	if t := r.table.Load(); t != nil {
		known = t.version
	}
	var buf [16]*node
	for _, n := range c.order(buf[:0], 0, -1) { // not the checks' turn-taking
		cctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
		resp, err := n.rpc.Ring(cctx, &pb.RingRequest{KnownVersion: known})
		cancel()
		switch status.Code(err) {
		case codes.OK:
			r.fetches.Add(1)
			r.keep(c, resp)
			return true
		case codes.Unimplemented, codes.PermissionDenied, codes.Unauthenticated:
			r.table.Store(nil)
			return false
		}
		if c.ctx.Err() != nil {
			return true
		}
	}
	return true // no node answered: keep what we have, ask again later
}

// keep makes resp the table, unless it is the one held or empty (a node
// with no ring yet: the table held stays). It connects to members the
// client does not reach yet.
func (r *ringView) keep(c *Client, resp *pb.RingResponse) {
	members := resp.GetMembers()
	if resp.GetVersion() == 0 || len(members) == 0 || len(resp.GetOwners()) == 0 {
		return
	}
	index := make([]int, len(members))
	for i, m := range members {
		j, err := c.add(m.GetAddr())
		if err != nil {
			return // an address the client cannot dial: keep the old table
		}
		index[i] = j
	}
	t := &ringTable{version: resp.GetVersion(), owners: make([]int, len(resp.GetOwners()))}
	for p, m := range resp.GetOwners() {
		if int(m) >= len(index) {
			return
		}
		t.owners[p] = index[m]
	}
	if s := resp.GetSuccessors(); len(s) == len(t.owners) {
		t.succ = make([]int, len(s))
		for p, m := range s {
			if int(m) >= len(index) {
				return
			}
			t.succ[p] = index[m]
		}
	}
	r.table.Store(t)
	r.changes.Add(1)
}
