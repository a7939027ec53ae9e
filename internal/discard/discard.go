// Package discard holds the one convention of the library packages for
// the observability a caller may leave out: a nil *slog.Logger discards
// every record, and a nil prometheus.Registerer registers nothing (the
// collectors still count, and nobody reads them). No package falls back
// to slog.Default() or to a registry of its own behind the caller's back:
// whoever wants the logs or the metrics passes them in.
package discard

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
)

// Logger returns l, or a Logger that discards every record when l is nil.
func Logger(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	return l
}

// Registerer returns r, or a Registerer that registers nothing when r is
// nil: Register and MustRegister accept every collector (duplicates
// included) and keep none, Unregister reports false.
func Registerer(r prometheus.Registerer) prometheus.Registerer {
	if r == nil {
		return none{}
	}
	return r
}

// none is the Registerer of a nil Registerer. It is stateless and safe
// for concurrent use.
type none struct{}

func (none) Register(prometheus.Collector) error  { return nil }
func (none) MustRegister(...prometheus.Collector) {}
func (none) Unregister(prometheus.Collector) bool { return false }
