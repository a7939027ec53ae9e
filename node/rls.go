package node

import (
	"context"
	"log/slog"

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
	watchFiles(ctx, log, "--rls-config", m.Watch, func() { m.Reload("sighup") }, nil)
}
