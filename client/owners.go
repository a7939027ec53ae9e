package client

import (
	"sync"

	pb "github.com/ringlimit/ringlimit/proto/ringlimitv1"
	"github.com/ringlimit/ringlimit/ring"
)

// maxOwners bounds the owner cache.
const maxOwners = 1 << 17

// ownerCache remembers which node decided each key's inline checks, so
// that later checks on the key go straight to its owner and skip the
// forwarding hop, for a cluster whose ring the client cannot read (a node
// without the Ring call, or one that keeps it private). A stale entry (the ring changed) costs one forwarding hop
// until the next answer corrects it: the owner always decides. Safe for
// concurrent use.
type ownerCache struct {
	mu sync.Mutex
	m  map[string]int
}

func (o *ownerCache) get(key string) (int, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	i, ok := o.m[key]
	return i, ok
}

func (o *ownerCache) put(key string, i int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.m == nil || len(o.m) >= maxOwners {
		o.m = make(map[string]int)
	}
	o.m[key] = i
}

// keyOwner returns the indexes of the nodes to try first for check: its
// key's owner and successor on the ring (an inline check), or the node
// that answered last for the key while the ring is unknown; -1 for none.
func (c *Client) keyOwner(check *pb.Check) (first, second int) {
	if check.GetLimit() != nil {
		if t := c.ring.table.Load(); t != nil {
			p := ring.InlinePartition(check.GetKey(), len(t.owners))
			return t.owners[p], t.successor(p)
		}
	}
	if i, ok := c.owners.get(check.GetKey()); ok {
		return i, -1
	}
	return -1, -1
}

// learnOwners records which target owns each inline check's key.
func (c *Client) learnOwners(checks []*pb.Check, res []*pb.Decision) {
	if c.ring.table.Load() != nil {
		return // the ring names every owner
	}
	for i, d := range res {
		if i >= len(checks) || checks[i].GetKey() == "" || d.GetOwnerAddr() == "" {
			continue
		}
		if j, ok := c.index(d.GetOwnerAddr()); ok {
			c.owners.put(checks[i].GetKey(), j)
		}
	}
}
