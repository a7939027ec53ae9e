package peer

import "github.com/ringlimit/ringlimit/internal/peermsg"

// ErrBusy fails a check sent to a peer whose queue is full (see
// peermsg.ErrBusy).
var ErrBusy = peermsg.ErrBusy

// Limits on what one peer message may carry (see peermsg.MaxCheckBatch).
const (
	MaxCheckBatch      = peermsg.MaxCheckBatch
	MaxHandoffStates   = peermsg.MaxHandoffStates
	MaxReplicateStates = peermsg.MaxReplicateStates
)

// MaxMessageBytes is the largest gRPC message a node receives, on the peer
// service and the public API alike (grpc.MaxRecvMsgSize; it is also
// grpc-go's default). The largest legitimate message is a Replicate call
// of MaxReplicateStates states with keys of bucket.MaxKeyLen (1,024) bytes:
// about 1,100 bytes a state (key, a limit of at most 44 bytes, the spend,
// the framing), 2.3 MB in all; a Check batch of MaxCheckBatch and a public
// CheckRequest of api.MaxBatch (1,000) checks are about half that.
const MaxMessageBytes = 4 << 20
