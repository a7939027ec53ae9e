// Package node is a ringlimit node as a library: what ringlimit-node runs,
// for a program (or a test) to start in its own process.
//
// A Node is configured by one Config, started by Start and stopped by
// Close:
//
//	cfg := node.DefaultLocalConfig() // loopback, free ports
//	cfg.Name = "node-1"
//	n, err := node.Start(ctx, cfg)
//	if err != nil { ... }
//	defer n.Close(context.Background())
//	// serve clients at n.GRPCAddr() and n.HTTPAddr(); n.Router() checks in process
//
// Invariants:
//   - Start validates the Config (Config.Validate) and changes nothing in it;
//     when a step fails, everything the steps before opened is closed.
//   - One Clock, one Logger and one Registerer serve every part of the node;
//     a nil Logger discards, a nil Registerer keeps the metrics to the node
//     (served on its /metrics).
//   - Close runs the shutdown in order: readiness off (and DrainDelay), leave
//     the cluster, hand the buckets off, wait for forwarded checks to end
//     (QuiesceTimeout, QuiesceIdle), stop the servers after the checks in
//     flight, close peer connections and gossip, stop the background work.
//     It is safe to call more than once; later calls return the first's
//     result.
//   - A node becomes ready (Ready, /readyz, grpc.health.v1) once joined, on its
//     own ring, not in a minority and with its ring settled, and stays ready
//     until Close starts.
//
// The methods of Node are safe for concurrent use.
package node
