// Package status owns the types of a node's status: what it reports of
// itself to the other nodes (Stats, the peer Stats RPC), its router's
// replication and quorum figures (Router), the cluster as it sees it
// (Cluster, the body of GET /v1/cluster), its ring (Ring, the body of
// GET /v1/ring) and one node's counts as the status page shows them
// (NodeStats). Producers (forward, peer, node) fill them; consumers (the
// peer codec, api, ui, the ringlimit CLI) read them. A new field touches
// its type here, the producer that fills it and the consumer that shows it.
//
// Invariants: status imports no project package (every other may import
// it); its types are plain values, with no behaviour beyond converting
// between a Go form (time.Duration) and a JSON form (milliseconds,
// seconds). The JSON field names are a public contract
// (docs/openapi.yaml, the status page, `ringlimit status --json`): never
// rename one.
package status
