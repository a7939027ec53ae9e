// Command node runs one ringlimit node: the public HTTP and gRPC APIs over a
// local bucket store.
//
// Every flag has an environment fallback, RINGLIMIT_ followed by the flag
// name in upper case with dashes as underscores (--max-keys →
// RINGLIMIT_MAX_KEYS); a flag given on the command line wins. --help (or -h,
// or help) prints the flags grouped by topic, each with its default and its
// variable, and exits 0. A flag or variable that does not parse is one line
// naming it with a hint (--check-timeout: "5" is not a duration (try 5s)),
// and exit status 2.
//
// On SIGTERM or SIGINT the node stops accepting connections, finishes the
// checks in flight (up to --shutdown-timeout) and exits 0.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/ringlimit/ringlimit/internal/gctune"
	"github.com/ringlimit/ringlimit/internal/oteltrace"
	"github.com/ringlimit/ringlimit/node"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stderr, gctune.Tune); err != nil {
		if errors.Is(err, flag.ErrHelp) { // the usage is printed: asked for, not an error
			return
		}
		fmt.Fprintln(os.Stderr, "ringlimit-node:", err)
		os.Exit(exitCode(err))
	}
}

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
