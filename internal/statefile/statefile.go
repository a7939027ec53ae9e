// Package statefile writes and reads a node's state file: one payload
// (the node's encoded state) behind a header that names the format, its
// version, the node and cluster it belongs to and when it was written, and
// a checksum of all of it. A file is replaced whole (written beside it,
// synced, renamed over it, the directory synced), so a crash leaves the
// previous file or the new one, never a mix; a file that was cut short,
// changed, written by another version or for another node is refused with
// an error that says which.
package statefile

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/cespare/xxhash/v2"
)

// Name is the state file's name in its directory.
const Name = "ringlimit.state"

// Version is the format this package writes and the only one it reads.
const Version = 1

// magic opens every state file.
var magic = []byte("RINGLIMIT-STATE\n")

// MaxPayload bounds a payload: 4 GiB, far above what a node's store holds.
const MaxPayload = 4 << 30

var (
	// ErrCorrupt: the file is cut short, is not a state file, or does not
	// match its checksum.
	ErrCorrupt = errors.New("statefile: corrupt")
	// ErrVersion: the file is of a format version this build does not read.
	ErrVersion = errors.New("statefile: unknown version")
	// ErrForeign: the file belongs to another node or cluster.
	ErrForeign = errors.New("statefile: another node's")
)

// Header is what a state file says of itself.
type Header struct {
	Node    string // the node that wrote it
	Cluster string // its --cluster-name ("" none)
	At      int64  // when its state was read, Unix nanoseconds on the node's clock
}

// Encode returns the file's bytes for h and payload.
func Encode(h Header, payload []byte) []byte {
	b := make([]byte, 0, len(magic)+4+2*binary.MaxVarintLen64+len(h.Node)+len(h.Cluster)+8+binary.MaxVarintLen64+len(payload)+8)
	b = append(b, magic...)
	b = binary.BigEndian.AppendUint32(b, Version)
	b = binary.AppendUvarint(b, uint64(len(h.Node)))
	b = append(b, h.Node...)
	b = binary.AppendUvarint(b, uint64(len(h.Cluster)))
	b = append(b, h.Cluster...)
	b = binary.BigEndian.AppendUint64(b, uint64(h.At))
	b = binary.AppendUvarint(b, uint64(len(payload)))
	b = append(b, payload...)
	return binary.BigEndian.AppendUint64(b, xxhash.Sum64(b))
}

// Decode reads a file's bytes: its header and payload (which aliases b).
// Its error wraps ErrCorrupt or ErrVersion.
func Decode(b []byte) (Header, []byte, error) {
	var h Header
	if len(b) < len(magic) || !bytes.Equal(b[:len(magic)], magic) {
		return h, nil, fmt.Errorf("%w: not a ringlimit state file", ErrCorrupt)
	}
	if len(b) < len(magic)+4+8 {
		return h, nil, fmt.Errorf("%w: cut short at %d bytes", ErrCorrupt, len(b))
	}
	body, sum := b[:len(b)-8], binary.BigEndian.Uint64(b[len(b)-8:])
	if v := binary.BigEndian.Uint32(b[len(magic):]); v != Version {
		return h, nil, fmt.Errorf("%w %d (this build reads version %d)", ErrVersion, v, Version)
	}
	if xxhash.Sum64(body) != sum {
		return h, nil, fmt.Errorf("%w: checksum mismatch (%d bytes: cut short or changed)", ErrCorrupt, len(b))
	}
	r := body[len(magic)+4:]
	str := func() (string, bool) {
		n, k := binary.Uvarint(r)
		if k <= 0 || n > uint64(len(r)-k) {
			return "", false
		}
		s := string(r[k : k+int(n)])
		r = r[k+int(n):]
		return s, true
	}
	var ok bool
	if h.Node, ok = str(); !ok {
		return h, nil, fmt.Errorf("%w: bad header", ErrCorrupt)
	}
	if h.Cluster, ok = str(); !ok || len(r) < 8 {
		return h, nil, fmt.Errorf("%w: bad header", ErrCorrupt)
	}
	h.At, r = int64(binary.BigEndian.Uint64(r)), r[8:]
	n, k := binary.Uvarint(r)
	if k <= 0 || n != uint64(len(r)-k) || n > MaxPayload {
		return h, nil, fmt.Errorf("%w: payload length %d does not match the file", ErrCorrupt, n)
	}
	return h, r[k:], nil
}

// Write replaces dir's state file with h and payload: written to a
// temporary file in dir, synced, renamed over the file, and dir synced.
// It returns the bytes written.
func Write(dir string, h Header, payload []byte) (int, error) {
	b := Encode(h, payload)
	f, err := os.CreateTemp(dir, "."+Name+"-*")
	if err != nil {
		return 0, fmt.Errorf("statefile: %w", err)
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, Name))
	}
	if err != nil {
		os.Remove(tmp)
		return 0, fmt.Errorf("statefile: %w", err)
	}
	if d, err := os.Open(dir); err == nil { // the rename is durable once the directory is
		err = d.Sync()
		d.Close()
		if err != nil {
			return 0, fmt.Errorf("statefile: sync %s: %w", dir, err)
		}
	}
	return len(b), nil
}

// Read returns dir's state file, refusing one that belongs to another
// node or cluster (ErrForeign) as well as a corrupt one (ErrCorrupt,
// ErrVersion). A directory without one answers an error wrapping
// fs.ErrNotExist.
func Read(dir, node, cluster string) (Header, []byte, error) {
	b, err := os.ReadFile(filepath.Join(dir, Name))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return Header{}, nil, err
		}
		return Header{}, nil, fmt.Errorf("statefile: %w", err)
	}
	h, payload, err := Decode(b)
	if err != nil {
		return h, nil, err
	}
	if h.Node != node || h.Cluster != cluster {
		return h, nil, fmt.Errorf("%w: written by node %q of cluster %q, this is node %q of cluster %q", ErrForeign, h.Node, h.Cluster, node, cluster)
	}
	return h, payload, nil
}
