// Package connlimit caps the connections a net.Listener holds open at
// once, so that clients who open connections and send nothing cannot take
// every file descriptor of the process.
//
// A Listener counts the connections it has accepted and not yet closed.
// Below Config.Max it hands out every connection. At Max, it makes room
// for a new connection by closing the idlest one it holds: first a
// connection that has never read a byte and is older than Config.Grace
// (the one accepted earliest), else the one whose last read is oldest,
// when that read is at least Config.KeepGrace ago (a client's keep-alive
// connection is not closed for a flood of new, silent ones). When no connection is that idle, the new one is closed
// at once (refused) and Accept waits for the next. A new connection is
// therefore always answered while the listener is full of idle ones: a
// client that polls /healthz gets through, an attacker's silent
// connections are the ones closed.
//
// Invariants:
//   - Open never exceeds Max (Max > 0).
//   - A connection counts from Accept until its first Close, whoever calls
//     it (the server, the eviction, or both).
//   - A connection younger than Grace, or that read within KeepGrace, is
//     never evicted.
package connlimit
