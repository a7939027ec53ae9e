package cluster

import (
	"errors"
	"fmt"
)

// Gossip metadata, as carried in memberlist's node metadata (at most
// memberlist.MetaMaxSize bytes):
//
//	byte 0       format version (metaVersion)
//	byte 1       flags (flagLeaving; unknown bits are ignored)
//	byte 2       p, the length of the peer address
//	byte 3       g, the length of the public gRPC address (0: none)
//	p bytes      the member's peer gRPC address, host:port
//	g bytes      the member's public gRPC address, host:port
//	the rest     the member's public HTTP address, host:port, or nothing
//
// A member whose metadata does not decode is not admitted to the cluster.
const (
	metaVersion = 3

	// flagLeaving is set by a member just before it leaves gracefully. Peers
	// use it to tell a departure apart from a crash: memberlist v0.7.0 reports
	// both through NotifyLeave, and the Node.State it passes there is never
	// set (it is shadowed by an internal field), so it cannot be used.
	flagLeaving = 1 << 0
)

// metaHeaderLen is the number of bytes encodeMeta puts before the peer
// address (format version, flags, the two addresses' lengths).
const metaHeaderLen = 4

// MaxAddrLen is the longest PeerAddr, APIAddr or HTTPAddr a member can
// advertise: the header and the three addresses fit in memberlist's limit
// of memberlist.MetaMaxSize (512) bytes of metadata.
const MaxAddrLen = 169

// meta is what one member advertises to the others.
type meta struct {
	peerAddr string
	apiAddr  string
	httpAddr string
	leaving  bool
}

func encodeMeta(m meta) []byte {
	b := make([]byte, 0, metaHeaderLen+len(m.peerAddr)+len(m.apiAddr)+len(m.httpAddr))
	var flags byte
	if m.leaving {
		flags |= flagLeaving
	}
	b = append(b, metaVersion, flags, byte(len(m.peerAddr)), byte(len(m.apiAddr)))
	b = append(b, m.peerAddr...)
	b = append(b, m.apiAddr...)
	return append(b, m.httpAddr...)
}

func decodeMeta(b []byte) (meta, error) {
	if len(b) < metaHeaderLen {
		return meta{}, errors.New("cluster: metadata too short (not a ringlimit member?)")
	}
	if b[0] != metaVersion {
		return meta{}, fmt.Errorf("cluster: metadata format %d, want %d", b[0], metaVersion)
	}
	p, g := int(b[2]), int(b[3])
	if len(b) < metaHeaderLen+p+g {
		return meta{}, fmt.Errorf("cluster: metadata of %d bytes, too short for addresses of %d and %d", len(b), p, g)
	}
	m := meta{
		peerAddr: string(b[metaHeaderLen : metaHeaderLen+p]),
		apiAddr:  string(b[metaHeaderLen+p : metaHeaderLen+p+g]),
		httpAddr: string(b[metaHeaderLen+p+g:]),
		leaving:  b[1]&flagLeaving != 0,
	}
	if err := checkDialable(m.peerAddr); err != nil {
		return meta{}, fmt.Errorf("cluster: metadata peer address: %w", err)
	}
	if m.apiAddr != "" {
		if err := checkDialable(m.apiAddr); err != nil {
			return meta{}, fmt.Errorf("cluster: metadata API address: %w", err)
		}
	}
	if m.httpAddr != "" {
		if err := checkDialable(m.httpAddr); err != nil {
			return meta{}, fmt.Errorf("cluster: metadata HTTP address: %w", err)
		}
	}
	return m, nil
}
