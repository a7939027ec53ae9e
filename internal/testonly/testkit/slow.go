package testkit

import (
	"context"

	"google.golang.org/grpc"
)

// SlowServer is a pair of gRPC server interceptors that hold every call
// until its context ends (the caller cancels, or its deadline passes),
// counting the calls they hold in Held: a unary call at once, a stream
// once its first message has arrived. It stands for an owner that has the
// request and never answers. Safe for concurrent use.
type SlowServer struct {
	// Held receives a value for each call held, while it has room: make it
	// with a capacity above the number of calls the test expects.
	Held chan struct{}

	first func() any
}

// NewSlowServer returns a SlowServer whose Held has room for 16 calls.
// first makes the message a stream's first request is received into (for
// the peer service, func() any { return new(peerv1.CheckRequest) }); nil
// holds a stream at once, before any message.
func NewSlowServer(first func() any) *SlowServer {
	return &SlowServer{Held: make(chan struct{}, 16), first: first}
}

// ServerOptions returns the interceptors as options for grpc.NewServer.
func (s *SlowServer) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.UnaryInterceptor(s.Unary), grpc.StreamInterceptor(s.Stream)}
}

// Unary is a grpc.UnaryServerInterceptor that holds the call.
func (s *SlowServer) Unary(ctx context.Context, _ any, _ *grpc.UnaryServerInfo, _ grpc.UnaryHandler) (any, error) {
	s.held()
	<-ctx.Done()
	return nil, ctx.Err()
}

// Stream is a grpc.StreamServerInterceptor that holds the stream once its
// first message has arrived.
func (s *SlowServer) Stream(_ any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, _ grpc.StreamHandler) error {
	if s.first != nil {
		if err := ss.RecvMsg(s.first()); err != nil {
			return err
		}
	}
	s.held()
	<-ss.Context().Done()
	return ss.Context().Err()
}

func (s *SlowServer) held() {
	select {
	case s.Held <- struct{}{}:
	default:
	}
}
