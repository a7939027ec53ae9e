package peer

import (
	"context"
	"sync/atomic"

	"google.golang.org/grpc/mem"

	"github.com/ringlimit/ringlimit/bucket"
)

// What the external tests (package peer_test, which run real forward.Routers
// as the Handler) need of the transport's insides.

// CodecName is the content-subtype of the Check streams between nodes.
const CodecName = codecName

// SetTestHookOpened sets a hook that runs on the batcher's loop after a new
// Check stream is open and before its first batch is added; broken reports
// whether that stream has broken already. nil removes it.
func SetTestHookOpened(f func(broken func() bool)) {
	if f == nil {
		testHookOpened = nil
		return
	}
	testHookOpened = func(s *stream) {
		f(func() bool {
			s.mu.Lock()
			defer s.mu.Unlock()
			return s.broken
		})
	}
}

// EncodeBatch returns the Check stream message of a batch from the node
// from: one check of cost 1 under l per key.
func EncodeBatch(from string, keys []string, l bucket.Limit) []byte {
	m := checkBatch{from: from, id: 1}
	w := toWireLimit(&l)
	for _, k := range keys {
		m.checks = append(m.checks, wireCheck{key: k, limit: w, cost: 1})
	}
	return m.appendTo(nil)
}

// OwnerPath is the owner's side of forwarded batches as a Check stream
// runs it, on one reused batch: decode, decide through the Server, encode
// the answer.
type OwnerPath struct {
	s  *Server
	pb *received
}

// NewOwnerPath returns the owner's path through s.
func NewOwnerPath(s *Server) *OwnerPath { return &OwnerPath{s: s, pb: new(received)} }

// RoundTrip returns a function that decodes msg, decides it and encodes
// the answer (and frees the encoded buffer, as gRPC does).
func (o *OwnerPath) RoundTrip(ctx context.Context, msg []byte) func() error {
	in := mem.BufferSlice{mem.SliceBuffer(msg)}
	var codec peerCodec
	return func() error {
		if err := codec.Unmarshal(in, &o.pb.in); err != nil {
			return err
		}
		o.s.decide(ctx, o.pb)
		out, err := codec.Marshal(&o.pb.out)
		if err != nil {
			return err
		}
		out.Free()
		return nil
	}
}

// Decide decides the last decoded batch again.
func (o *OwnerPath) Decide(ctx context.Context) { o.s.decide(ctx, o.pb) }

// Answer summarises the last answer: how many decisions, whether the last
// one allowed, and the batch's error.
func (o *OwnerPath) Answer() (decisions int, lastAllowed bool, err string) {
	out := &o.pb.out
	if n := len(out.decisions); n > 0 {
		lastAllowed = out.decisions[n-1].allowed
	}
	return len(out.decisions), lastAllowed, out.err
}

// CountYields makes every yield of the CPU after a peer write count
// instead, until restore is called; count returns how many there were.
func CountYields() (count func() int64, restore func()) {
	var n atomic.Int64
	f := func() { n.Add(1) }
	yieldHook.Store(&f)
	return n.Load, func() { yieldHook.Store(nil) }
}

// ReverseLinked reports whether p sends its batches for the named peer on
// the stream that peer opened.
func ReverseLinked(p *Pool, name string) bool { return p.rev.link(name) != nil }
