package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/ringlimit/ringlimit/policy"
)

// runPolicy reloads the policy on SIGHUP and when its file changes, and
// expires overrides, until ctx ends.
func runPolicy(ctx context.Context, log *slog.Logger, pol *policy.Manager) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	watched := make(chan struct{})
	defer func() { <-watched }()
	go func() {
		defer close(watched)
		if err := pol.Watch(ctx); err != nil {
			log.Error("policy file not watched; SIGHUP still reloads", "err", err)
		}
	}()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			pol.Reload("sighup")
		case <-tick.C:
			pol.Expire()
		}
	}
}

// slogWriter turns audit lines into log records when no --audit-log is set.
type slogWriter struct{ log *slog.Logger }

func (w slogWriter) Write(p []byte) (int, error) {
	w.log.Info("audit", "entry", json.RawMessage(p[:len(p)-1]))
	return len(p), nil
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }
