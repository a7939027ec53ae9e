package node

import (
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
