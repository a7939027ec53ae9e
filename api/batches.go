package api

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/internal/workers"
	pb "github.com/ringlimit/ringlimit/proto/ringlimitv1"
)

// MaxBatchesInFlight is how many messages of one Batches stream a node
// decides at once; it reads the stream's next message once one of them is
// answered (HTTP/2 flow control then holds the sender).
const MaxBatchesInFlight = 64

// streams are the Batches streams a node serves, told to end when it
// stops (DrainStreams).
type streams struct {
	once     sync.Once
	draining chan struct{} // closed by DrainStreams
}

// DrainStreams asks the client of every Batches stream to end it: each
// is answered a drain message once its messages in flight are answered,
// and a stream opened after it at once. A node calls it before its gRPC
// server's GracefulStop, which would otherwise wait for streams that
// never end.
func (a *API) DrainStreams() { a.streams.once.Do(func() { close(a.streams.draining) }) }

// Batches is the public gRPC Batches: each message is decided, on a
// goroutine of the stream's pool, as its Check or Leases call would be, through the unary
// interceptor Config.BatchInterceptor, and answered with its id.
func (g *grpcServer) Batches(st pb.RateLimiter_BatchesServer) error {
	ctx := st.Context()
	var sendMu sync.Mutex // Send is not safe for concurrent use
	send := func(r *pb.BatchResponse) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		return st.Send(r)
	}
	// The messages are decided on goroutines kept for the stream's life,
	// at most MaxBatchesInFlight: one started per message grew its stack
	// in the decoder and the decide path every time (4% of a node's CPU).
	run := workers.New(MaxBatchesInFlight)
	defer run.Stop()
	var wg sync.WaitGroup // the messages being decided
	defer wg.Wait()
	slots := make(chan struct{}, MaxBatchesInFlight)
	received := make(chan *pb.BatchRequest)
	recvErr := make(chan error, 1)
	stop := make(chan struct{})
	defer close(stop)
	go func() { // ends with the stream: the handler's return cancels its context
		for {
			req, err := st.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case received <- req:
			case <-stop:
				return
			}
		}
	}()
	draining := g.api.streams.draining
	for {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		}
		select {
		case req := <-received:
			wg.Add(1)
			run.Go(func() {
				defer wg.Done()
				defer func() { <-slots }()
				g.answer(ctx, req, send) // a broken stream ends Recv too
			})
		case err := <-recvErr:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		case <-draining:
			wg.Wait() // every message read has its answer first
			if err := send(&pb.BatchResponse{Drain: true}); err != nil {
				return err
			}
			draining = nil
			<-slots
			// Read on until the client closes the stream: what it sent
			// before it saw the drain is still answered.
			for {
				select {
				case req := <-received:
					g.answer(ctx, req, send)
				case err := <-recvErr:
					if errors.Is(err, io.EOF) {
						return nil
					}
					return err
				case <-ctx.Done():
					return status.FromContextError(ctx.Err()).Err()
				}
			}
		}
	}
}

// answer decides one message of a Batches stream and sends its answer,
// whose Check response is then reused (Config.ReuseBatchResponses).
func (g *grpcServer) answer(ctx context.Context, req *pb.BatchRequest, send func(*pb.BatchResponse) error) {
	var out *checkAnswer
	if g.api.reuseBatch {
		if _, ok := req.GetCall().(*pb.BatchRequest_Check); ok {
			out = checkAnswers.Get().(*checkAnswer)
		}
	}
	resp := g.batch(ctx, req, out)
	_ = send(resp) // the message is encoded by the time Send returns
	if r, ok := resp.Result.(*pb.BatchResponse_Check); ok && out != nil && r.Check == &out.resp {
		out.reuse()
	}
}

// batch decides one message of a Batches stream, answering a check in into
// when it is not nil.
func (g *grpcServer) batch(ctx context.Context, req *pb.BatchRequest, into *checkAnswer) *pb.BatchResponse {
	resp := &pb.BatchResponse{Id: req.GetId()}
	if ms := req.GetTimeoutMs(); ms > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(ms)*time.Millisecond)
		defer cancel()
	}
	var method string
	var handler grpc.UnaryHandler
	var in any
	switch c := req.GetCall().(type) {
	case *pb.BatchRequest_Check:
		method, in = pb.RateLimiter_Check_FullMethodName, c.Check
		handler = func(ctx context.Context, in any) (any, error) { return g.check(ctx, in.(*pb.CheckRequest), into) }
	case *pb.BatchRequest_Leases:
		method, in = pb.RateLimiter_Leases_FullMethodName, c.Leases
		handler = func(ctx context.Context, in any) (any, error) { return g.Leases(ctx, in.(*pb.LeasesRequest)) }
	default:
		g.api.m.invalid.WithLabelValues("grpc").Inc()
		resp.Code, resp.Message = int32(codes.InvalidArgument), "call: one of check or leases is required"
		return resp
	}
	var out any
	var err error
	if i := g.api.batchIntercept; i != nil {
		out, err = i(ctx, in, &grpc.UnaryServerInfo{Server: g, FullMethod: method}, handler)
	} else {
		out, err = handler(ctx, in)
	}
	if err != nil {
		s := status.Convert(err)
		resp.Code, resp.Message = int32(s.Code()), s.Message()
		return resp
	}
	switch r := out.(type) {
	case *pb.CheckResponse:
		resp.Result = &pb.BatchResponse_Check{Check: r}
	case *pb.LeasesResponse:
		resp.Result = &pb.BatchResponse_Leases{Leases: r}
	default:
		resp.Code, resp.Message = int32(codes.Internal), "an interceptor answered no response"
	}
	return resp
}
