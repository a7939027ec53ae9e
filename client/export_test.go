package client

import (
	"net/http"

	pb "github.com/ringlimit/ringlimit/proto/ringlimitv1"
	"github.com/ringlimit/ringlimit/ring"
)

// AbandonedChecks returns how many checks c never sent because their
// caller gave up while they waited in a batcher's queue.
func AbandonedChecks(c *Client) int64 { return c.abandoned.Load() }

// ClientIP is the client IP the default IP function of a middleware with
// these TrustedProxies derives from r.
func ClientIP(r *http.Request, trustedProxies []string) (string, error) {
	cfg := MiddlewareConfig{Client: &Client{}, TrustedProxies: trustedProxies}
	trusted, err := cfg.trustedProxies()
	if err != nil {
		return "", err
	}
	return clientIP(r, trusted), nil
}

// LimitProto is l as the wire carries it, valid or not.
func LimitProto(l Limit) *pb.Limit { return l.proto() }

// QueuedLeaseOps returns how many acquires and renews wait for a batch to
// the node of target index i.
func QueuedLeaseOps(c *Client, i int) int { return c.nodes()[i].lb.Queued() }

// RingVersion returns the version of the ring c holds, 0 for none.
func RingVersion(c *Client) uint64 {
	if t := c.ring.table.Load(); t != nil {
		return t.version
	}
	return 0
}

// RingOwner returns the address of the node c sends an inline check of
// key to first, "" while it holds no ring.
func RingOwner(c *Client, key string) string {
	t := c.ring.table.Load()
	if t == nil {
		return ""
	}
	return c.nodes()[t.owners[ring.InlinePartition(key, len(t.owners))]].addr
}

// Nodes returns the addresses c reaches, Targets first.
func Nodes(c *Client) []string {
	var out []string
	for _, n := range c.nodes() {
		out = append(out, n.addr)
	}
	return out
}

// TryOrder returns the addresses c tries, in order, for an inline check
// of key, after marking the nodes of the given indexes as failed now.
func TryOrder(c *Client, key string, failed ...int) []string {
	for _, i := range failed {
		c.nodes()[i].failed.Store(int64(c.cfg.Clock.Now()))
	}
	first, second := c.keyOwner(&pb.Check{Key: key, Limit: &pb.Limit{Limit: 1, PerMs: 1000}})
	var out []string
	for _, n := range c.order(nil, first, second) {
		out = append(out, n.addr)
	}
	return out
}

// SetRing gives c a ring of one partition owned by node owner, whose
// successor is node succ.
func SetRing(c *Client, owner, succ int) {
	c.ring.table.Store(&ringTable{version: 1, owners: []int{owner}, succ: []int{succ}})
}
