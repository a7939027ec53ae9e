package node

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"

	"github.com/ringlimit/ringlimit/policy"
)

// runPolicy reloads the policy on SIGHUP and when its file changes, and
// expires overrides, until ctx ends.
func runPolicy(ctx context.Context, log *slog.Logger, pol *policy.Manager) {
	watchFiles(ctx, log, "policy file", pol.Watch, func() { pol.Reload("sighup") }, pol.Expire)
}

// slogWriter turns audit lines into log records when no --audit-log is set.
type slogWriter struct{ log *slog.Logger }

func (w slogWriter) Write(p []byte) (int, error) {
	w.log.Info("audit", "entry", json.RawMessage(p[:len(p)-1]))
	return len(p), nil
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }
