package node

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// watchFiles runs watch (a configuration's file watcher) until ctx ends,
// calls reload on every SIGHUP meanwhile, and, when tick is not nil, calls
// it every second. what names the files in the log.
func watchFiles(ctx context.Context, log *slog.Logger, what string, watch func(context.Context) error, reload func(), tick func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	watched := make(chan struct{})
	defer func() { <-watched }()
	go func() {
		defer close(watched)
		if err := watch(ctx); err != nil {
			log.Error(what+" not watched; SIGHUP still reloads", "err", err)
		}
	}()
	var ticks <-chan time.Time
	if tick != nil {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		ticks = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			reload()
		case <-ticks:
			tick()
		}
	}
}
