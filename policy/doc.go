// Package policy turns limits into data. A policy file (YAML) names tiers,
// per-route overrides, a global ceiling and how keys are derived; Resolve
// turns one request into the list of limit checks that apply, each on its own
// key, and Combine folds their decisions into one answer.
//
// Invariants:
//   - Every layer that applies is evaluated: route override, tier, global
//     ceiling, in that order. Any rejection rejects; the answer names the
//     scope that rejected (route:/reports, tier:free, global), the smallest
//     remaining and the largest retry-after.
//   - A layer marked dry_run is evaluated and reported as "would have
//     rejected", but never rejects.
//   - A rejected request spends nothing: Combine lists the layers that
//     admitted so that the caller refunds them (spend everything, then give
//     back on rejection: one round of RPCs in the common, admitted case, and
//     never more than the limit admitted in between).
//   - A policy is validated whole before it replaces the running one; a bad
//     file changes nothing.
//   - Every key Resolve derives is in the policy namespace
//     (bucket.NamespacePolicy): no inline or RLS check can name it. The
//     global layer is one bucket per policy unless its key says otherwise.
//   - A request's route is normalised (internal/route) before it is
//     matched, so no spelling of a path skips its route limit; route
//     patterns must be normalised themselves.
//
// Failure modes (bucket.FailureMode) and pre-limiter factors
// (bucket.CheckPrelimit) are parsed and checked once, when a file is
// loaded: a resolved Check carries them ready for forward.
//
// The package is pure apart from Manager, which reloads the file, keeps
// incident overrides and writes the audit log, reading the time from its
// Clock (ManagerConfig.Clock): overrides expire on the clock they are
// compared with, and whoever stamps an expiry reads it there (Manager.Now).
package policy
