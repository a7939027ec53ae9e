// Package grpcmetrics counts the calls a gRPC server handles, by service,
// method and status code, and times them, as Prometheus metrics:
//
//	ringlimit_grpc_server_handled_total{server,service,method,code}
//	ringlimit_grpc_server_handling_seconds{server,service,method}  (histogram)
//
// server names the server ("public", "peer"); one Metrics serves several
// servers. Labels are bounded: grpc-go calls the interceptors only for the
// methods of registered services (an unknown method is answered
// Unimplemented before them), and code is one of the 17 gRPC codes. A
// stream's time is its whole life (a peer's Check stream lives as long as
// its connection), so read the histogram per method.
//
// Init, after the services are registered, makes every method's methodSeries
// exist from the start (count 0 with code OK), so that rates and alerts
// have a methodSeries before the first call.
package grpcmetrics

import (
	"context"
	"maps"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Buckets are the handling-time histogram's buckets, in seconds: a check
// takes tens of microseconds on its owner, a forwarded one a loopback or
// LAN round trip, a stream lives for minutes.
var Buckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 10, 60}

// Metrics are the collectors of the gRPC servers of one node. It is safe
// for concurrent use.
type Metrics struct {
	handled  *prometheus.CounterVec
	handling *prometheus.HistogramVec
	// known holds the series of the methods Init saw, resolved once, so
	// that a call ending OK looks up no labels. Copied on write.
	known atomic.Pointer[map[methodKey]*methodSeries]
}

type methodKey struct{ server, fullMethod string }

// methodSeries are one method's collectors: its OK counter and its histogram.
type methodSeries struct {
	service, method string
	ok              prometheus.Counter
	handling        prometheus.Observer
}

// New registers the collectors on reg.
func New(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		handled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ringlimit_grpc_server_handled_total",
			Help: "gRPC calls completed by this node's servers (public: the API, Envoy RLS, health; peer: other nodes), by service, method and status code.",
		}, []string{"server", "service", "method", "code"}),
		handling: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ringlimit_grpc_server_handling_seconds",
			Help:    "Time from a gRPC call's start to its end (a stream's whole life), by server, service and method.",
			Buckets: Buckets,
		}, []string{"server", "service", "method"}),
	}
	for _, c := range []prometheus.Collector{m.handled, m.handling} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// ServerOptions are the interceptors that record the calls of the server
// named server. Chained (grpc.ChainUnaryInterceptor), they see calls after
// the interceptors given before them.
func (m *Metrics) ServerOptions(server string) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(m.UnaryInterceptor(server)),
		grpc.ChainStreamInterceptor(m.StreamInterceptor(server)),
	}
}

// UnaryInterceptor records the unary calls of the server named server.
func (m *Metrics) UnaryInterceptor(server string) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := handler(ctx, req)
		m.record(server, info.FullMethod, start, err)
		return resp, err
	}
}

// StreamInterceptor records the streaming calls of the server named server.
func (m *Metrics) StreamInterceptor(server string) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		start := time.Now()
		err := handler(srv, ss)
		m.record(server, info.FullMethod, start, err)
		return err
	}
}

func (m *Metrics) record(server, fullMethod string, start time.Time, err error) {
	if known := m.known.Load(); known != nil {
		if s := (*known)[methodKey{server, fullMethod}]; s != nil {
			if err == nil {
				s.ok.Inc()
			} else {
				m.handled.WithLabelValues(server, s.service, s.method, code(err).String()).Inc()
			}
			s.handling.Observe(time.Since(start).Seconds())
			return
		}
	}
	service, method := split(fullMethod)
	m.handled.WithLabelValues(server, service, method, code(err).String()).Inc()
	m.handling.WithLabelValues(server, service, method).Observe(time.Since(start).Seconds())
}

// Init creates the methodSeries of every method s serves, for the server named
// server, at 0 (code OK).
func (m *Metrics) Init(server string, s interface {
	GetServiceInfo() map[string]grpc.ServiceInfo
}) {
	known := map[methodKey]*methodSeries{}
	if old := m.known.Load(); old != nil {
		maps.Copy(known, *old)
	}
	for service, info := range s.GetServiceInfo() {
		for _, mi := range info.Methods {
			known[methodKey{server, "/" + service + "/" + mi.Name}] = &methodSeries{service: service, method: mi.Name,
				ok:       m.handled.WithLabelValues(server, service, mi.Name, "OK"),
				handling: m.handling.WithLabelValues(server, service, mi.Name)}
		}
	}
	m.known.Store(&known)
}

// code is the status code grpc-go answers for a handler's error: its own
// code, a context error's (Canceled, DeadlineExceeded), else Unknown.
func code(err error) codes.Code {
	if st, ok := status.FromError(err); ok {
		return st.Code()
	}
	return status.FromContextError(err).Code()
}

// split splits "/package.Service/Method".
func split(fullMethod string) (service, method string) {
	s := strings.TrimPrefix(fullMethod, "/")
	if i := strings.LastIndexByte(s, '/'); i >= 0 {
		return s[:i], s[i+1:]
	}
	return "unknown", s
}
