// Package faultnet is an in-memory network for in-process cluster tests,
// whose links can be cut, delayed and made lossy while traffic flows, so a
// test can partition live nodes instead of faking faults with dead
// addresses. It carries stream connections (net.Listener and a dialer, for
// gRPC or anything else over net.Conn) and memberlist gossip (a
// memberlist.NodeAwareTransport, packets and streams), between nodes named
// by strings ("node-1"). It opens no socket and sends nothing on a real
// network. It is test support: it imports only the standard library and
// memberlist, and no ringlimit package.
//
// It follows etcd raft's test network (cut, isolate, drop) and memberlist's
// MockNetwork, with faults per direction of each link.
//
// # Addresses
//
// Network.Listen(node) gives a listener at "node:port" (port 1, 2, … per
// node); Network.ListenAt reopens a given address after a restart. Network
// .Dial and Network.Dialer(from) reach any listener from node from, and every
// connection knows both ends' nodes (its addresses are Addr values). A
// node's Transport sits at "127.77.x.y:7946", a fake loopback IP per node,
// because memberlist wants an IP and a port; it is never bound.
//
// # Faults
//
// Faults apply to directed links: from → to. Every change takes effect at
// once, on connections already established and on packets in flight.
//
//   - Cut(a, b) cuts both directions; CutOneWay(from, to) cuts one; Isolate(node)
//     cuts node from every other node, including nodes named later. Heal(a, b)
//     undoes the cuts between a and b, Restore(node) undoes Isolate(node) and
//     every cut that involves node, HealAll undoes every cut and isolation. A
//     node is never cut from itself.
//   - Across a cut link a stream does what TCP does into a black hole: the
//     writer gets no error, the bytes (and a close) are held, and they are
//     delivered in order, exactly once, when the link heals. At most
//     StreamBuffer bytes are held per direction of a connection; beyond that
//     the writer blocks (write deadlines work). Reads wait (read deadlines
//     work).
//   - A dial needs both directions: across a cut link it blocks until the
//     link heals, the context ends or the dialer's Transport shuts down. A
//     dial to an address where nothing listens fails with ErrRefused.
//   - A packet is dropped when its link is cut as it is sent or as it
//     becomes due.
//   - Delay(from, to, d) delivers each byte and packet written from now on d
//     after it was written, keeping order; a dial waits the round trip.
//   - Drop(from, to, p) loses each packet from → to with probability p.
//     Streams are not affected: they are reliable, as TCP is.
//   - Reset(a, b) breaks the connections established between a and b: both
//     ends' reads and writes fail with ErrReset, whatever the link's state.
//
// Stats(from, to) counts the bytes and packets delivered and dropped on a
// link, for assertions.
//
// Closing one end of a connection sends EOF to the other end after the bytes
// before it (subject to the same faults) and makes the other end's writes
// fail at once. Network.Close closes everything and waits for the package's
// goroutines (one per live Transport), so goleak finds none of them.
//
// # Usage
//
//	n := faultnet.New()
//	defer n.Close()
//
//	lis, _ := n.Listen("node-1") // "node-1:1"
//	srv := grpc.NewServer()
//	healthpb.RegisterHealthServer(srv, health.NewServer())
//	go srv.Serve(lis)
//	defer srv.Stop()
//
//	cc, _ := grpc.NewClient("passthrough:///"+lis.Addr().String(),
//		grpc.WithContextDialer(n.Dialer("node-2")),
//		grpc.WithTransportCredentials(insecure.NewCredentials()))
//	defer cc.Close()
//
//	n.Cut("node-1", "node-2") // calls from node-2 now fail by their deadline
//	n.Heal("node-1", "node-2") // and succeed again
//
// Memberlist over the same network:
//
//	tr, _ := n.Transport("node-1")
//	cfg := memberlist.DefaultLocalConfig()
//	cfg.Name = "node-1"
//	cfg.Transport = tr
//	ml, _ := memberlist.Create(cfg)
//	defer ml.Shutdown()
//	ml.Join([]string{otherTransport.Addr().String()})
//	n.Isolate("node-1") // the others declare node-1 dead
//
// Concurrency: every exported type is safe for concurrent use; see each
// type.
package faultnet
