package node

import (
	"cmp"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringlimit/ringlimit/internal/reload"
)

// reloaders returns a reload.Watcher for every file the node reloads: the
// policy file, the RLS configuration, the certificates, the gossip key
// file and the admin token file (admin, when not nil). reload.Run runs
// them and reloads them all on SIGHUP. Those without a counter of their
// own are counted in ringlimit_reload_total, registered in reg.
// peerCertsChanged runs after each change of the peer certificates.
func (n *Node) reloaders(cfg Config, log *slog.Logger, reg prometheus.Registerer, admin *tokenFile, peerCertsChanged func()) ([]*reload.Watcher, error) {
	counter := reload.NewCounter()
	if err := reg.Register(counter); err != nil {
		return nil, err
	}
	results := func(what string) *prometheus.CounterVec {
		return counter.MustCurryWith(prometheus.Labels{"what": what})
	}
	var ws []*reload.Watcher
	if n.policy != nil {
		ws = append(ws, n.policy.Watcher())
	}
	if n.rls != nil {
		ws = append(ws, n.rls.Watcher())
	}
	base := reload.Config{Clock: n.clock, Logger: log}
	certs := base
	certs.Poll = cmp.Or(cfg.CertPoll, certPoll)
	cws, err := n.certs.watchers(certs, counter, peerCertsChanged)
	if err != nil {
		return nil, err
	}
	ws = append(ws, cws...)
	if cfg.GossipKeyFile != "" {
		keys := base
		keys.Poll, keys.Results = cmp.Or(cfg.KeyFilePoll, keyFilePoll), results("gossip_keys")
		w, err := keyFileWatcher(keys, cfg.GossipKeyFile, n.cluster)
		if err != nil {
			return nil, err
		}
		ws = append(ws, w)
	}
	if admin != nil {
		tokens := base
		tokens.Poll, tokens.Results = tokenPoll, results("admin_tokens")
		w, err := admin.watcher(tokens)
		if err != nil {
			return nil, err
		}
		ws = append(ws, w)
	}
	return ws, nil
}
