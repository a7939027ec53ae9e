package node

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"time"

	"github.com/ringlimit/ringlimit/clock"
	"github.com/ringlimit/ringlimit/policy"
)

// runPolicy expires overrides every second on clk until ctx ends (reloaders
// reloads the file).
func runPolicy(ctx context.Context, pol *policy.Manager, clk clock.Clock) {
	t := clk.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
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
