package reload

import (
	"context"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// Run runs every watcher (Watcher.Run) until ctx ends and, meanwhile,
// reloads each of them on SIGHUP (Watcher.Reload with reason "sighup"): the
// one place that handles the signal. It returns when every watcher has
// stopped.
func Run(ctx context.Context, ws ...*Watcher) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	run(ctx, hup, ws)
}

// run is Run on the signals sent to hup.
func run(ctx context.Context, hup <-chan os.Signal, ws []*Watcher) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, w := range ws {
		wg.Go(func() { w.Run(ctx) })
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			for _, w := range ws {
				w.Reload("sighup")
			}
		}
	}
}
