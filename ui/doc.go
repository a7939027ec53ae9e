// Package ui serves the status page of a node at /ui/ (GET / redirects
// there): the members and their state, the hash ring drawn partition by
// partition, each node's activity (checks per second, refusal rate,
// forwarded share, degraded answers, replication lag), the policy and RLS
// versions each runs, and the overrides in force.
//
// The page is a static file set embedded in the binary (no external
// assets) that polls one JSON endpoint, GET /ui/api/status, every second.
// The endpoint gathers everything server-side in one call (Source), and
// turns each node's cumulative counts into rates (Rates) from the samples
// of successive calls.
//
// Invariants:
//   - The page's assets are open; the status endpoint follows the rule of
//     the other read-only endpoints: open, or an admin bearer token with
//     Config.PrivateReads (api.RequireAdmin).
//   - Every answer carries a Content-Security-Policy that allows nothing
//     but the node itself: no inline script or style, no other origin.
//   - Rates are computed from the nodes' own uptimes, not this node's
//     clock: a rate is the difference of two samples of the same node over
//     the uptime between them, and a node whose uptime went back (a
//     restart) starts over.
package ui
