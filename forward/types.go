package forward

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ringlimit/ringlimit/adaptive"
	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/internal/peermsg"
)

// Owners is the hash ring as the router needs it: who owns a key, who is
// on it, and a version that changes with membership. Implementations are
// immutable and safe for concurrent use (ring.Ring).
type Owners interface {
	// Owner returns the member that owns key; an error on an empty ring.
	Owner(key string) (string, error)
	Has(name string) bool
	Len() int
	Members() []string
	Version() uint64
	// AppendSuccessors appends to dst up to n members that would own key,
	// in order, if the owner and the successors before each left the ring.
	AppendSuccessors(dst []string, key string, n int) []string
	// Partitions returns the owner of each partition, in partition order
	// (Router.Partitions: the body of GET /v1/ring).
	Partitions() []string
	// SuccessorTable returns, for each partition, the member that would
	// own it if its owner left; nil with fewer than two members.
	SuccessorTable() []string
}

// Peers reaches the other members (peer.Pool): the data plane the router
// uses for checks (CheckSender), key state (StateMover) and replicas
// (ReplicaSender), and the membership it keeps the transport told of
// (Membership). Each part is declared by the piece of the router that uses
// it. Status, such as how many keys the members hold, is not the router's:
// a node asks its peer.Pool itself. Its methods are safe for concurrent
// use.
type Peers interface {
	CheckSender
	StateMover
	ReplicaSender
	Membership
	Resetter
}

// CheckSender sends checks to their owner (standin.go).
type CheckSender interface {
	// Check sends checks to their owner name and returns who decided. It
	// neither keeps reqs nor writes out once it returns: the router hands
	// both to its next checks.
	Check(ctx context.Context, name string, reqs []peermsg.Request, out []peermsg.Answer) (string, error)
}

// StateMover moves key states between owners after a ring change
// (handoff.go).
type StateMover interface {
	// Fetch asks name (a member or one that just left) for key's state.
	Fetch(ctx context.Context, name, key string, l *bucket.Limit) (peermsg.State, bool, error)
	// Handoff pushes states to the member name.
	Handoff(ctx context.Context, name string, states []peermsg.State) error
}

// ReplicaSender sends an owner's key states to its successors
// (replicate.go).
type ReplicaSender interface {
	// Replicate sends an owner's absolute key states to its successor name.
	Replicate(ctx context.Context, name string, states []peermsg.State) (int, error)
}

// Membership is the transport's view of the members (members.go,
// Router.Addr).
type Membership interface {
	// SetMembers tells it the ring version every batch carries, and the
	// members and their peer addresses.
	SetMembers(version uint64, addrs map[string]string)
	// Addr returns a member's peer address.
	Addr(name string) string
}

// Check is one limit check: spend Cost of Key under Limit; Mode says what
// to do when the owner cannot be reached.
type Check struct {
	Key   string
	Limit bucket.Limit
	Cost  int64
	Mode  bucket.FailureMode
	// Prelimit, when ≥ 1, lets the entry node shed a flood on a key it does
	// not own without a network hop: a local sliding window counter at
	// Prelimit × the limit's capacity per Per rejects first. The owner stays
	// the authority for everything the pre-limiter lets through.
	Prelimit float64
	// Refund gives Cost back to the key instead of spending it: for the
	// layers that admitted a request another layer rejected. Best effort:
	// an unreachable owner is not retried, and the Result is empty.
	Refund bool
	// Lease lets this node, when it does not own the key, admit from a
	// short lease of the key's tokens granted by the owner (token bucket
	// only; see lease.go).
	Lease bool
	// Sync holds an admitted check's answer until the key's successors
	// acknowledged its spend (replication: sync): a crash of the owner
	// right after the answer loses none of it. Without a live successor
	// the answer is given as without Sync and counted
	// (ringlimit_replication_unconfirmed_total).
	Sync bool
	// Peek asks what the check would answer now and spends nothing: the
	// owner decides it with bucket.Store.Peek; it is never admitted from a
	// lease, never counted by the pre-limiter, never held for replication
	// and marks nothing for it. An unreachable owner's failure mode
	// answers as for a check, spending nothing (Local peeks at this
	// node's share).
	Peek bool
	// Together, when not 0, groups the checks of one request (its layers):
	// when the pre-limiter sheds one of them, the others of the group are
	// neither sent nor spent, and come back Skipped.
	Together int32
	// Reserve, when > 0, makes an admitted check record a reservation on
	// the key's owner, settleable for this long (Router.Settle), and
	// Result.Reservation name it. Token bucket only; never admitted from a
	// lease. A degraded answer carries no reservation.
	Reserve time.Duration
	// Adaptive, when not nil, is the layer's adaptive limit: the key's
	// owner decides the check with its controller's current limit in place
	// of Limit's count (adaptive.go), and the Result's Limit is that limit.
	// Never admitted from a lease. AdaptiveScope names the layer, for the
	// owner's metrics and status.
	Adaptive      *adaptive.Spec
	AdaptiveScope string
	// forwarded marks a check another node sent this one to decide
	// (Decide), whose failure mode the peer protocol does not carry: a new
	// key the store has no room for is answered full (Result.full), and
	// the sender decides it in its own failure mode.
	forwarded bool
}

