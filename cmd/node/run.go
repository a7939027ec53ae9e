package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"

	"github.com/ringlimit/ringlimit/api"
	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/forward"
)

// run starts a node and serves until ctx is cancelled, then shuts down
// gracefully. It returns nil after a clean shutdown.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	cfg, err := parseConfig(args, getenv, stderr)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: cfg.logLevel}))
	n, err := startNode(cfg, log)
	if err != nil {
		return err
	}
	<-ctx.Done()
	log.Info("shutting down", "reason", context.Cause(ctx))
	sctx, cancel := context.WithTimeout(context.Background(), cfg.shutdownTimeout)
	defer cancel()
	return n.Close(sctx)
}

// node is a running node: its listeners and servers.
type node struct {
	log        *slog.Logger
	httpLn     net.Listener
	grpcLn     net.Listener
	httpServer *http.Server
	grpcServer *grpc.Server
	store      *bucket.Store
	served     chan error // one value per server when it stops
	closeOnce  sync.Once
	closeErr   error
}

// startNode binds the listeners (so that a bad address fails at once) and
// starts serving in the background.
func startNode(cfg config, log *slog.Logger) (*node, error) {
	shards := bucket.DefaultShards
	for shards > 1 && cfg.maxKeys < shards {
		shards /= 2
	}
	store, err := bucket.NewStore(bucket.StoreConfig{MaxKeys: cfg.maxKeys, Shards: shards})
	if err != nil {
		return nil, err
	}
	router, err := forward.New(forward.Config{Self: cfg.name, Store: store})
	if err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	a, err := api.New(api.Config{Checker: router, Stats: store, Registerer: reg, Gatherer: reg, Logger: log})
	if err != nil {
		return nil, err
	}
	httpLn, err := net.Listen("tcp", cfg.httpAddr)
	if err != nil {
		return nil, fmt.Errorf("--http: %w", err)
	}
	grpcLn, err := net.Listen("tcp", cfg.grpcAddr)
	if err != nil {
		httpLn.Close()
		return nil, fmt.Errorf("--grpc: %w", err)
	}
	n := &node{
		log:    log,
		httpLn: httpLn,
		grpcLn: grpcLn,
		httpServer: &http.Server{
			Handler:           a.Handler(nil),
			ReadHeaderTimeout: 5 * time.Second,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		},
		grpcServer: grpc.NewServer(),
		store:      store,
		served:     make(chan error, 2),
	}
	a.RegisterGRPC(n.grpcServer)
	go func() { n.served <- n.httpServer.Serve(httpLn) }()
	go func() { n.served <- n.grpcServer.Serve(grpcLn) }()
	log.Info("node started", "name", cfg.name, "http", httpLn.Addr().String(), "grpc", grpcLn.Addr().String(), "max_keys", store.Capacity())
	return n, nil
}

// Close stops accepting, waits for checks in flight until ctx ends, and
// closes the listeners. It is safe to call more than once; later calls
// return the first call's result.
func (n *node) Close(ctx context.Context) error {
	n.closeOnce.Do(func() { n.closeErr = n.shutdown(ctx) })
	return n.closeErr
}

func (n *node) shutdown(ctx context.Context) error {
	var errs []error
	grpcDone := make(chan struct{})
	go func() {
		n.grpcServer.GracefulStop()
		close(grpcDone)
	}()
	if err := n.httpServer.Shutdown(ctx); err != nil {
		errs = append(errs, fmt.Errorf("http shutdown: %w", err))
	}
	select {
	case <-grpcDone:
	case <-ctx.Done():
		n.grpcServer.Stop()
		<-grpcDone
		errs = append(errs, fmt.Errorf("grpc shutdown: %w", ctx.Err()))
	}
	for range 2 {
		if err := <-n.served; err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, grpc.ErrServerStopped) {
			errs = append(errs, err)
		}
	}
	err := errors.Join(errs...)
	if err == nil {
		n.log.Info("node stopped")
	}
	return err
}
