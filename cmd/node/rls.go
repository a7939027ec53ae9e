package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/ringlimit/ringlimit/api"
	"github.com/ringlimit/ringlimit/rls"
)

// rlsConfig is api.Config.RLS for the manager m: the configuration in
// force.
func rlsConfig(m *rls.Manager) api.RLSConfig {
	return func() api.RLSMatcher {
		if c := m.Current(); c != nil {
			return c
		}
		return nil
	}
}

// runRLS reloads the --rls-config files when they change and on SIGHUP,
// until ctx ends.
func runRLS(ctx context.Context, log *slog.Logger, m *rls.Manager) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	watched := make(chan struct{})
	defer func() { <-watched }()
	go func() {
		defer close(watched)
		if err := m.Watch(ctx); err != nil {
			log.Error("--rls-config not watched; SIGHUP still reloads", "err", err)
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			m.Reload("sighup")
		}
	}
}