// Result is the answer to one Check.
type Result struct {
	bucket.Decision
	// Owner is the name of the node that decided.
	Owner string
	// OwnerAddr is the decider's address when known.
	OwnerAddr string
	// Degraded is true when the owner could not be reached and the check's
	// failure mode decided instead.
	Degraded bool
	// Shed is true when the entry node's pre-limiter rejected the check
	// without asking the owner.
	Shed bool
	// Skipped is true when another check of the same Together group was
	// shed, so this one was not decided at all.
	Skipped bool
	// Leased is true when the check was admitted from a token lease held
	// by this node; Remaining is then what the lease has left.
	Leased bool
	// Reservation is the id of the reservation an admitted check with
	// Reserve recorded; empty otherwise.
	Reservation string
	// full is true for a forwarded check whose new key the store had no
	// room for: nothing was spent, and the Decision refuses for one second
	// (what a sender that does not know peermsg.Answer.Full keeps).
	full bool
}

// Member is a node and the address of its peer service.
type Member struct {
	Name string
	Addr string
	// APIAddr is the address of the member's public API, reported to
	// clients as the OwnerAddr of the checks it decides (so that a client
	// can send a key's checks to its owner). Empty: Addr is reported.
	APIAddr string
	// Down is true for a member that died (not one that left): it is off
	// the ring, but it still counts towards the quorum, so that the side of
	// a partition that sees fewer than a majority does not take over the
	// keys of the side it cannot see.
	Down bool
}

// ErrInvalid wraps every error caused by a bad check; callers map it to
// INVALID_ARGUMENT / 400.
var ErrInvalid = errors.New("invalid check")

// ErrUnavailable wraps errors where no node could decide a check and its
// failure mode does not say what to answer; callers map it to 503 /
// UNAVAILABLE.
var ErrUnavailable = errors.New("owner unavailable")

// ValidateChecks returns an error wrapping ErrInvalid that names the first
// bad check (by index), or nil.
func ValidateChecks(checks []Check) error {
	for i := range checks {
		c := &checks[i]
		if err := bucket.CheckKey(c.Key); err != nil {
			return fmt.Errorf("%w: checks[%d].key: %w", ErrInvalid, i, err)
		}
		if !c.Limit.Valid() {
			return fmt.Errorf("%w: checks[%d].limit: missing", ErrInvalid, i)
		}
		if c.Limit.Algorithm() == bucket.Concurrency {
			return fmt.Errorf("%w: checks[%d].limit.algorithm: a concurrency limit is acquired (POST /v1/acquire), not checked", ErrInvalid, i)
		}
		if err := c.Limit.CheckCost(c.Cost); err != nil {
			return fmt.Errorf("%w: checks[%d].cost: %w", ErrInvalid, i, err)
		}
		if !c.Mode.Valid() {
			return fmt.Errorf("%w: checks[%d].failure_mode: %v", ErrInvalid, i, c.Mode)
		}
		if c.Peek && c.Refund {
			return fmt.Errorf("%w: checks[%d].peek: a refund cannot peek", ErrInvalid, i)
		}
		if c.Lease {
			if err := bucket.CheckLease(c.Limit.Algorithm()); err != nil {
				return fmt.Errorf("%w: checks[%d].%w", ErrInvalid, i, err)
			}
		}
		if c.Reserve != 0 {
			if err := bucket.CheckReserve(c.Limit.Algorithm()); err != nil {
				return fmt.Errorf("%w: checks[%d].%w", ErrInvalid, i, err)
			}
			if err := bucket.CheckReserveTTL("reserve_ttl", c.Reserve); err != nil {
				return fmt.Errorf("%w: checks[%d].%w", ErrInvalid, i, err)
			}
		}
		if err := bucket.CheckPrelimit(c.Prelimit); err != nil {
			return fmt.Errorf("%w: checks[%d].%w", ErrInvalid, i, err)
		}
		if c.Adaptive != nil {
			if err := c.Adaptive.Validate(); err != nil {
				return fmt.Errorf("%w: checks[%d].%w", ErrInvalid, i, err)
			}
		}
	}
	return nil
}
