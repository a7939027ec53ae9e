package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/ringlimit/ringlimit/internal/oteltrace"
	"github.com/ringlimit/ringlimit/node"
)

// run starts a node and serves until ctx is cancelled, then shuts down
// gracefully. It returns nil after a clean shutdown. tune, when not nil,
// tunes the process's garbage collector for --gc-headroom while the node
// runs and returns the function that stops it: main passes gctune.Tune; tests,
// which run several nodes in one process, pass nil.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer, tune func(headroom uint64) (stop func())) error {
	if ok, err := subcommand(args, getenv, os.Stdout, stderr); ok {
		return err
	}
	cfg, err := parseConfig(args, getenv, os.Stdout)
	if err != nil {
		return &exitError{code: 2, err: err} // a usage error; --help is none, and main exits 0
	}
	if cfg.newGossipKey {
		return node.PrintNewKey(os.Stdout)
	}
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: cfg.logLevel}))
	if tune != nil {
		defer tune(uint64(cfg.gcHeadroomMiB) << 20)()
	}
	tr, err := oteltrace.New(ctx, getenv, cfg.Name, nodeVersion(), os.Stdout)
	if err != nil {
		return err
	}
	if tr.TP != nil {
		cfg.Tracer = tr.TP
		log.Info("tracing on", "exporters", tr.Exporters)
		defer func() { // after the node closed: its last spans are flushed
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := tr.Shutdown(sctx); err != nil {
				log.Warn("tracing shutdown", "err", err)
			}
		}()
	}
	n, err := startNode(ctx, cfg, log)
	if err != nil {
		return err
	}
	if cfg.pprofAddr != "" {
		stop, _, err := node.ServePprof(cfg.pprofAddr, log, n.AdminTokens())
		if err != nil {
			n.Close(context.Background())
			return fmt.Errorf("--pprof: %w", err)
		}
		defer stop()
	}
	<-ctx.Done()
	log.Info("shutting down", "reason", context.Cause(ctx))
	sctx, cancel := context.WithTimeout(context.Background(), cfg.shutdownTimeout)
	defer cancel()
	return n.Close(sctx)
}

// startNode starts the node cfg describes, logging to log, with this
// build's version (node.Start).
func startNode(ctx context.Context, cfg config, log *slog.Logger) (*node.Node, error) {
	nc := cfg.Config
	nc.Logger = log
	nc.Version, nc.Commit, _ = buildInfo()
	return node.Start(ctx, nc)
}
