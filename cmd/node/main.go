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
	"os"
	"os/signal"
	"syscall"

	"github.com/ringlimit/ringlimit/internal/gctune"
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
