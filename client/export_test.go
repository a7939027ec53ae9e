package client

import (
	"net/http"

	pb "github.com/ringlimit/ringlimit/proto/ringlimitv1"
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
func QueuedLeaseOps(c *Client, i int) int { return c.nodes[i].lb.Queued() }
