package peer

import "errors"

// ErrBusy fails a check sent to a peer whose queue is full: MaxQueue calls
// already wait for a batch slot (the peer is slow or not answering). The
// call fails at once instead of waiting, and nothing of it is sent; the
// peer is not known to be down, so a caller should answer the check
// without it (its failure mode) and not stop asking the peer.
var ErrBusy = errors.New("peer: queue full")

// Limits on what one peer message may carry. A received message over a
// limit is refused whole (InvalidArgument) and nothing of it is applied.
// The senders stay well under them: batches of Config.Batch.MaxBatch
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

// MaxMessageBytes is the largest gRPC message a node receives, on the peer
// service and the public API alike (grpc.MaxRecvMsgSize; it is also
// grpc-go's default). The largest legitimate message is a Replicate call
// of MaxReplicateStates states with keys of bucket.MaxKeyLen (1,024) bytes:
// about 1,100 bytes a state (key, a limit of at most 44 bytes, the spend,
// the framing), 2.3 MB in all; a Check batch of MaxCheckBatch and a public
// CheckRequest of api.MaxBatch (1,000) checks are about half that.
const MaxMessageBytes = 4 << 20
