package cluster

import (
	"errors"
	"fmt"
)

// Gossip metadata, as carried in memberlist's node metadata (at most
// memberlist.MetaMaxSize bytes):
//
//	byte 0     format version (metaVersion)
//	byte 1     flags (flagLeaving; unknown bits are ignored)
//	bytes 2..  the member's gRPC address, host:port
//
// A member whose metadata does not decode is not admitted to the cluster.
const (
	metaVersion = 1

	// flagLeaving is set by a member just before it leaves gracefully. Peers
	// use it to tell a departure apart from a crash: memberlist v0.7.0 reports
	// both through NotifyLeave, and the Node.State it passes there is never
	// set (it is shadowed by an internal field), so it cannot be used.
	flagLeaving = 1 << 0
)

// meta is what one member advertises to the others.
type meta struct {
	grpcAddr string
	leaving  bool
}

func encodeMeta(m meta) []byte {
	b := make([]byte, 0, metaHeaderLen+len(m.grpcAddr))
	var flags byte
	if m.leaving {
		flags |= flagLeaving
	}
	b = append(b, metaVersion, flags)
	return append(b, m.grpcAddr...)
}

func decodeMeta(b []byte) (meta, error) {
	if len(b) < metaHeaderLen {
		return meta{}, errors.New("cluster: metadata too short (not a ringlimit member?)")
	}
	if b[0] != metaVersion {
		return meta{}, fmt.Errorf("cluster: metadata format %d, want %d", b[0], metaVersion)
	}
	m := meta{grpcAddr: string(b[metaHeaderLen:]), leaving: b[1]&flagLeaving != 0}
	if err := checkDialable(m.grpcAddr); err != nil {
		return meta{}, fmt.Errorf("cluster: metadata gRPC address: %w", err)
	}
	return m, nil
}
