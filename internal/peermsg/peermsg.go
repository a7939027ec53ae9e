package peermsg

import (
	"errors"
	"time"

	"github.com/ringlimit/ringlimit/adaptive"
	"github.com/ringlimit/ringlimit/bucket"
)

// Request is one check a node sends to the key's owner.
type Request struct {
	Key   string
	Limit bucket.Limit
	Cost  int64
	// Refund gives Cost back instead of spending it.
	Refund bool
	// Lease, when > 0, asks the owner for a lease of up to this many
	// tokens with the check (token bucket only).
	Lease int64
	// Final asks the receiver to decide on its store even where its ring
	// names another owner (the sender's last hop: a stand-in for an
	// unreachable owner, or a redirected check).
	Final bool
	// Sync asks the owner to answer an admitted check only once the key's
	// successors acknowledged its spend (replication: sync).
	Sync bool
	// ReserveTTL, when > 0, asks the owner to record a reservation of an
	// admitted check, settleable for this long (token bucket only).
	ReserveTTL time.Duration
	// Peek asks the owner what the check would answer now, spending
	// nothing: no key is created, nothing replicated, no lease granted.
	Peek bool
	// Adaptive, when not nil, is the layer's adaptive limit: the owner
	// decides the check with the key's controller's current limit in place
	// of Limit's count (adaptive.go). AdaptiveScope names the layer.
	Adaptive      *adaptive.Spec
	AdaptiveScope string
}

// Answer is the owner's decision on one Request.
type Answer struct {
	Allowed    bool
	Remaining  int64
	RetryAfter time.Duration
	ResetAfter time.Duration
	Delay      time.Duration
	// LeaseGranted tokens are leased to the asking node for LeaseTTL.
	LeaseGranted int64
	LeaseTTL     time.Duration
	// Redirect is non-empty when the receiver did not decide because its
	// ring names another owner: ask that member; nothing was spent. The
	// other fields are then zero.
	Redirect string
	// Full is true when the key was new to the owner and its store had no
	// room for it: nothing was spent, and the sender decides the check in
	// its failure mode. The decision fields then refuse, with a retry of
	// one second, for a sender that does not know Full (fail_closed).
	Full bool
	// Reservation is the id of the reservation an admitted check with
	// ReserveTTL recorded.
	Reservation string
	// Limit is the count the owner decided under when it is not the
	// request's (an adaptive limit's current value); 0 otherwise.
	Limit int64
}

// Decision returns a as a bucket.Decision under a limit of count.
func (a *Answer) Decision(count int64) bucket.Decision {
	return bucket.Decision{Allowed: a.Allowed, Limit: count, Remaining: a.Remaining,
		RetryAfter: a.RetryAfter, ResetAfter: a.ResetAfter, Delay: a.Delay}
}

// SetDecision fills a's decision fields from d.
func (a *Answer) SetDecision(d *bucket.Decision) {
	a.Allowed, a.Remaining, a.RetryAfter, a.ResetAfter, a.Delay = d.Allowed, d.Remaining, d.RetryAfter, d.ResetAfter, d.Delay
}

// State is one key's bucket state as it moves between nodes: the cost spent
// under Limit at the time it was read.
type State struct {
	Key   string
	Limit bucket.Limit
	Used  int64
	// ResetAt is the sender's tombstone for the key: its clock when the
	// key was last reset, 0 for none (see forward's tombstones).
	ResetAt int64
	// Reservations are the key's reservation records, settled or not.
	Reservations []Reservation
	// LeaseSet is true for a concurrency key's state: Leases is then the
	// key's whole set of live leases (possibly none), under Limit.
	LeaseSet bool
	Leases   []Lease
	// RingVersion is, for a lease set handed off, the sender's ring
	// version when it sent it.
	RingVersion uint64
	// Adaptive is the owner's controller of the key, when it runs one.
	Adaptive *AdaptiveState
	// Window is, for a fixed window, the start of the window Used counts
	// in on the sender's clock (bucket.Snapshot.Window); 0 otherwise.
	Window int64
	// Full, in a handoff, says Used is the sender's whole copy of the key,
	// not only what it spent since its last push (see forward's Restore).
	Full bool
}

// Reservation is one reservation record as it moves with its key's state.
type Reservation struct {
	ID       string
	Reserved int64
	// TTL is how long it stays settleable, from when the state was read.
	TTL         time.Duration
	Settled     bool
	SettledCost int64
}

// SettleStatus is how a key's owner answered a settle.
type SettleStatus uint8

const (
	// SettleOK: settled now.
	SettleOK SettleStatus = iota
	// SettleNotFound: no such reservation (unknown, forged or expired).
	SettleNotFound
	// SettleAlreadySettled: settled before; nothing changed.
	SettleAlreadySettled
	// SettleRedirect: the receiver's ring names another owner
	// (SettleAnswer.Redirect); nothing changed.
	SettleRedirect
)

// SettleAnswer is the owner's answer to a settle.
type SettleAnswer struct {
	Status    SettleStatus
	Redirect  string
	Remaining int64
	Limit     int64
	Owner     string
}

// ResetAnswer is a member's answer to a reset (Peer.Reset).
type ResetAnswer struct {
	// LeaseDropped is the tokens of the key's hot-key lease the member
	// held and dropped.
	LeaseDropped int64
	// For a reset sent to the key's owner (ResetAt 0): what a check of
	// cost 1 found remaining before, the node that reset the key, and the
	// members that did not acknowledge it before their peer deadline.
	Previous    int64
	Owner       string
	Unconfirmed []string
	// Redirect is set, alone, when the receiver's ring names another
	// owner: nothing was reset.
	Redirect string
}

// ErrBusy fails a check sent to a peer whose queue is full: MaxQueue calls
// already wait for a batch slot (the peer is slow or not answering). The
// call fails at once instead of waiting, and nothing of it is sent; the
// peer is not known to be down, so a caller should answer the check
// without it (its failure mode) and not stop asking the peer.
var ErrBusy = errors.New("peer: queue full")

// Limits on what one peer message may carry. A received message over a
// limit is refused whole (InvalidArgument) and nothing of it is applied.
// The senders stay well under them: batches of peer.Config.Batch.MaxBatch
// checks (512 by default, at most MaxCheckBatch), and forward's chunks of
// 512 handoff states and 1,024 replicated states. The limits are twice the
// chunks so that a node that sends larger chunks is still understood by
// an older one during a rolling upgrade.
const (
	// MaxCheckBatch is the most checks one batch on a Check stream may
	// carry.
	MaxCheckBatch = 1024
	// MaxHandoffStates is the most bucket states one Handoff call may
	// carry.
	MaxHandoffStates = 1024
	// MaxReplicateStates is the most bucket states one Replicate call may
	// carry.
	MaxReplicateStates = 2048
)
