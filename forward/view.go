package forward

import (
	"time"

	"github.com/ringlimit/ringlimit/clock"
)

// view is one immutable picture of the cluster: the ring keys are routed
// by, the ring before the last change, the ring without this node, and
// which members are down.
type view struct {
	// ring routes keys: the ring of the members up, or, while this node is
	// in a minority, the last ring it had with a majority. nil before the
	// first SetMembers (this node owns every key, unless Config.Joining
	// makes it a minority), and while in a minority that never had a
	// majority (no key has an owner it can reach).
	ring Owners
	prev Owners
	// others is the ring without this node: for a node that just joined,
	// where the keys it now owns were before.
	others  Owners
	changed clock.Instant // when the change that made this view happened
	// fetches is what the fetches from previous owners learned in this
	// view (fetch.go).
	fetches *fetchMarks
	// down is the members that died (not those that left).
	down map[string]bool
	// size is the number of members the quorum and failure-mode shares are
	// counted against: Config.ClusterSize, or the members up and down.
	size int
	// minority is true when fewer than a majority of size are up: this node
	// then routes by the last majority ring and answers for the keys of
	// members it cannot see in their failure mode.
	minority bool
	// joining is true before the first SetMembers of a node told to join
	// a cluster (Config.Joining): it has at least one other member, so a
	// key's limit is split in at least two shares.
	joining bool
}

func (v *view) len() int {
	if v.ring == nil {
		return 0
	}
	return v.ring.Len()
}

func (v *view) has(name string) bool { return v.ring != nil && v.ring.Has(name) }

func (v *view) version() uint64 {
	if v.ring == nil {
		return 0
	}
	return v.ring.Version()
}

// isDown reports whether name is a member that died.
func (v *view) isDown(name string) bool { return v.down[name] }

// noOwner reports whether keys have no owner this node can route to: it
// is in a minority and never saw a majority.
func (v *view) noOwner() bool { return v.minority && v.ring == nil }

// shares is how many parts a key's limit is split into when its owner
// cannot be reached: every member the quorum counts, at least 1 (2 for a
// node that has not joined yet).
func (v *view) shares() int64 {
	least := 1
	if v.joining {
		least = 2
	}
	return int64(max(v.size, v.len(), least))
}

// inGrace reports whether keys may still have to be fetched from their
// previous owner at now.
func (v *view) inGrace(now clock.Instant, grace time.Duration) bool {
	return (v.prev != nil || v.others != nil) && now.Sub(v.changed) < grace
}

// majority is how many members of size must be up for a node to take over
// the keys of members that died.
func majority(size int) int { return size/2 + 1 }

// ownerIn returns the owner of key on o, or self on an empty ring (nobody
// else can decide).
func ownerIn(o Owners, self, key string) string {
	if o == nil {
		return self
	}
	owner, err := o.Owner(key)
	if err != nil {
		return self
	}
	return owner
}
